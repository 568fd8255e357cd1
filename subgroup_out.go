package moqt

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// subgroupOut is one subscription's stream for the subgroup. Its fields
// belong to the holder of the SubgroupWriter's turn, except dl (see
// streamDeadline) and q (see sendq.Queue), of which it is the Owner. Here
// are its state and its delivery timeouts (§5.2, as subgroup_timeout.go
// sets them out), and what it does as its queue's Owner.
type subgroupOut struct {
	str        transport.SendStream
	ss         *ServedSubscription
	enc        wire.SubgroupEncoder
	fresh      bool  // the SUBGROUP_HEADER is still to be sent
	done       bool  // finished or reset; no more objects go to it
	subscriber uint8 // the subscriber priority its ranking uses
	dl         streamDeadline
	// deadline is the current object's delivery deadline (mono.Now), 0 for
	// none, from when the object is handed over until it is armed.
	deadline int64
	objEnd   uint64 // stream offset past the current object's last byte
	// incomplete marks a stream that lacks objects of the subgroup its
	// subscription covers (it joined mid-subgroup, or objects were withheld
	// by Forward 0): it ends with a reset, never a FIN (§11.3.2).
	incomplete bool
	// cut marks a stream ended because its subscription's filters left an
	// object out (Forward 0, a REQUEST_UPDATE): should they take the
	// subgroup's objects again, a new stream carries them (SubgroupWriter.start).
	cut bool
	// end is the Location filter's end when the stream opened, so that an
	// end moved below it by REQUEST_UPDATE is told from the original one.
	end     wire.Location
	bounded bool
	// hold sends the current object to the backlog, to wait for PUBLISH_OK.
	hold bool
	q    sendq.Queue // its backlog; and the stream offset written or queued
}

// closed reports whether no more objects go to out: it was finished or
// reset, it missed a delivery timeout or its backlog could not be written
// (which also mark it done).
func (out *subgroupOut) closed() bool {
	if !out.done && (out.dl.expired.Load() || out.q.Broken()) {
		out.done = true
	}
	return out.done
}

// armObject starts the OBJECT_DELIVERY_TIMEOUT of the object whose header
// was provided at start (mono.Now). w.mu is held.
func (out *subgroupOut) armObject(start int64, timeout uint64) {
	out.armAt(start + int64(millis(timeout)))
}

// armAt sets the stream's object deadline (mono.Now) and its timer: by the
// publisher, or by the drain while the stream is backlogged (served_backlog.go).
func (out *subgroupOut) armAt(deadline int64) {
	dl := &out.dl
	dl.deadline.Store(max(deadline, 1))
	wait := time.Duration(dl.deadline.Load() - mono.Now())
	if dl.timer == nil {
		dl.timer = time.AfterFunc(wait, out.objectTimerFired)
		return
	}
	dl.timer.Reset(wait)
}

// disarmObject ends the current object's timeout: all of it has been passed
// to the transport.
func (out *subgroupOut) disarmObject() {
	// A load first: most objects have no deadline, and a load costs
	// less than a swap.
	if out.dl.deadline.Load() != 0 && out.dl.deadline.Swap(0) != 0 {
		out.dl.timer.Stop()
	}
}

// late reports whether the current object's timeout has passed, resetting
// the stream if so: the check before each write (§5.2). w.mu is held.
func (out *subgroupOut) late() bool {
	if out.dl.expired.Load() {
		return true
	}
	if dl := out.dl.deadline.Load(); dl != 0 && mono.Now() >= dl {
		out.expire()
		return true
	}
	return false
}

// objectTimerFired runs on the timer's goroutine. A timer that fires after
// its object was complete, or once a later object re-armed it, finds no
// deadline or one not reached yet, and does nothing.
func (out *subgroupOut) objectTimerFired() {
	if dl := out.dl.deadline.Load(); dl != 0 && mono.Now() >= dl {
		out.expire()
	}
}

// startSubgroupTimer starts the SUBGROUP_DELIVERY_TIMEOUT once the stream
// got its FIN (§5.2). The caller holds the turn.
func (out *subgroupOut) startSubgroupTimer(timeout uint64) {
	ts := &out.ss.wp.timers
	ts.mu.Lock()
	if ts.ended {
		ts.mu.Unlock()
		return
	}
	if ts.watch == nil {
		ts.watch = context.AfterFunc(out.ss.ctx, ts.end)
	}
	var oldest *subgroupOut
	if len(ts.running) >= maxSubgroupTimers {
		oldest = ts.running[0]
		ts.running = slices.Delete(ts.running, 0, 1)
		oldest.dl.subgroup.Stop()
	}
	out.dl.subgroup = time.AfterFunc(millis(timeout), out.subgroupTimerFired)
	ts.running = append(ts.running, out)
	ts.mu.Unlock()
	if oldest != nil {
		oldest.expire()
	}
}

