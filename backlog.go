package moqt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// Backlogs: a slow subscriber must not hold up the others (DESIGN.md,
// "Concurrency model").
//
// A SubgroupWriter passes each object to the streams of its subscriptions
// in turn, from the publisher's goroutine, straight to the transport. A
// QUIC stream's Write blocks while the stream or the connection is out of
// flow-control credit (quic-go takes at most about one packet beyond what
// it can send), so one subscriber that does not read would stall every
// other one. Hence, when an object goes to more than one subscription,
// each Write has a deadline writeGrace away. A stream that has not taken
// all of its bytes by then keeps what it took, and the rest goes to the
// stream's backlog, followed by everything later written to that stream:
// one goroutine per backlogged stream writes the backlog in order and
// ends once it is empty, after which the publisher writes to the stream
// itself again. While a subscription has anything queued, its other
// streams queue too, new ones included: it is behind, and the publisher
// does not spend a writeGrace per stream to find that out again. Only one of them writes to a stream at a time, so its
// bytes keep their order. A healthy stream costs the fast path one
// SetWriteDeadline per write, and nothing at all when an object has a
// single subscription.
//
// A Write that passes its deadline returns how many bytes it took, and the
// stream stays usable: quic-go drops its reference to the rest of the
// buffer before returning, and webtransport-go does not treat a timeout
// as the stream's end (see transport.SendStream.SetWriteDeadline).
//
// The backlogs of one subscription share Config.MaxSubscriberBacklog: when
// queuing more would pass it, the subscription ends with PUBLISH_DONE
// TOO_FAR_BEHIND, its streams reset first (C081). Nothing is dropped
// without the subscriber being told.
//
// The publisher goes at the pace of its fastest subscriber: an object with
// one subscription is written without a deadline, blocking as before (no
// one else waits on it), and after a write that every subscription queued
// the writer waits until one of them has caught up. So a publisher that
// produces faster than any subscriber takes is slowed down, not cut off
// with TOO_FAR_BEHIND.
//
// Delivery timeouts cover bytes in a backlog (§5.2): an object's timeout
// runs until its last byte has been passed to the transport. While a
// stream is backlogged the objects with a timeout are listed with the
// stream offset where they end; the stream's object timer follows the
// oldest of them, so a late stream is reset with DELIVERY_TIMEOUT, which
// ends the goroutine and drops the backlog.

// writeGrace is how long a Write to one of several streams may block
// before the rest of its bytes goes to the stream's backlog.
const writeGrace = time.Millisecond

// errTooFarBehind reports a write refused because the subscription's
// backlog would pass Config.MaxSubscriberBacklog.
var errTooFarBehind = errors.New("moqt: subscriber too far behind")

// backlog is what one subgroup stream has queued.
//
// While active, the stream belongs to its drain goroutine: it alone writes
// to the stream and arms the stream's object timer, the publisher only
// appends under mu. Otherwise both belong to the publisher, under the
// SubgroupWriter's lock. Only the publisher sets active; only the drain
// clears it, under mu.
type backlog struct {
	active atomic.Bool
	broken atomic.Bool // a write failed: the stream is reset or gone

	mu      sync.Mutex // guards the fields below; taken after the SubgroupWriter's lock, never before
	buf     []byte     // bytes not yet passed to the transport, oldest first
	sent    uint64     // the stream offset of buf[0]
	marks   []objectMark
	fin     bool // the subgroup is complete: FIN once buf is written
	dropped bool // the stream was reset: write nothing more
}

// objectMark is an object with a delivery timeout whose last byte has not
// been passed to the transport yet.
type objectMark struct {
	end      uint64 // the stream offset just past its last byte
	deadline int64  // monoNow deadline
}

