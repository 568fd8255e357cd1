package moqt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// Backlogs: no subscriber holds up the publisher, or any other subscriber,
// beyond a bounded grace (DESIGN.md, "Concurrency model").
//
// A SubgroupWriter passes each object to the streams of its subscriptions
// in turn, from the publisher's goroutine, straight to the transport. A
// QUIC stream's Write blocks while the stream or the connection is out of
// flow-control credit (quic-go takes at most about one packet beyond what
// it can send), so every Write has a deadline:
//
//   - when the object goes to more than one subscription, writeGrace
//     (1 ms) away, so that one subscriber that does not read costs the
//     others almost nothing;
//   - when it goes to one, Config.SubscriberGrace after the call began (or
//     the writer's SetWriteDeadline): no one else waits, so the publisher
//     is held back, as by any flow control, but no longer than that.
//
// Neither is the stream's deadline (quic-go would take a lock and wake its
// sender for each one set, and allocate a timer for each Write that
// blocks): the writer's watchdog, a timer that runs while writes go on,
// sets a past deadline on a Write still blocked when its wait is over.
//
// A stream that has not taken all of its bytes by then keeps what it took,
// and the rest goes to the stream's backlog, followed by everything later
// written to that stream: one goroutine per backlogged stream writes the
// backlog in order and ends once it is empty, after which the publisher
// writes to the stream itself again. While a subscription has anything
// queued, its other streams queue too, new ones included, when the object
// is shared: it is behind, and the publisher does not spend a writeGrace
// per stream to find that out again. Only one of them writes to a stream
// at a time, so its bytes keep their order. The fast path costs a read of
// the clock per call and, for a shared object, one per stream write, and
// a few atomics.
//
// A Write that passes its deadline returns how many bytes it took, and the
// stream stays usable: quic-go drops its reference to the rest of the
// buffer before returning, and webtransport-go does not treat a timeout
// as the stream's end (see transport.SendStream.SetWriteDeadline).
//
// After a write whose every subscription had to queue, the writer waits
// until one of them has caught up, up to the same grace, so that a
// publisher faster than all its subscribers goes at the pace of the
// fastest, rather than queuing until they are all cut off.
//
// A subscription is too far behind, and ends with PUBLISH_DONE
// TOO_FAR_BEHIND, its streams reset with TOO_FAR_BEHIND first (C081,
// §12.5), when queuing more would pass Config.MaxSubscriberBacklog (bytes
// across its streams), or when one of its backlogs has had no byte taken
// for a whole Config.SubscriberGrace while none of its other streams took
// any either: a subscriber that stopped reading, or was killed, is cut off
// after about one grace, not QUIC's idle timeout. Nothing is dropped
// without the subscriber being told.
//
// Backlogs also count against their session's budgets (backlog_budget.go):
// Config.MaxSessionBacklog across the session's subscriptions and,
// shared with other sessions, Config.SharedBacklog. A subscription whose
// write would pass one ends with PUBLISH_DONE EXCESSIVE_LOAD, its streams
// reset with EXCESSIVE_LOAD first.
//
// Objects of this end's PUBLISH past Config.MaxEarlyObjects wait for
// PUBLISH_OK in their streams' backlogs (§3.1), within the same bound; the
// writer does not wait for them.
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

// defaultSubscriberGrace is Config.SubscriberGrace's default.
const defaultSubscriberGrace = 2 * time.Second

// errTooFarBehind reports a write refused because the subscription is too
// far behind.
var errTooFarBehind = errors.New("moqt: subscriber too far behind")

// servedWritePath is a ServedSubscription's share of the write path.
type servedWritePath struct {
	// joined is the Largest Object when the subscription started being
	// served: objects up to it were published before it saw any. Guarded
	// by the subscription's mu; the data path reads its servedView copy.
	joined filter.LargestObject
	// taken counts the writes to its data streams that took bytes while
	// it has a backlog: a stalled backlog checks it to tell a stalled
	// subscriber from a stream that waits its turn behind the others.
	taken atomic.Uint64
	// timers are its streams' running SUBGROUP_DELIVERY_TIMEOUTs.
	timers subgroupTimers
}

