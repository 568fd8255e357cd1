package moqt

import (
	"errors"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// interrupted resets the streams that will not get the current object
// whole because Close or Reset stopped the write: a FIN or a later object
// on them would hide the hole (§11.3.2).
func (w *SubgroupWriter) interrupted(outs []*subgroupOut) {
	code := wire.ResetCode(w.stopCode.Load())
	for _, out := range outs {
		if !out.closed() {
			w.drop(out, code)
		}
	}
}

// interruptedAt ends an object's start that Close or Reset stopped at
// target i: the targets from i on never got its header, and those sent
// got the header alone when its payload was still to come, so none of
// them can carry the object whole. The caller holds the turn.
func (w *SubgroupWriter) interruptedAt(i int, sent []*subgroupOut) {
	w.interrupted(w.targets[i:])
	if w.remain > 0 {
		w.interrupted(sent)
	}
	w.targets = sent
	w.remain = 0
}

// drop stops sending the subgroup to one subscription, resetting its
// stream with code and dropping its backlog. A stream that missed its
// delivery timeout keeps that code.
func (w *SubgroupWriter) drop(out *subgroupOut, code wire.ResetCode) {
	out.done = true
	if !out.dl.expired.Load() {
		out.ss.closeDataStream(out.str, code)
	}
	out.discard()
}

// skip handles an object that does not pass ss's filters on a stream that
// is already open (§11.3.2). A range filter leaving it out is expected: the
// stream goes on, since Object ID deltas allow gaps. Past the end the
// Location filter had when the stream opened, every object the
// subscription gets from this subgroup has been sent, so the stream ends
// with a FIN (C019). Otherwise the stream would miss objects it was to
// carry (Forward at 0, a REQUEST_UPDATE moving the end below the object or
// the start past it), so it is reset (C020).
func (w *SubgroupWriter) skip(out *subgroupOut, loc wire.Location) {
	switch out.ss.dataView().skipAction(loc, out.end, out.bounded) {
	case skipKeep:
	case skipFinish:
		out.done = true
		out.stopTimers()
		w.finish(out)
	default:
		// What it carries is whole and the subscription's: a reset that
		// keeps it, once its backlog is written.
		out.done = true
		out.stopTimers()
		out.incomplete, out.cut = true, true
		w.finish(out)
	}
}

// finish ends out with a FIN: every object it was to carry was passed to
// the transport, or to its backlog, after which the drain sends the FIN.
// A stream that lacks objects its subscription covers is reset instead
// (§11.3.2). Its SUBGROUP_DELIVERY_TIMEOUT starts now (§5.2). The caller
// holds the turn.
func (w *SubgroupWriter) finish(out *subgroupOut) { w.finishWith(out, wire.ResetCancelled) }

// finishWith is finish, resetting an incomplete stream with code.
func (w *SubgroupWriter) finishWith(out *subgroupOut, code wire.ResetCode) {
	if out.incomplete {
		out.finishAfterBacklog(code, true)
		return
	}
	if !out.finishAfterBacklog(0, false) {
		out.ss.finishDataStream(out.str)
	}
	if timeout := effectiveTimeout(w.timeouts.subgroup, out.ss.dataView().dp.subgroupTimeout); timeout != 0 {
		out.startSubgroupTimer(timeout)
	}
}

// interrupt stops the holder of the turn: it writes nothing more, a stream
// write it is blocked in returns (a past write deadline wakes it), and so
// does a wait in settle. Streams it leaves without the whole current
// object are reset with code.
func (w *SubgroupWriter) interrupt(code wire.ResetCode) {
	w.stopOnce.Do(func() { w.stopCode.Store(uint64(code)) })
	w.sq.Interrupt()
}

// Close ends the subgroup: every stream gets a FIN, which tells the
// subscribers it is complete (§11.3.2). A write in progress is
// interrupted, and returns ErrSubgroupClosed; the streams that did not
// take its object whole are reset.
func (w *SubgroupWriter) Close() error {
	w.interrupt(wire.ResetCancelled)
	w.turn.Lock()
	defer w.turn.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.endCached(!w.pend && w.remain == 0)
	w.abandon() // an object interrupted or left incomplete
	if w.remain > 0 {
		// A FIN inside an object would be a protocol violation (§11.3).
		for _, out := range w.outs {
			if !out.closed() {
				w.drop(out, wire.ResetCancelled)
			}
		}
		w.remain = 0
		return errors.New("moqt: subgroup closed inside an object; its streams were reset")
	}
	for _, out := range w.outs {
		if !out.closed() {
			out.done = true
			out.stopTimers()
			w.finish(out)
		}
	}
	return nil
}

// CloseIncomplete ends the subgroup short of its end, keeping what was
// written: every stream delivers its objects, then is reset with code,
// which tells its subscriber that objects of the subgroup may follow the
// last one it got (§11.3.2). This is how a relay passes on an upstream
// stream that was reset: a plain Reset would discard the objects its
// subscribers have not read yet. Where the transport supports
// RESET_STREAM_AT the reset keeps every byte written; otherwise it waits
// a second with the stream open. A write in progress is interrupted,
// and returns ErrSubgroupClosed; streams that did not take its object
// whole are reset at once, as Reset does.
//
// On a writer that has written no object, CloseIncomplete tells the
// subscribers of a subgroup that will not be delivered: each subscription
// whose filters an object of the subgroup could pass (see announceUnsent)
// gets a stream carrying only the SUBGROUP_HEADER, reset with code and
// RESET_STREAM_AT keeping the header (§11.3.2: "This explicitly tells the
// receiver there is an unsent Subgroup"); without RESET_STREAM_AT, a plain
// reset a second later (at once while 32 of the subscription's cut streams
// wait so). It counts in the subscription's PUBLISH_DONE Stream Count as
// any stream does. Reset sends nothing on such a writer.
func (w *SubgroupWriter) CloseIncomplete(code wire.ResetCode) {
	w.interrupt(code)
	w.turn.Lock()
	defer w.turn.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	w.endCached(false)
	if !w.started {
		w.announceUnsent(code)
		return
	}
	w.abandon()
	partial := w.remain > 0 // a stream inside an object cannot keep it
	w.remain = 0
	for _, out := range w.outs {
		switch {
		case out.closed():
		case partial:
			w.drop(out, code)
		default:
			out.done = true
			out.stopTimers()
			out.incomplete = true
			w.finishWith(out, code)
		}
	}
}

// Reset abandons the subgroup: every open stream is reset with code, as
// when objects will not be delivered (§11.3.2). A write in progress is
// interrupted, and returns ErrSubgroupClosed. A writer that has written no
// object has no stream, and Reset sends nothing: CloseIncomplete tells the
// subscribers of such a subgroup.
func (w *SubgroupWriter) Reset(code wire.ResetCode) {
	w.interrupt(code)
	w.turn.Lock()
	defer w.turn.Unlock()
	w.closed = true
	w.endCached(false)
	w.abandon()
	for _, out := range w.outs {
		if !out.closed() {
			w.drop(out, code)
		}
	}
	w.remain = 0
}

// endCached tells the track's cache that the subgroup is over: finished
// (fin: every object it was given went out whole, and its streams end
// with a FIN), so that it carries nothing more, past the group's end too
// with EndOfGroup (§11.3.1); or short (a reset, or an object left
// incomplete), so that objects of it may still come elsewhere (§11.3.2)
// and the rest of the group is unknown. The caller holds the turn.
func (w *SubgroupWriter) endCached(fin bool) {
	if w.cached == nil {
		return
	}
	if fin {
		w.cached.Finish(w.opts.EndOfGroup)
	} else {
		w.cached.Reset()
	}
	w.cached = nil
}

// announceUnsent tells the track's subscriptions of a subgroup none of whose
// objects was written (§11.3.2): each one that could have got an object of
// it opens a stream, sends the SUBGROUP_HEADER alone and resets it with
// code, RESET_STREAM_AT keeping the header. A session without
// RESET_STREAM_AT (a browser's WebTransport session, or any peer that did
// not offer it) gets the same stream, reset after cutLinger as any cut
// stream there: a reader at pace has taken the header by then, and should
// the reset still discard it, the stream counts in PUBLISH_DONE's Stream
// Count, so the subscriber learns a stream is missing (§9.9) instead of
// nothing. Without objects, a subscription covers the subgroup when an
// object of it could pass its filters (filter.Filter.MayPass): Forward is 1,
// its Location filter reaches into the group (from the Subgroup ID on with
// SUBGROUP_ID_MODE 1, which names the first object), and its Range filters
// do not leave out the Subgroup ID or Publisher Priority, nor every Object
// ID there may be; Object Property filters cannot be judged and count as
// passed. A subscription at Forward 0 is told nothing: it would have got no
// stream. Only Established subscriptions are told, and a PUBLISH awaiting
// its answer, whose stream waits for PUBLISH_OK as early objects do.
//
// The header goes to the stream's queue (sendq.Queue), whose drain writes
// it, then the reset: the writer was interrupted, and its caller, such as
// a relay passing on an upstream reset, does not wait for subscribers.
// Streams that cannot open (no stream credit for too long, the session's
// budget spent) cut their subscription off as an object's would. The
// caller holds the turn.
func (w *SubgroupWriter) announceUnsent(code wire.ResetCode) {
	sg := filter.Subgroup{Group: w.group, ID: w.subgroup, PublisherPriority: w.priority()}
	if w.opts.SubgroupIDIsFirstObject {
		sg.FirstObject = w.subgroup
	}
	subs := w.outsInOrder()
	for _, ss := range subs {
		st := ss.current()
		if st != stateEstablished && st != statePendingPublisher {
			continue
		}
		v := ss.dataView()
		if v.filter == nil || !v.filter.MayPass(sg) {
			continue
		}
		out, err := w.open(ss, false, v)
		if err != nil {
			continue // the subscription is ending
		}
		w.outs[ss] = out
		b, err := out.enc.Header.Append(w.buf[:0])
		if err != nil {
			w.drop(out, wire.ResetInternalError) // open checked it
			continue
		}
		w.buf = b
		out.fresh = false
		// Held: to the queue, which Send takes from a stopped writer.
		if err := w.sq.Send(&out.q, b, nil, true, false, 0); err != nil {
			ss.cutFor(err)
			w.drop(out, out.resetCode(err))
			continue
		}
		out.done, out.incomplete = true, true
		w.finishWith(out, code)
	}
}
