package relay

import (
	"context"
	"errors"
	"hash/maphash"
	"io"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Bounds of what a track remembers to deduplicate the objects of several
// publishers (§7.3): the subgroups that ended, the datagrams seen.
const (
	maxEndedSubgroups = 256
	maxSeenDatagrams  = 1024
	// catchUpWait is how long an object from a publisher ahead waits for a
	// slower one feeding the same subgroup to bring the objects in between,
	// which only it may have, before the relay gives up on them.
	catchUpWait = 500 * time.Millisecond
)

// outputs forwards a track's upstream subgroup streams and datagrams to its
// LocalTrack. Each subgroup has one downstream writer at a time, fed by
// every upstream stream of that subgroup (one per publisher): an object
// already forwarded is a duplicate and dropped; one that cannot be proven
// to follow the last one forwarded goes on a new downstream stream, the
// current one being reset (§11.3.2).
type outputs struct {
	e  *trackEntry
	mu sync.Mutex
	sg map[sgKey]*output
	// ended remembers, for subgroups no stream feeds any more, the last
	// Object ID forwarded and whether it ended the group or track, in
	// the order they ended.
	ended      map[sgKey]endedSubgroup
	endedOrder []sgKey
	dgSeen     map[wire.Location]struct{}
	dgOrder    []wire.Location
	// fps are the fingerprints of the objects forwarded last, to compare
	// their duplicates with (dedup.go); seed hashes their payloads.
	fps  []fingerprint
	seed maphash.Seed
	// malformedSeen: a duplicate that differs ended the track.
	malformedSeen bool
}

type sgKey struct{ group, subgroup uint64 }

type endedSubgroup struct {
	last  uint64
	final bool
}

// output is one subgroup of the track being forwarded. mu serializes the
// writes of the subgroup, which the SubgroupWriter takes one at a time in
// Object ID order; a write waits for slow subscribers at most
// Config.SubscriberGrace of the downstream sessions, so holding mu bounds
// only the other publishers of the same subgroup.
type output struct {
	mu    sync.Mutex
	moved *sync.Cond           // on mu: last, w or the sources changed
	w     *moqt.SubgroupWriter // nil: none open
	last  uint64               // last Object ID forwarded
	has   bool
	final bool // the last forwarded is an End of Group or End of Track object
	// fin: a publisher's stream ended (FIN) at last while another's still
	// fed the subgroup, which may go on past it: the FIN goes downstream
	// once the others end without forwarding more.
	fin     bool
	sources int // upstream streams feeding it
}

// source is one upstream subgroup stream: the last object read from it.
type source struct {
	prev    uint64
	hasPrev bool
	// first: the stream's first object is the first ever published in
	// the subgroup (FIRST_OBJECT).
	first bool
}

func (o *outputs) init(e *trackEntry) {
	o.e = e
	o.sg = map[sgKey]*output{}
	o.ended = map[sgKey]endedSubgroup{}
	o.dgSeen = map[wire.Location]struct{}{}
	o.seed = maphash.MakeSeed()
}

// attach returns the output of k for one more source.
func (o *outputs) attach(k sgKey) *output {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.sg[k]
	if out == nil {
		out = &output{}
		out.moved = sync.NewCond(&out.mu)
		if end, ok := o.ended[k]; ok {
			out.last, out.has, out.final = end.last, true, end.final
		}
		o.sg[k] = out
	}
	out.sources++
	return out
}

// detach drops a source of k; the last one's leaving moves the subgroup to
// the ended ones.
func (o *outputs) detach(k sgKey, out *output) {
	defer func() { // after o.mu: out.mu comes first
		out.mu.Lock()
		out.moved.Broadcast()
		out.mu.Unlock()
	}()
	o.mu.Lock()
	defer o.mu.Unlock()
	if out.sources--; out.sources > 0 {
		return
	}
	delete(o.sg, k)
	if !out.has {
		return
	}
	if _, ok := o.ended[k]; !ok {
		o.endedOrder = append(o.endedOrder, k)
	}
	o.ended[k] = endedSubgroup{out.last, out.final}
	if len(o.endedOrder) > maxEndedSubgroups {
		delete(o.ended, o.endedOrder[0])
		o.endedOrder = o.endedOrder[1:]
	}
}

// subgroup forwards one upstream subgroup stream to the end: objects in
// order and unmodified (§7.4, §7.7), a FIN as a FIN, a reset as a reset
// with the same code.
func (o *outputs) subgroup(r *moqt.SubgroupReader) {
	reg := o.e.reg
	hdr := r.Header()
	src := &source{first: hdr.FirstObject}
	var (
		k   sgKey
		out *output
		buf []byte
	)
	defer func() {
		if out != nil {
			o.detach(k, out)
		}
	}()
	for {
		obj, err := r.ReadObject(buf)
		streamed := errors.Is(err, moqt.ErrObjectTooLarge)
		if err != nil && !streamed {
			if out != nil {
				o.endStream(out, src, err)
			} else {
				o.unsent(hdr, err)
			}
			return
		}
		var hash uint64
		if !streamed {
			buf = obj.Payload[:0]
			hash = o.hashPayload(obj.Payload)
		}
		reg.met.ObjectsIn(1, int(r.PayloadLen()))
		if out == nil {
			k = sgKey{obj.Location.Group, obj.SubgroupID}
			out = o.attach(k)
		}
		fp := fingerprintOf(&obj, r.PayloadLen(), hash)
		st, conflict := o.write(out, src, hdr, obj, r, streamed, fp)
		if st == stepCompare { // outside out.mu: the payload may be long to come
			// A read error is the stream's: the next read reports it.
			if conflict, err = o.compare(fp, r); err == nil && conflict == "" {
				reg.met.Dropped(DropDuplicate, 1)
			}
		}
		if conflict != "" {
			o.malformed(conflict)
			st = stepStop
		}
		if st == stepStop {
			_ = r.Close()
			return
		}
	}
}

// step is what the reading of an upstream stream does after an object.
type step int

const (
	stepOn      step = iota // the next object
	stepStop                // the stream cannot go on
	stepCompare             // hash the payload of a duplicate too large to hold, and compare it
)

// write forwards obj, read from src, to out: dropped as a duplicate, added
// to the open downstream stream when it provably follows, or else on a new
// one (§11.3.2). For a streamed object (too large to read whole) the payload
// is moved from r. A duplicate is compared with the object forwarded, by
// fp: conflict says how it contradicts it (dedup.go).
func (o *outputs) write(out *output, src *source, hdr wire.SubgroupHeader, obj moqt.Object, r *moqt.SubgroupReader, streamed bool, fp fingerprint) (step, string) {
	// One return here, so that the compiler open-codes the defers:
	// writeLocked's many would make them records, at every object.
	out.mu.Lock()
	defer out.mu.Unlock()
	defer out.moved.Broadcast()
	return o.writeLocked(out, src, hdr, obj, r, streamed, fp)
}

// writeLocked is write with out.mu held.
func (o *outputs) writeLocked(out *output, src *source, hdr wire.SubgroupHeader, obj moqt.Object, r *moqt.SubgroupReader, streamed bool, fp fingerprint) (_ step, conflict string) {
	reg, track := o.e.reg, o.e.track
	id := obj.Location.Object
	o.awaitSlower(out, src, id)
	firstOfStream := !src.hasPrev
	follows := out.has && (id == out.last+1 || (src.hasPrev && src.prev <= out.last))
	src.prev, src.hasPrev = id, true
	forwarded := out.has && id <= out.last
	// A streamed object is kept once hashed, as it goes through.
	seen, conflict := o.note(fp, !streamed, !forwarded && !streamed)
	switch {
	case conflict != "":
		return stepStop, conflict
	case seen && streamed && fp.payload:
		return stepCompare, ""
	case seen || forwarded:
		reg.met.Dropped(DropDuplicate, 1)
		return stepOn, ""
	case out.final:
		// Past the End of Group or End of Track forwarded: another
		// publisher went on where the one whose end the subscribers
		// have stopped (one of two clocks of a track, stopped
		// mid-group). Passed on, it would be a Malformed Track to every
		// subscriber (§12.1); the end they have stands.
		reg.met.Dropped(DropWriteFailed, 1)
		return stepOn, ""
	}
	if out.w != nil && !follows {
		// Its objects are whole and in order: they are delivered, then
		// the reset says the subgroup may go on elsewhere (§11.3.2).
		out.w.CloseIncomplete(wire.ResetCancelled)
		out.w = nil
	}
	if out.w == nil {
		opts := moqt.SubgroupOptions{
			EndOfGroup: hdr.EndOfGroup,
			Properties: hdr.HasProperties,
			// Mode 1 only where the stream starts at the subgroup's
			// first object, which names it.
			SubgroupIDIsFirstObject: hdr.SubgroupIDMode == wire.SubgroupIDFirstObject && id == obj.SubgroupID,
			Joined:                  !(firstOfStream && src.first),
		}
		if !hdr.DefaultPriority {
			opts.Priority = wire.Some(hdr.Priority)
		}
		out.w = track.OpenSubgroup(obj.Location.Group, obj.SubgroupID, opts)
	}
	var err error
	if streamed {
		fp.hash, err = o.stream(out.w, obj, r)
	} else {
		err = out.w.WriteObject(obj)
	}
	if err != nil {
		if !streamed {
			o.forget(obj.Location)
		}
		if errors.Is(err, moqt.ErrMalformingObject) {
			// Objects of the track's publishers contradict each other
			// (§10.8, §10.9): a Malformed Track (§12.1).
			out.w.Reset(wire.ResetMalformedTrack)
			out.w = nil
			return stepStop, err.Error()
		}
		track.SetLargest(obj.Location) // received, if not forwarded (§9.20.18)
		if upErr, ok := errors.AsType[*upstreamReadError](err); ok {
			// Cut upstream inside a streamed object: its code, as
			// endStream passes a reset on.
			reg.met.Dropped(DropIncomplete, 1)
			out.w.Reset(upstreamCode(upErr.err))
			out.w = nil
			return stepStop, ""
		}
		reg.met.Dropped(DropWriteFailed, 1)
		out.w.Reset(wire.ResetInternalError)
		out.w = nil
		if streamed {
			return stepStop, ""
		}
		return stepOn, ""
	}
	out.last, out.has, out.fin = id, true, false
	out.final = obj.Status == wire.ObjectEndOfGroup || obj.Status == wire.ObjectEndOfTrack
	reg.met.ObjectsOut(1, int(r.PayloadLen()))
	if streamed {
		// Kept once hashed: another publisher's copy on another
		// subgroup may have come meanwhile.
		return stepOn, o.keep(fp)
	}
	return stepOn, ""
}

// awaitSlower holds an object that jumps ahead of what out forwarded, from
// a stream that does not prove the objects in between absent, while
// another publisher's stream feeds out: that slower publisher may be the
// only one to have them, and out, once past them, would drop them as
// duplicates. It waits at most catchUpWait; out.mu is held.
func (o *outputs) awaitSlower(out *output, src *source, id uint64) {
	if !out.has || id <= out.last+1 || (src.hasPrev && src.prev <= out.last) {
		return
	}
	expired := false
	t := time.AfterFunc(catchUpWait, func() {
		out.mu.Lock()
		expired = true
		out.moved.Broadcast()
		out.mu.Unlock()
	})
	defer t.Stop()
	for !expired && out.w != nil && id > out.last+1 && o.othersFeed(out) {
		out.moved.Wait()
	}
}

// othersFeed reports whether streams other than the caller's feed out.
func (o *outputs) othersFeed(out *output) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return out.sources > 1
}