// send passes b, the next bytes of out's stream, to the transport, or
// queues them behind its backlog. With fanout (the object goes to other
// subscriptions too) a Write that blocks longer than writeGrace queues the
// rest. w.mu is held.
func (out *subgroupOut) send(b []byte, fanout bool) error {
	if out.q.active.Load() {
		if queued, err := out.enqueue(b); queued || err != nil {
			return err
		}
	}
	if fanout && out.ss.backlog.Load() > 0 {
		// The subscription already has bytes waiting: it is behind, and
		// its other streams queue too rather than cost the publisher a
		// writeGrace each to find that out.
		return out.spill(b)
	}
	switch {
	case fanout:
		if err := out.str.SetWriteDeadline(time.Now().Add(writeGrace)); err != nil {
			return err
		}
		out.grace = true
	case out.grace:
		if err := out.str.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
		out.grace = false
	}
	n, err := out.str.Write(b)
	out.off += uint64(n)
	switch {
	case !errors.Is(err, os.ErrDeadlineExceeded):
		return err
	case n == len(b):
		return nil
	case !out.grace || out.late() || out.str.Context().Err() != nil:
		// Not our grace deadline: the stream was reset meanwhile (a
		// reset on WebTransport first sets a past deadline, see
		// internal/transport), by a delivery timeout or a STOP_SENDING.
		// Nothing to queue for.
		return err
	}
	if h := out.ss.sess.cfg.hooks; h != nil && h.graceExpired != nil {
		h.graceExpired(out.ss)
	}
	return out.spill(b[n:])
}

// enqueue appends b to out's backlog. It reports false if the backlog has
// just been written and its goroutine is gone. w.mu is held.
func (out *subgroupOut) enqueue(b []byte) (bool, error) {
	q := &out.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active.Load() {
		return false, nil
	}
	if err := out.ss.addBacklog(len(b)); err != nil {
		return true, err
	}
	q.buf = append(q.buf, b...)
	out.off += uint64(len(b))
	return true, nil
}

// spill starts out's backlog with rest, what a Write did not take in
// time, and the goroutine that writes it. The current object's timeout,
// if armed, now covers it there. w.mu is held.
func (out *subgroupOut) spill(rest []byte) error {
	if err := out.ss.addBacklog(len(rest)); err != nil {
		return err
	}
	q := &out.q
	q.mu.Lock()
	q.buf = append(q.buf[:0], rest...)
	q.sent = out.off
	out.off += uint64(len(rest))
	q.marks = q.marks[:0]
	if d := out.dl.deadline.Load(); d != 0 {
		q.marks = append(q.marks, objectMark{end: out.objEnd, deadline: d})
	}
	q.active.Store(true)
	q.mu.Unlock()
	out.grace = false // the drain clears the deadline
	go out.drain()
	return nil
}

