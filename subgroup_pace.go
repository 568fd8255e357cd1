package moqt

import (
	"time"

	"github.com/moqt-go/moqt/internal/mono"
)

// How long a SubgroupWriter's write waits for its subscribers.
//
// A publisher's write waits while its subscribers make progress, as on
// flow control. A relay's write of an object it received waits no longer
// than half a grace in all: meanwhile it reads nothing from its upstream,
// whose publisher, with the same grace, would take a longer wait for a
// stalled relay and cut it off, and every subscriber of the track with it.

// SetWriteDeadline bounds how long later writes of w wait for slow
// subscribers, as Config.SubscriberGrace does for each write, whichever
// comes first; the zero time removes it. A write that reaches it does not
// fail: what a subscription has not taken yet is queued for it (see
// Config.MaxSubscriberBacklog), so nothing is dropped. It may be called
// from any goroutine; it does not shorten a wait already in progress.
func (w *SubgroupWriter) SetWriteDeadline(t time.Time) {
	if t.IsZero() {
		w.userDeadline.Store(0)
		return
	}
	w.userDeadline.Store(max(mono.At(t), 1))
}

// waitUntil is the latest a write begun at start waits for ss: its
// session's Config.SubscriberGrace later (half of it for a relayed
// object), or the writer's deadline. Both
// and the result are mono.Now times: the write path reads only the
// monotonic clock, which costs half as much as time.Now.
func (w *SubgroupWriter) waitUntil(ss *ServedSubscription, start int64) int64 {
	grace := ss.sess.cfg.SubscriberGrace
	if w.relayed {
		grace /= 2
	}
	d := start + int64(grace)
	if u := w.userDeadline.Load(); u != 0 && u < d {
		d = u
	}
	return d
}

// settle returns once a target of the write just made is not behind (its
// stream's queue holds no more than sendq.Window, in flight), or none is
// left, or Close or Reset interrupt it, or no target's backlog has taken a
// byte for a whole wait (waitUntil, from the write's start, then, unless
// the object is relayed, from the last progress, within
// SetWriteDeadline): as on flow control, a publisher goes at the pace of
// its fastest subscriber while that one makes progress. Targets holding
// objects for PUBLISH_OK are not waited for. The caller holds the turn.
func (w *SubgroupWriter) settle(begun int64) {
	last := w.backlogTaken()
	for {
		var until int64 // mono.Now; 0 for none
		for _, out := range w.targets {
			if out.closed() {
				continue
			}
			if !out.q.Behind() {
				return
			}
			if out.hold {
				continue
			}
			until = max(until, w.waitUntil(out.ss, begun))
		}
		if until == 0 {
			return // no target to wait for: no clock read
		}
		now := mono.Now()
		if until <= now {
			// Over, unless the backlogs took bytes meanwhile: then
			// the wait starts again from now, within SetWriteDeadline.
			taken := w.backlogTaken()
			if u := w.userDeadline.Load(); taken == last || w.relayed || u != 0 && u <= now {
				return
			}
			last, begun = taken, now
			continue
		}
		if w.sq.Stopped() {
			return
		}
		w.targets[0].ss.sess.hook(func(h *sessionHooks) func() { return h.publisherWaits })
		if !w.sq.Await(time.Duration(until-now)) && w.sq.Stopped() {
			return
		}
	}
}

// backlogTaken moves while a target's backlog takes bytes (Group.Taken).
func (w *SubgroupWriter) backlogTaken() uint64 {
	var n uint64
	for _, out := range w.targets {
		n += out.ss.wp.group.Taken()
	}
	return n
}
