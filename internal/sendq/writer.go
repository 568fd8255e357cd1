package sendq

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// WriteGrace is how long a Write to one of several streams may block
// before the rest of its bytes goes to the stream's queue. Long enough that
// a connection whose send loop is only waiting for a CPU is not taken for a
// slow subscriber: at 1 ms, a relay's 100-subscriber fan-out on a busy
// 2-core machine queued one write in seven, and the queues' hand-offs cost
// it about a tenth more CPU per delivered object. Short enough to stay a
// small part of a frame's interval.
const WriteGrace = 5 * time.Millisecond

// ErrStopped reports a Send that Interrupt stopped.
var ErrStopped = errors.New("sendq: writer stopped")

// past is a deadline in the past, which wakes a blocked Write.
var past = time.Unix(1, 0)

// Writer writes one publisher's bytes to its streams' Queues, one Send at
// a time: its methods but Interrupt and Stopped belong to one goroutine
// at a time, the publisher.
type Writer struct {
	now func() int64
	dog Watchdog
	// cur is the stream Send is blocked on; Interrupt and the watchdog
	// set a past write deadline on it.
	cur     atomic.Pointer[Queue]
	overdue atomic.Bool // the watchdog found the current wait over
	stop    atomic.Bool
	stopCh  chan struct{} // closed when stop is set
	once    sync.Once
	// caughtUp is signalled when a drain ends.
	caughtUp chan struct{}
	timer    *time.Timer // bounds Await
	whole    int         // the size of the object the Sends carry (Object)
}

// Object says that the Sends that follow, up to the next call, carry an
// object of n bytes, its fields and payload, which the publisher holds
// whole: the queues' Group and Session then take up to twice the largest
// such object beyond their limit (bound). 0, for bytes that are not such an
// object (a streamed object's pieces), widens nothing.
func (w *Writer) Object(n int) { w.whole = n }

// Init sets the writer's clock, a monotonic time in nanoseconds, by which
// Send's bounds are given. It is called before anything else.
func (w *Writer) Init(now func() int64) {
	w.now = now
	w.stopCh = make(chan struct{})
	w.caughtUp = make(chan struct{}, 1)
	w.dog.Init(now, w.expire)
}

// Send passes b, the next bytes of q's stream, to the transport, or
// queues them behind what q holds. b ends with pl's payload, which the
// queues share (nil for none: b is only the stream's). With hold they go
// to the queue at once (to wait for Owner.Ready). With fanout (the bytes go to other
// streams too) a Write that blocks longer than WriteGrace queues the rest;
// otherwise one that blocks past until (the Writer's clock) does. It
// returns ErrStopped when Interrupt stopped it, a *CutError when the
// bytes could not be queued (the subscriber is to be cut off), or the
// stream's error; the stream then gets no more.
func (w *Writer) Send(q *Queue, b []byte, pl *Payload, hold, fanout bool, until int64) error {
	if q.active.Load() {
		if queued, err := q.enqueue(b, pl); queued || err != nil {
			return err
		}
	}
	if hold || fanout && q.group.queued.Load() > 0 {
		// Held; or the group already has bytes waiting: it is behind,
		// and its other streams queue too rather than cost the publisher
		// a WriteGrace each to find that out.
		return q.spill(b, pl)
	}
	if fanout {
		until = min(until, w.now()+int64(WriteGrace))
	}
	// No stream deadline, which would cost a lock and a wake-up in
	// quic-go for each Write, and a timer each time one blocks: the
	// watchdog wakes a Write still blocked at until.
	if !q.wdl.IsZero() {
		if err := q.str.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
		q.wdl = time.Time{}
	}
	if w.overdue.Load() {
		w.overdue.Store(false)
	}
	w.dog.Begin(max(until, 1))
	// Interruption: Interrupt sets stop, the watchdog overdue, then a
	// past deadline on cur.
	w.cur.Store(q)
	if w.stop.Load() || w.overdue.Load() {
		w.cur.CompareAndSwap(q, nil)
		w.dog.End()
		if w.stop.Load() {
			return ErrStopped
		}
		return q.spill(b, pl) // the wait is over already
	}
	n, err := q.write(b)
	if !w.cur.CompareAndSwap(q, nil) {
		q.wdl = past // the watchdog or an interruption set this past deadline
	}
	w.dog.End()
	q.off += uint64(n)
	if n > 0 && q.group.queued.Load() > 0 {
		// Only a drain, which counts its bytes in the queue while it
		// writes them, looks at taken.
		q.group.taken.Add(1)
	}
	switch {
	case !errors.Is(err, os.ErrDeadlineExceeded):
		return err
	case n == len(b):
		return nil
	case w.stop.Load():
		return ErrStopped
	case q.owner.Late() || q.str.Context().Err() != nil:
		// Not our deadline: the stream was reset meanwhile (a reset on
		// WebTransport first sets a past deadline, see
		// internal/transport), by a delivery timeout or a STOP_SENDING.
		// Nothing to queue for.
		return err
	}
	q.owner.GraceExpired()
	return q.spill(b[n:], pl)
}

// expire is the watchdog's: the Write to cur, blocked past its bound, gets
// a past deadline and returns what it took; the rest goes to the queue.
func (w *Writer) expire() {
	w.overdue.Store(true)
	if q := w.cur.Swap(nil); q != nil {
		_ = q.str.SetWriteDeadline(past)
	}
}

// Interrupt stops the writer for good: Send sends nothing more, a Write
// it is blocked in returns (a past write deadline wakes it), and so does
// Await. It may be called from any goroutine, more than once.
func (w *Writer) Interrupt() {
	w.once.Do(func() {
		w.stop.Store(true)
		close(w.stopCh)
	})
	if q := w.cur.Load(); q != nil {
		_ = q.str.SetWriteDeadline(past)
	}
	w.dog.Stop()
}

// Stopped reports whether Interrupt was called.
func (w *Writer) Stopped() bool { return w.stop.Load() }

// Writing reports whether a Send is in a stream's Write.
func (w *Writer) Writing() bool { return w.cur.Load() != nil }

// Await waits up to wait for a drain to end. It reports false when the
// wait is over, or the writer was interrupted, first.
func (w *Writer) Await(wait time.Duration) bool {
	if w.timer == nil {
		w.timer = time.NewTimer(wait)
	} else {
		w.timer.Reset(wait)
	}
	select {
	case <-w.caughtUp:
		w.timer.Stop()
		return true
	case <-w.stopCh:
		w.timer.Stop()
		return false
	case <-w.timer.C:
		return false
	}
}