// stream forwards a payload too large to hold as it arrives, and returns
// its hash.
func (o *outputs) stream(w *moqt.SubgroupWriter, obj moqt.Object, r *moqt.SubgroupReader) (uint64, error) {
	ow, err := w.BeginObject(obj.Location.Object, r.PayloadLen(), obj.Properties)
	if err != nil {
		return 0, err
	}
	hr := &hashingReader{r: r}
	hr.h.SetSeed(o.seed)
	if _, err := ow.ReadFrom(hr); err != nil {
		if hr.err != nil {
			// Left to the caller's Reset: Close would reset the
			// streams with CANCELLED.
			return 0, &upstreamReadError{hr.err}
		}
		_ = ow.Close()
		return 0, err
	}
	return hr.h.Sum64(), ow.Close()
}

// upstreamReadError is a streamed object's upstream read failure, as
// opposed to a failure to write it on.
type upstreamReadError struct{ err error }

func (e *upstreamReadError) Error() string { return e.err.Error() }
func (e *upstreamReadError) Unwrap() error { return e.err }

// upstreamCode is the code a downstream stream is reset with when its
// upstream stream ended with err: the upstream's reset code, or
// INTERNAL_ERROR when it was lost with its session.
func upstreamCode(err error) wire.ResetCode {
	if se, ok := errors.AsType[*moqt.StreamError](err); ok {
		return se.Code
	}
	return wire.ResetInternalError
}

