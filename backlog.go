package moqt

import (
	"errors"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/wire"
)

// Backlogs: no subscriber holds up the publisher, or any other subscriber,
// beyond a bounded grace (DESIGN.md, "Concurrency model"). The algorithm
// is internal/sendq's: a SubgroupWriter's sendq.Writer passes each object
// to its subscriptions' streams, each a sendq.Queue, and queues what a
// stream does not take in time; this file is what only the session knows.
//
// A Write to one of several streams waits sendq.WriteGrace (1 ms); to one,
// Config.SubscriberGrace after the call began (or the writer's
// SetWriteDeadline). After a write whose every subscription had to queue,
// the writer waits until one of them has caught up, up to the same grace
// (settle), so that a publisher faster than all its subscribers goes at
// the pace of the fastest, rather than queuing until they are all cut off.
//
// A subscription (a sendq.Group) is too far behind, and ends with
// PUBLISH_DONE TOO_FAR_BEHIND, its streams reset with TOO_FAR_BEHIND first
// (C081, §12.5), when queuing more would pass Config.MaxSubscriberBacklog
// (bytes across its streams), or when one of its backlogs has had no byte
// taken for a whole Config.SubscriberGrace while none of its other streams
// took any either. Backlogs also count against their session's budgets:
// Config.MaxSessionBacklog across the session's subscriptions and, shared
// with other sessions, Config.SharedBacklog (backlog_budget.go). A
// subscription whose write would pass one ends with PUBLISH_DONE
// EXCESSIVE_LOAD, its streams reset with EXCESSIVE_LOAD first. Nothing is
// dropped without the subscriber being told.
//
// Objects of this end's PUBLISH past Config.MaxEarlyObjects wait for
// PUBLISH_OK in their streams' backlogs (§3.1), within the same bound; the
// writer does not wait for them.
//
// Delivery timeouts cover bytes in a backlog (§5.2): an object's timeout
// runs until its last byte has been passed to the transport, the stream's
// object timer following the oldest object queued, so a late stream is
// reset with DELIVERY_TIMEOUT, which ends the drain and drops the backlog.

// defaultSubscriberGrace is Config.SubscriberGrace's default.
const defaultSubscriberGrace = 2 * time.Second

// errTooFarBehind reports a write refused because the subscription is too
// far behind.
var errTooFarBehind = sendq.ErrTooFarBehind

// errExcessiveLoad reports bytes refused by a session's backlog budget or
// by the BacklogBudget it shares.
var errExcessiveLoad = sendq.ErrExcessiveLoad

// servedWritePath is a ServedSubscription's share of the write path.
type servedWritePath struct {
	// joined is the Largest Object when the subscription started being
	// served: objects up to it were published before it saw any. Guarded
	// by the subscription's mu; the data path reads its servedView copy.
	joined filter.LargestObject
	// group counts the bytes waiting in its data streams' backlogs.
	group sendq.Group
	// timers are its streams' running SUBGROUP_DELIVERY_TIMEOUTs.
	timers subgroupTimers
}

// send passes b, the next bytes of out's stream, to the transport, or
// queues them behind its backlog (sendq.Writer.Send), within the call's
// wait (waitUntil). It returns ErrSubgroupClosed when Close or Reset
// interrupted it; a subscription refused more backlog is cut off. The
// caller holds the turn.
func (w *SubgroupWriter) send(out *subgroupOut, b []byte, fanout bool, begun int64) error {
	err := w.sq.Send(&out.q, b, out.hold, fanout, w.waitUntil(out.ss, begun))
	if err == nil {
		return nil
	}
	if err == sendq.ErrStopped {
		return ErrSubgroupClosed
	}
	out.ss.cutFor(err)
	return err
}

// resetCode is the code out's stream is reset with after a write to it
// failed with err.
func (out *subgroupOut) resetCode(err error) wire.ResetCode {
	if c := out.ss.cut.Load(); c != 0 {
		return wire.ResetCode(c) // the code its PUBLISH_DONE resets with
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

// settle returns once a target of the write just made has taken it, or
// has caught up with its backlog, or none is left, or the write's wait is
// over (waitUntil), or Close or Reset interrupt it: within that bound the
// publisher goes at the pace of its fastest subscriber. Targets holding
// objects for PUBLISH_OK are not waited for. The caller holds the turn.
func (w *SubgroupWriter) settle(begun int64) {
	for {
		var until int64 // monoNow; 0 for none
		for _, out := range w.targets {
			if out.closed() {
				continue
			}
			if !out.q.Active() {
				return
			}
			if out.hold {
				continue
			}
			until = max(until, w.waitUntil(out.ss, begun))
		}
		wait := time.Duration(until - monoNow())
		if until == 0 || wait <= 0 || w.sq.Stopped() {
			return
		}
		w.targets[0].ss.sess.hook(func(h *sessionHooks) func() { return h.publisherWaits })
		if !w.sq.Await(wait) {
			return
		}
	}
}

// subgroupOut is the Owner of its sendq.Queue: the methods below are
// what its drain and the sendq.Writer ask of the session.

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