// subgroupTimerFired resets a stream whose SUBGROUP_DELIVERY_TIMEOUT
// passed, and forgets its timer.
func (out *subgroupOut) subgroupTimerFired() {
	ts := &out.ss.wp.timers
	ts.mu.Lock()
	if i := slices.Index(ts.running, out); i >= 0 {
		ts.running = slices.Delete(ts.running, i, i+1)
	}
	ts.mu.Unlock()
	out.expire()
}

// expire resets the stream with DELIVERY_TIMEOUT, once. A Write blocked on
// it returns at once; a backlog's drain then drops the rest.
func (out *subgroupOut) expire() {
	if out.dl.expired.Swap(true) {
		return
	}
	out.ss.closeDataStream(out.str, wire.ResetDeliveryTimeout)
	out.ss.sess.hook(func(h *sessionHooks) func() { return h.deliveryTimedOut })
}

// stopTimers stops the object timer of a stream that is done. A backlog
// still being written keeps it: the drain stops it once the last object
// has been passed to the transport. w.mu is held.
func (out *subgroupOut) stopTimers() {
	if out.q.Active() {
		return
	}
	out.dl.deadline.Store(0)
	if out.dl.timer != nil {
		out.dl.timer.Stop()
	}
}

// resetCode is the code out's stream is reset with after a write to it
// failed with err.
func (out *subgroupOut) resetCode(err error) wire.ResetCode {
	if d := out.ss.cut.Load(); d != nil {
		return resetCodeFor(d.Code) // the code its PUBLISH_DONE resets with
	}
	switch {
	case errors.Is(err, errTooFarBehind):
		return wire.ResetTooFarBehind
	case errors.Is(err, errExcessiveLoad):
		return wire.ResetExcessiveLoad
	}
	return wire.ResetCancelled
}

// arm starts the delivery timeout of a new object on out, whose last byte
// will be at stream offset out.objEnd. On a backlogged stream the object
// waits its turn behind the others. The caller holds the turn.
func (out *subgroupOut) arm(deadline int64) {
	if !out.q.Mark(out.objEnd, deadline) {
		out.armAt(deadline)
	}
}

// objectDone ends the current object's timeout once all of it has been
// passed to the transport; on a backlogged stream the drain does that
// when it writes the object's last byte. The caller holds the turn.
func (out *subgroupOut) objectDone() {
	if !out.q.Active() {
		out.disarmObject()
	}
}

// finishAfterBacklog asks the drain to end out's stream once its backlog
// is written: with a FIN, or with a reset with code when reset is set. It
// reports false when there is no backlog; a reset is then made at once.
// The caller holds the turn.
func (out *subgroupOut) finishAfterBacklog(code wire.ResetCode, reset bool) bool {
	if out.q.FinishAfter(reset, code) {
		out.ss.endingDataStream(out.str)
		return true
	}
	if reset {
		out.ss.cutDataStream(out.str, code)
		out.stopTimers()
	}
	return false
}

// discard drops out's backlog and stops its object timer, once its stream
// has been reset. A drain ends without writing more.
func (out *subgroupOut) discard() { out.q.Discard() }

// Late reports whether the current object's delivery timeout has passed,
// resetting the stream if so.
func (out *subgroupOut) Late() bool { return out.late() }

// CurrentObject is the current object's end and armed deadline, which a
// new backlog takes over.
func (out *subgroupOut) CurrentObject() (uint64, int64) { return out.objEnd, out.dl.deadline.Load() }

// ArmObject moves the object timer to deadline: the drain's oldest object.
func (out *subgroupOut) ArmObject(deadline int64) { out.armAt(deadline) }

// DisarmObject stops the object timer: the backlog's objects are written,
// or dropped.
func (out *subgroupOut) DisarmObject() {
	out.dl.deadline.Store(0)
	if out.dl.timer != nil {
		out.dl.timer.Stop()
	}
}

// GraceExpired runs the test hook for a write whose wait was over.
func (out *subgroupOut) GraceExpired() {
	if h := out.ss.sess.cfg.hooks; h != nil && h.graceExpired != nil {
		h.graceExpired(out.ss)
	}
}

// Ready holds the drain of objects sent early until PUBLISH_OK.
func (out *subgroupOut) Ready() error {
	ss := out.ss
	if ss.current() == statePendingPublisher {
		select {
		case <-ss.established:
		case <-ss.done:
			return errSubscriptionClosing
		}
	}
	return nil
}

// Failed resets a stream whose backlog could not be written: the stream
// was reset, stopped by the peer or lost with the session (a no-op then),
// or the subscriber is too far behind, which ends the subscription.
func (out *subgroupOut) Failed(err error) {
	out.ss.cutFor(err)
	if !out.dl.expired.Load() {
		out.ss.closeDataStream(out.str, out.resetCode(err))
	}
}

// Finish ends a stream whose backlog is written, as finishAfterBacklog
// asked.
func (out *subgroupOut) Finish(reset bool, code wire.ResetCode) {
	if reset {
		out.ss.cutDataStream(out.str, code)
		return
	}
	out.ss.finishDataStream(out.str)
}

// Drained runs the test hook for a drain's end.
func (out *subgroupOut) Drained() {
	out.ss.sess.hook(func(h *sessionHooks) func() { return h.backlogEnded })
}