// backlog is what one subgroup stream has queued.
//
// While active, the stream belongs to its drain goroutine: it alone writes
// to the stream and arms the stream's object timer, the publisher only
// appends under mu. Otherwise both belong to the publisher, the holder of
// the SubgroupWriter's turn. Only the publisher sets active; only the
// drain clears it, under mu.
type backlog struct {
	active atomic.Bool
	broken atomic.Bool // a write failed: the stream is reset or gone

	mu      sync.Mutex // guards the fields below
	buf     []byte     // bytes not yet passed to the transport, oldest first
	base    []byte     // buf's whole storage, for backlogPool once drained
	sent    uint64     // the stream offset of buf[0]
	marks   []objectMark
	fin     bool // the subgroup is over: FIN (or finCode) once buf is written
	reset   bool // end with a reset with finCode rather than a FIN
	finCode wire.ResetCode
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
// rest; otherwise one that blocks past waitUntil does, woken by the
// writer's watchdog. It returns
// ErrSubgroupClosed when Close or Reset interrupted it. The caller holds
// the turn.
func (w *SubgroupWriter) send(out *subgroupOut, b []byte, fanout bool, begun int64) error {
	if out.q.active.Load() {
		if queued, err := out.enqueue(b); queued || err != nil {
			return err
		}
	}
	if out.hold || fanout && out.ss.backlog.Load() > 0 {
		// Held for PUBLISH_OK; or the subscription already has bytes
		// waiting: it is behind, and its other streams queue too rather
		// than cost the publisher a writeGrace each to find that out.
		return out.spill(b)
	}
	until := w.waitUntil(out.ss, begun)
	if fanout {
		until = min(until, monoNow()+int64(writeGrace))
	}
	// No stream deadline, which would cost a lock and a wake-up in
	// quic-go for each Write, and a timer each time one blocks: the
	// writer's watchdog wakes a Write still blocked at until.
	if !out.wdl.IsZero() {
		if err := out.str.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
		out.wdl = time.Time{}
	}
	if w.overdue.Load() {
		w.overdue.Store(false)
	}
	w.dog.until.Store(max(until, 1))
	w.dog.watch()
	// Interruption: Close and Reset set stop, the watchdog overdue, then
	// a past deadline on cur.
	w.cur.Store(out)
	if w.stop.Load() || w.overdue.Load() {
		w.cur.CompareAndSwap(out, nil)
		w.dog.until.Store(0)
		if w.stop.Load() {
			return ErrSubgroupClosed
		}
		return out.spill(b) // the call's wait is over already
	}
	n, err := out.str.Write(b)
	if !w.cur.CompareAndSwap(out, nil) {
		out.wdl = time.Unix(1, 0) // the watchdog or an interruption set this past deadline
	}
	w.dog.until.Store(0)
	out.off += uint64(n)
	if n > 0 && out.ss.backlog.Load() > 0 {
		// Only a drain, which counts its bytes in the backlog while it
		// writes them, looks at taken.
		out.ss.wp.taken.Add(1)
	}
	switch {
	case !errors.Is(err, os.ErrDeadlineExceeded):
		return err
	case n == len(b):
		return nil
	case w.stop.Load():
		return ErrSubgroupClosed
	case out.late() || out.str.Context().Err() != nil:
		// Not our deadline: the stream was reset meanwhile (a reset on
		// WebTransport first sets a past deadline, see
		// internal/transport), by a delivery timeout or a STOP_SENDING.
		// Nothing to queue for.
		return err
	}
	if h := out.ss.sess.cfg.hooks; h != nil && h.graceExpired != nil {
		h.graceExpired(out.ss)
	}
	return out.spill(b[n:])
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

// enqueue appends b to out's backlog. It reports false if the backlog has
// just been written and its goroutine is gone. The caller holds the turn.
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
	q.append(b)
	out.off += uint64(len(b))
	return true, nil
}

// backlogPool holds the storage of drained backlogs, up to
// maxPooledBacklog bytes each: a subscriber that falls behind now and
// then would otherwise cost a new buffer, grown by appends, each time.
var backlogPool sync.Pool

const maxPooledBacklog = 64 << 10

// append adds b to the backlog. q.mu is held.
func (q *backlog) append(b []byte) {
	if q.buf == nil {
		if p, ok := backlogPool.Get().(*[]byte); ok {
			q.buf, q.base = (*p)[:0], (*p)[:0]
		}
	}
	before := cap(q.buf)
	q.buf = append(q.buf, b...)
	if cap(q.buf) != before {
		// New storage (the drain takes buf from the front, so an append
		// within it keeps cap).
		q.base = q.buf[:0]
	}
}

// release gives the backlog's storage back to backlogPool once nothing is
// left to write: the drain, the only writer of buf's bytes to the
// transport, is between writes, and the publisher appends only while the
// backlog is active. q.mu is held.
func (q *backlog) release() {
	if b := q.base; cap(b) > 0 && cap(b) <= maxPooledBacklog {
		backlogPool.Put(&b)
	}
	q.buf, q.base = nil, nil
}

// spill starts out's backlog with rest, what a Write did not take in
// time, and the goroutine that writes it. The current object's timeout,
// if armed, now covers it there. The caller holds the turn.
func (out *subgroupOut) spill(rest []byte) error {
	if err := out.ss.addBacklog(len(rest)); err != nil {
		return err
	}
	q := &out.q
	q.mu.Lock()
	q.buf = q.buf[:0]
	q.append(rest)
	q.sent = out.off
	out.off += uint64(len(rest))
	q.marks = q.marks[:0]
	if d := out.dl.deadline.Load(); d != 0 {
		q.marks = append(q.marks, objectMark{end: out.objEnd, deadline: d})
	}
	q.active.Store(true)
	q.mu.Unlock()
	out.wdl = time.Unix(1, 0) // unknown: the drain sets its own
	go out.drain()
	return nil
}

// arm starts the delivery timeout of a new object on out, whose last byte
// will be at stream offset out.objEnd. On a backlogged stream the object
// waits its turn behind the others. The caller holds the turn.
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
// when it writes the object's last byte. The caller holds the turn.
func (out *subgroupOut) objectDone() {
	if !out.q.active.Load() {
		out.disarmObject()
	}
}

// finishAfterBacklog asks the drain to end out's stream once its backlog
// is written: with a FIN, or with a reset with code when reset is set. It
// reports false when there is no backlog; a reset is then made at once.
// The caller holds the turn.
func (out *subgroupOut) finishAfterBacklog(code wire.ResetCode, reset bool) bool {
	q := &out.q
	if q.active.Load() {
		q.mu.Lock()
		if q.active.Load() {
			q.fin, q.reset, q.finCode = true, reset, code
			q.mu.Unlock()
			out.ss.endingDataStream(out.str)
			return true
		}
		q.mu.Unlock()
	}
	if reset {
		out.ss.cutDataStream(out.str, code)
		out.stopTimers()
	}
	return false
}

// discard drops out's backlog and stops its object timer, once its stream
// has been reset. A drain goroutine ends without writing more.
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

// drain writes out's backlog to its stream, oldest bytes first, until the
// backlog is empty or the stream fails. A stream with objects under a
// delivery timeout is written up to the end of the oldest one at a time,
// so that its timer moves on as soon as that object has been passed to
// the transport. Objects held for PUBLISH_OK wait for it first. Each Write
// has a deadline a grace away: one that takes nothing, while no other
// stream of the subscription takes anything either, finds the subscriber
// stalled, too far behind.
func (out *subgroupOut) drain() {
	q := &out.q
	ss := out.ss
	defer out.drained()
	var err error
	if ss.current() == statePendingPublisher {
		select {
		case <-ss.established:
		case <-ss.done:
			err = errSubscriptionClosing
		}
	}
	grace := ss.sess.cfg.SubscriberGrace
	q.mu.Lock()
	for {
		if err != nil || q.dropped {
			ss.releaseBacklog(len(q.buf))
			q.release()
			q.marks = nil
			out.dl.deadline.Store(0)
			if out.dl.timer != nil {
				out.dl.timer.Stop()
			}
			q.broken.Store(true)
			q.active.Store(false)
			q.mu.Unlock()
			// The stream was reset, stopped by the peer or lost with the
			// session, or the subscriber is too far behind: forget it (a
			// no-op on a stream already reset).
			if !out.dl.expired.Load() {
				ss.closeDataStream(out.str, out.resetCode(err))
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
			fin, reset, code := q.fin, q.reset, q.finCode
			q.release()
			q.marks = q.marks[:0]
			q.active.Store(false)
			q.mu.Unlock()
			switch {
			case fin && reset:
				ss.cutDataStream(out.str, code)
			case fin:
				ss.finishDataStream(out.str)
			}
			return
		}
		chunk := q.buf
		if len(q.marks) > 0 {
			chunk = chunk[:min(uint64(len(chunk)), q.marks[0].end-q.sent)]
		}
		q.mu.Unlock()

		// Not on a stream already reset: setting the deadline may undo
		// the past one CancelWrite sets to wake a WebTransport Write (see
		// the transport's wtStream.CancelWrite).
		n := 0
		if err = context.Cause(out.str.Context()); err == nil {
			before := ss.wp.taken.Load()
			until := time.Now().Add(grace)
			if err = out.str.SetWriteDeadline(until); err == nil {
				n, err = out.str.Write(chunk)
			}
			if n > 0 {
				ss.wp.taken.Add(1)
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = nil
				// Taking nothing is a stall, unless the deadline was
				// not ours (an interrupted publisher's) or the
				// subscription's other streams are taking bytes.
				if n == 0 && !time.Now().Before(until) && ss.wp.taken.Load() == before {
					ss.fallBehind(fmt.Sprintf("no data taken for %v", grace))
					err = errTooFarBehind
				}
			}
		}

		q.mu.Lock()
		q.buf = q.buf[n:]
		q.sent += uint64(n)
		ss.releaseBacklog(n)
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
			if !out.q.active.Load() {
				return
			}
			if out.hold {
				continue
			}
			until = max(until, w.waitUntil(out.ss, begun))
		}
		wait := time.Duration(until - monoNow())
		if until == 0 || wait <= 0 || w.stop.Load() {
			return
		}
		w.targets[0].ss.sess.hook(func(h *sessionHooks) func() { return h.publisherWaits })
		if w.timer == nil {
			w.timer = time.NewTimer(wait)
		} else {
			w.timer.Reset(wait)
		}
		select {
		case <-w.caughtUp:
			w.timer.Stop()
		case <-w.stopCh:
			w.timer.Stop()
			return
		case <-w.timer.C:
			return
		}
	}
}

// expireWrite is the watchdog's expire: the Write to cur, blocked past
// its bound, gets a past deadline and returns what it took; the rest goes
// to the stream's backlog.
func (w *SubgroupWriter) expireWrite() {
	w.overdue.Store(true)
	if out := w.cur.Swap(nil); out != nil {
		_ = out.str.SetWriteDeadline(time.Unix(1, 0))
	}
}