// endStream handles the end of an upstream stream: a FIN closes the
// downstream stream when it holds every object up to the subgroup's end; a
// reset ends it with the same code, unless another publisher's stream
// still feeds the subgroup. A FIN while another publisher's stream feeds
// the subgroup, with no End of Group or End of Track object, waits for it
// (out.fin): that publisher may go on past where this one stopped (one of
// two clocks publishing a track ended mid-group; closing at once made the
// other's next object come after the FIN, which every subscriber took for
// a Malformed Track). Either way what was forwarded is delivered
// first (SubgroupWriter.CloseIncomplete): an upstream stream reset at the
// end of a subgroup the relay joined mid-way (§11.3.2) still carried every
// object after the join, and a plain reset downstream would lose the last
// ones its subscribers had not read yet.
//
// A reset after the group's End of Group or End of Track object, every
// object from the stream's start forwarded, can only be for objects before
// that start, since none follows the end (§11.3.2 lets a relay close on
// those objects): the downstream stream is closed, and the writer resets
// only the streams of subscriptions that cover objects published before
// its first (SubgroupOptions.Joined); a subscriber that joined after them
// gets its FIN.
func (o *outputs) endStream(out *output, src *source, err error) {
	out.mu.Lock()
	defer out.mu.Unlock()
	if out.w == nil {
		return
	}
	complete := src.hasPrev && out.has && out.last == src.prev
	var mal *moqt.MalformedTrackError
	errors.As(err, &mal)
	if err != io.EOF && complete && out.final && mal == nil {
		_ = out.w.Close()
		out.w = nil
		out.moved.Broadcast()
		return
	}
	others := o.othersFeed(out)
	switch {
	case err == io.EOF && complete && others && !out.final:
		out.fin = true
		return
	case out.fin && !others && mal == nil:
		// Another publisher's stream ended at out.last with a FIN.
		_ = out.w.Close()
		out.w = nil
		out.moved.Broadcast()
		return
	}
	if err == io.EOF {
		switch {
		case complete:
			_ = out.w.Close()
		case others: // another publisher's stream goes on with it
			return
		default:
			out.w.CloseIncomplete(wire.ResetInternalError)
		}
		out.w = nil
		out.moved.Broadcast()
		return
	}
	if others {
		return
	}
	o.e.reg.met.Dropped(DropIncomplete, 1)
	if mal != nil {
		// Nothing of a Malformed Track is passed on (§12.1). The track
		// ends as Malformed before the subgroup is reset: its End resets
		// the FETCHes its cache serves, which the reset would complete
		// with a FIN instead. End is network I/O: out.mu is let go.
		w := out.w
		out.w = nil
		out.mu.Unlock()
		o.e.mu.Lock()
		track := o.e.track
		o.e.mu.Unlock()
		if track != nil {
			track.End(wire.DoneMalformedTrack, "malformed track upstream")
		}
		w.Reset(wire.ResetMalformedTrack)
		out.mu.Lock()
		return
	}
	out.w.CloseIncomplete(upstreamCode(err))
	out.w = nil
}

