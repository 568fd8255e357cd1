package moqt

import (
	"errors"
	"fmt"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// SubgroupOptions shape a subgroup's streams (§2.2, §11.3.1).
type SubgroupOptions struct {
	// Priority is the Publisher Priority of the subgroup. Unset, the
	// header omits it and the subgroup inherits the track's
	// DEFAULT_PUBLISHER_PRIORITY (the DEFAULT_PRIORITY flag).
	Priority wire.Opt[uint8]
	// EndOfGroup marks the subgroup that holds the group's largest object,
	// so a FIN tells the subscriber the group is complete.
	EndOfGroup bool
	// SubgroupIDIsFirstObject encodes the Subgroup ID as the ID of the
	// subgroup's first object (SUBGROUP_ID_MODE 1); the first object
	// written must then have the Subgroup ID as its Object ID.
	SubgroupIDIsFirstObject bool
	// Properties allows Object Properties on this subgroup's objects (the
	// PROPERTIES flag: every object then carries a properties block).
	Properties bool
}

// SubgroupWriter publishes the objects of one subgroup (§2.2) to every
// subscription of its track. Each subscription whose filters an object
// passes gets its own stream (C033), opened when the first such object is
// written; objects go straight to the QUIC streams, with no goroutine or
// queue in between. A SubgroupWriter is safe for concurrent use, though
// objects are written one at a time, in increasing Object ID order.
type SubgroupWriter struct {
	track    *LocalTrack
	group    uint64
	subgroup uint64
	opts     SubgroupOptions

	mu      sync.Mutex // serializes objects; guards the fields below
	outs    map[*ServedSubscription]*subgroupOut
	started bool   // an object has been written
	last    uint64 // its Object ID
	ended   bool   // an End of Group or End of Track object was written
	closed  bool
	buf     []byte
	gen     uint64   // counts objects begun, so a stale ObjectWriter fails
	remain  uint64   // payload bytes of the current object still to write
	targets []target // streams receiving the current object
}

// target is one subscription's stream receiving the current object.
type target struct {
	ss  *ServedSubscription
	out *subgroupOut
}

// subgroupOut is one subscription's stream for the subgroup.
type subgroupOut struct {
	str  transport.SendStream
	enc  wire.SubgroupEncoder
	done bool // finished or reset; no more objects go to it
}

// OpenSubgroup starts publishing subgroup subgroup of group. Streams open
// lazily, per subscription, when an object passes its filters.
func (t *LocalTrack) OpenSubgroup(group, subgroup uint64, opts SubgroupOptions) *SubgroupWriter {
	return &SubgroupWriter{track: t, group: group, subgroup: subgroup, opts: opts,
		outs: map[*ServedSubscription]*subgroupOut{}}
}

// ErrSubgroupClosed is returned by writes after Close or Reset.
var ErrSubgroupClosed = errors.New("moqt: subgroup closed")

// WriteObject publishes a Normal object with the given Object Properties
// (a raw Key-Value-Pair block, see wire.KVList.Append; nil for none) and
// payload.
func (w *SubgroupWriter) WriteObject(id uint64, props, payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := wire.SubgroupObject{ObjectID: id, Properties: props, PayloadLength: uint64(len(payload))}
	if err := w.start(o); err != nil {
		return err
	}
	w.payload(payload)
	return nil
}

// WriteStatus publishes a status object: wire.ObjectEndOfGroup or
// wire.ObjectEndOfTrack (§11.1.2). No object may follow it.
func (w *SubgroupWriter) WriteStatus(id uint64, status wire.ObjectStatus) error {
	if status == wire.ObjectNormal {
		return errors.New("moqt: WriteStatus needs End of Group or End of Track")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.start(wire.SubgroupObject{ObjectID: id, Status: status})
}

// BeginObject starts a Normal object of length payload bytes whose payload
// is written as it is produced, through the returned ObjectWriter: the
// header goes out at once, so subscribers can start reading an incomplete
// object (§3.1). No other object of the subgroup can be written until this
// one is complete or its writer closed.
func (w *SubgroupWriter) BeginObject(id, length uint64, props []byte) (*ObjectWriter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.start(wire.SubgroupObject{ObjectID: id, Properties: props, PayloadLength: length}); err != nil {
		return nil, err
	}
	return &ObjectWriter{w: w, gen: w.gen}, nil
}

// ObjectWriter writes the payload of one object begun with BeginObject.
type ObjectWriter struct {
	w   *SubgroupWriter
	gen uint64 // the object it writes; a stale writer fails
}

// Write sends payload bytes to every subscription receiving the object. It
// fails if p goes past the declared length.
func (ow *ObjectWriter) Write(p []byte) (int, error) {
	w := ow.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if ow.gen != w.gen || w.remain == 0 {
		return 0, errors.New("moqt: object already complete")
	}
	if uint64(len(p)) > w.remain {
		return 0, fmt.Errorf("moqt: %d bytes past the object's declared length", uint64(len(p))-w.remain)
	}
	w.payload(p)
	return len(p), nil
}

// Close finishes the object. If fewer bytes than declared were written,
// the object cannot be completed: its streams are reset (§11.3.2) and the
// subgroup is closed.
func (ow *ObjectWriter) Close() error {
	w := ow.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if ow.gen != w.gen || w.remain == 0 {
		return nil
	}
	missing := w.remain
	w.remain = 0
	w.closed = true
	for ss, out := range w.outs {
		if !out.done {
			w.drop(ss, out)
		}
	}
	return fmt.Errorf("moqt: object closed %d bytes short", missing)
}

// start checks o, updates the Largest Object and writes o's header to the
// stream of every subscription whose filters it passes, opening streams as
// needed. w.mu is held.
func (w *SubgroupWriter) start(o wire.SubgroupObject) error {
	if err := w.check(o); err != nil {
		return err
	}
	loc := wire.Location{Group: w.group, Object: o.ObjectID}
	w.track.noteObject(loc)
	meta := ObjectMeta{Location: loc, SubgroupID: w.subgroup, PublisherPriority: w.priority(), Properties: o.Properties}
	first := !w.started
	w.started, w.last, w.ended = true, o.ObjectID, o.Status != wire.ObjectNormal
	w.gen++
	w.remain = o.PayloadLength
	w.targets = w.targets[:0]
	for _, ss := range w.track.snapshot() {
		out := w.outs[ss]
		if out != nil && out.done {
			continue
		}
		if !ss.passes(meta) {
			if out != nil {
				w.skip(ss, out, loc)
			}
			continue
		}
		if out == nil {
			var err error
			if out, err = w.open(ss, first); err != nil {
				continue // the subscription is gone; it will be pruned
			}
			w.outs[ss] = out
		}
		b, err := out.enc.AppendObject(w.buf[:0], o)
		if err == nil {
			w.buf = b
			_, err = out.str.Write(b)
		}
		if err != nil {
			w.drop(ss, out)
			continue
		}
		w.targets = append(w.targets, target{ss, out})
	}
	return nil
}

// payload writes payload bytes of the current object to its targets. A
// failed stream (STOP_SENDING, the subscription ending) stops only that
// subscription's copy of the subgroup (§11.3.2). w.mu is held.
func (w *SubgroupWriter) payload(p []byte) {
	w.remain -= uint64(len(p))
	if len(p) == 0 {
		return
	}
	for _, t := range w.targets {
		if t.out.done {
			continue
		}
		if _, err := t.out.str.Write(p); err != nil {
			w.drop(t.ss, t.out)
		}
	}
}

// drop stops sending the subgroup to one subscription, resetting its
// stream.
func (w *SubgroupWriter) drop(ss *ServedSubscription, out *subgroupOut) {
	out.done = true
	ss.closeDataStream(out.str, wire.ResetCancelled)
}

// check validates o against the subgroup's state before anything is sent.
func (w *SubgroupWriter) check(o wire.SubgroupObject) error {
	switch {
	case w.closed:
		return ErrSubgroupClosed
	case w.remain > 0:
		return fmt.Errorf("moqt: object %d is still being written", w.last)
	case w.ended:
		return fmt.Errorf("moqt: object %d after the end of group %d", o.ObjectID, w.group)
	case w.started && o.ObjectID <= w.last:
		return fmt.Errorf("moqt: object %d does not follow %d in subgroup %d", o.ObjectID, w.last, w.subgroup)
	case !w.started && w.opts.SubgroupIDIsFirstObject && o.ObjectID != w.subgroup:
		return fmt.Errorf("moqt: first object %d is not subgroup ID %d", o.ObjectID, w.subgroup)
	case len(o.Properties) > 0 && !w.opts.Properties:
		return errors.New("moqt: object properties on a subgroup opened without Properties")
	}
	return nil
}

// priority is the Publisher Priority objects of this subgroup carry.
func (w *SubgroupWriter) priority() uint8 {
	if w.opts.Priority.Set {
		return w.opts.Priority.Value
	}
	return w.track.priority
}

// open starts ss's stream for this subgroup with its SUBGROUP_HEADER.
// FIRST_OBJECT is set when the stream starts at the subgroup's first
// object (§11.3.1); a stream that joins later carries its Subgroup ID
// explicitly, since mode 1 would name the wrong ID.
func (w *SubgroupWriter) open(ss *ServedSubscription, first bool) (*subgroupOut, error) {
	h := wire.SubgroupHeader{
		TrackAlias:      ss.alias,
		GroupID:         w.group,
		SubgroupID:      w.subgroup,
		HasProperties:   w.opts.Properties,
		EndOfGroup:      w.opts.EndOfGroup,
		DefaultPriority: !w.opts.Priority.Set,
		Priority:        w.opts.Priority.Value,
		FirstObject:     first,
	}
	switch {
	case w.opts.SubgroupIDIsFirstObject && first:
		h.SubgroupIDMode = wire.SubgroupIDFirstObject
	case w.subgroup == 0:
		h.SubgroupIDMode = wire.SubgroupIDZero
	default:
		h.SubgroupIDMode = wire.SubgroupIDPresent
	}
	str, err := ss.openDataStream()
	if err != nil {
		return nil, err
	}
	out := &subgroupOut{str: str, enc: wire.SubgroupEncoder{Header: h}}
	b, err := h.Append(w.buf[:0])
	if err != nil {
		ss.closeDataStream(str, wire.ResetInternalError)
		return nil, err
	}
	w.buf = b
	if _, err := str.Write(b); err != nil {
		ss.closeDataStream(str, wire.ResetCancelled)
		return nil, err
	}
	return out, nil
}

// skip handles an object that does not pass ss's filters on a stream that
// is already open. Past the end of the subscription's window every object
// it will get from this subgroup has been sent, so the stream ends with a
// FIN; otherwise the stream would silently miss an object, so it is reset
// (C019, C020, §11.3.2).
func (w *SubgroupWriter) skip(ss *ServedSubscription, out *subgroupOut, loc wire.Location) {
	out.done = true
	if ss.beyondWindow(loc) {
		ss.finishDataStream(out.str)
		return
	}
	ss.closeDataStream(out.str, wire.ResetCancelled)
}

// Close ends the subgroup: every stream gets a FIN, which tells the
// subscribers it is complete (§11.3.2).
func (w *SubgroupWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	if w.remain > 0 {
		// A FIN inside an object would be a protocol violation (§11.3).
		for ss, out := range w.outs {
			if !out.done {
				w.drop(ss, out)
			}
		}
		w.remain = 0
		return errors.New("moqt: subgroup closed inside an object; its streams were reset")
	}
	for ss, out := range w.outs {
		if !out.done {
			out.done = true
			ss.finishDataStream(out.str)
		}
	}
	return nil
}

// Reset abandons the subgroup: every open stream is reset with code, as
// when objects will not be delivered (§11.3.2).
func (w *SubgroupWriter) Reset(code wire.ResetCode) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for ss, out := range w.outs {
		if !out.done {
			out.done = true
			ss.closeDataStream(out.str, code)
		}
	}
	w.remain = 0
}
