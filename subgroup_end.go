package moqt

import (
	"errors"

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
func (w *SubgroupWriter) CloseIncomplete(code wire.ResetCode) {
	w.interrupt(code)
	w.turn.Lock()
	defer w.turn.Unlock()
	if w.closed {
		return
	}
	w.closed = true
	w.endCached(false)
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
// interrupted, and returns ErrSubgroupClosed.
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