// unsent handles an upstream stream that ended before any object of it was
// read: reset, or lost with its session, inside its first object or
// before it. Unless another publisher's stream feeds the subgroup, or one
// already did (o.ended), the downstream subscribers are told of the
// subgroup by a stream carrying its header alone, reset with the
// upstream's code, INTERNAL_ERROR when there was none
// (SubgroupWriter.CloseIncomplete, §11.3.2): otherwise they would never
// hear of it, and a track could end with whole groups missing unnoticed.
// A FIN says the subgroup holds nothing past the subscription's start; a
// Malformed Track passes nothing on (§12.1); and a header in
// SUBGROUP_ID_MODE 1 does not name its subgroup without an object. o.mu
// is held meanwhile, so that a stream of the subgroup that comes now
// forwards its objects after the header-only stream is queued, not before.
func (o *outputs) unsent(hdr wire.SubgroupHeader, err error) {
	var mal *moqt.MalformedTrackError
	if errors.Is(err, io.EOF) || errors.As(err, &mal) || hdr.SubgroupIDMode == wire.SubgroupIDFirstObject {
		return
	}
	k := sgKey{hdr.GroupID, hdr.SubgroupID}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.sg[k]; ok {
		return
	}
	if _, ok := o.ended[k]; ok {
		return
	}
	code := upstreamCode(err)
	opts := moqt.SubgroupOptions{EndOfGroup: hdr.EndOfGroup, Properties: hdr.HasProperties}
	if !hdr.DefaultPriority {
		opts.Priority = wire.Some(hdr.Priority)
	}
	o.e.reg.met.Dropped(DropIncomplete, 1)
	o.e.track.OpenSubgroup(hdr.GroupID, hdr.SubgroupID, opts).CloseIncomplete(code)
}

// datagrams forwards u's datagrams, dropping those already forwarded.
func (o *outputs) datagrams(u *upstream) {
	reg, track := o.e.reg, o.e.track
	for {
		obj, err := u.sub.ReadDatagram(context.Background())
		if err != nil {
			return
		}
		reg.met.ObjectsIn(1, len(obj.Payload))
		u.noteGroup(obj.Location.Group)
		fp := fingerprintOf(&obj, uint64(len(obj.Payload)), o.hashPayload(obj.Payload))
		seen, conflict := o.note(fp, true, true)
		if conflict != "" {
			o.malformed(conflict)
			continue // until the subscription, cancelled, ends
		}
		if seen {
			reg.met.Dropped(DropDuplicate, 1)
			continue
		}
		if err := track.WriteDatagram(obj); err != nil {
			if errors.Is(err, moqt.ErrMalformingObject) {
				o.malformed(err.Error())
				continue
			}
			reg.met.Dropped(DropDatagram, 1)
			track.SetLargest(obj.Location)
			continue
		}
		reg.met.ObjectsOut(1, len(obj.Payload))
	}
}