// arm starts the delivery timeout of a new object on out, whose last byte
// will be at stream offset out.objEnd. On a backlogged stream the object
// waits its turn behind the others. w.mu is held.
func (out *subgroupOut) arm(deadline int64) {
	if q := &out.q; q.active.Load() {
		q.mu.Lock()
		if q.active.Load() {
			q.marks = append(q.marks, objectMark{end: out.objEnd, deadline: deadline})
			if len(q.marks) == 1 {
				out.armAt(deadline)
			}
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	out.armAt(deadline)
}

// objectDone ends the current object's timeout once all of it has been
// passed to the transport; on a backlogged stream the drain does that
// when it writes the object's last byte. w.mu is held.
func (out *subgroupOut) objectDone() {
	if !out.q.active.Load() {
		out.disarmObject()
	}
}

// finishAfterBacklog asks the drain to end out's stream with a FIN once its
// backlog is written. It reports false when there is no backlog. w.mu is
// held.
func (out *subgroupOut) finishAfterBacklog() bool {
	q := &out.q
	if !q.active.Load() {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active.Load() {
		return false
	}
	q.fin = true
	return true
}

// discard drops out's backlog and stops its object timer, once its stream
// has been reset. A drain goroutine ends without writing more. w.mu is
// held.
func (out *subgroupOut) discard() {
	q := &out.q
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropped = true
	out.dl.deadline.Store(0)
	if out.dl.timer != nil {
		out.dl.timer.Stop()
	}
}

// drain writes out's backlog to its stream, oldest bytes first, without a
// deadline, until the backlog is empty or the stream fails. A stream with
// objects under a delivery timeout is written up to the end of the oldest
// one at a time, so that its timer moves on as soon as that object has
// been passed to the transport.
func (out *subgroupOut) drain() {
	q := &out.q
	defer out.drained()
	err := out.str.SetWriteDeadline(time.Time{})
	q.mu.Lock()
	for {
		if err != nil || q.dropped {
			out.ss.backlog.Add(-int64(len(q.buf)))
			q.buf, q.marks = nil, nil
			out.dl.deadline.Store(0)
			if out.dl.timer != nil {
				out.dl.timer.Stop()
			}
			q.broken.Store(true)
			q.active.Store(false)
			q.mu.Unlock()
			// The stream was reset, stopped by the peer or lost with the
			// session: forget it (a no-op on a stream already reset).
			if !out.dl.expired.Load() {
				out.ss.closeDataStream(out.str, wire.ResetCancelled)
			}
			return
		}
		if len(q.marks) > 0 && q.marks[0].end <= q.sent {
			for len(q.marks) > 0 && q.marks[0].end <= q.sent {
				q.marks = q.marks[1:]
			}
			if len(q.marks) > 0 {
				out.armAt(q.marks[0].deadline)
			} else {
				out.disarmObject()
			}
		}
		if len(q.buf) == 0 {
			// Caught up. A mark left is the current object's, not all
			// written yet: its timer goes on, now the publisher's.
			fin := q.fin
			q.buf, q.marks = nil, q.marks[:0]
			q.active.Store(false)
			q.mu.Unlock()
			if fin {
				out.ss.finishDataStream(out.str)
			}
			return
		}
		chunk := q.buf
		if len(q.marks) > 0 {
			chunk = chunk[:min(uint64(len(chunk)), q.marks[0].end-q.sent)]
		}
		q.mu.Unlock()

		// Not on a stream already reset: clearing the deadline above may
		// have undone the past one CancelWrite sets to wake a WebTransport
		// Write (see the transport's wtStream.CancelWrite).
		n := 0
		if err = context.Cause(out.str.Context()); err == nil {
			n, err = out.str.Write(chunk)
		}

		q.mu.Lock()
		q.buf = q.buf[n:]
		q.sent += uint64(n)
		out.ss.backlog.Add(-int64(n))
	}
}

// drained wakes the SubgroupWriter, which may be waiting for a stream to
// catch up (settle).
func (out *subgroupOut) drained() {
	select {
	case out.caughtUp <- struct{}{}:
	default:
	}
	out.ss.sess.hook(func(h *sessionHooks) func() { return h.backlogEnded })
}

// settle returns once a target of the write just made has taken it, or
// has caught up with its backlog, or none is left: the publisher goes at
// the pace of its fastest subscriber. w.mu is held.
func (w *SubgroupWriter) settle() {
	for {
		waiting := false
		for _, out := range w.targets {
			if out.closed() {
				continue
			}
			if !out.q.active.Load() {
				return
			}
			waiting = true
		}
		if !waiting {
			return
		}
		w.targets[0].ss.sess.hook(func(h *sessionHooks) func() { return h.publisherWaits })
		<-w.caughtUp
	}
}

// addBacklog counts n more bytes queued for the subscription. If that
// would pass Config.MaxSubscriberBacklog the bytes are refused and the
// subscription ends with PUBLISH_DONE TOO_FAR_BEHIND, which resets its
// streams first. PUBLISH_DONE is sent from its own goroutine: its write
// may wait for the subscriber's flow control, and the publisher must not.
func (ss *ServedSubscription) addBacklog(n int) error {
	limit := int64(ss.sess.cfg.MaxSubscriberBacklog)
	if ss.backlog.Add(int64(n)) <= limit {
		return nil
	}
	ss.backlog.Add(-int64(n))
	ss.fallBehind(fmt.Sprintf("more than %d bytes waiting for the subscriber", limit))
	return errTooFarBehind
}

// fallBehind ends the subscription with PUBLISH_DONE TOO_FAR_BEHIND, once.
func (ss *ServedSubscription) fallBehind(reason string) {
	if ss.behind.CompareAndSwap(false, true) {
		go func() { _ = ss.Done(wire.DoneTooFarBehind, reason) }()
	}
}
