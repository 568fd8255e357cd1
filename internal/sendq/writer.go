package sendq

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// WriteGrace is how long a Send to one of several streams may wait for
// room in its queue before its bytes are queued beyond it, a backlog.
// Long enough that a connection whose send loop is only waiting for a CPU
// is not taken for a slow subscriber; short enough to stay a small part of
// a frame's interval.
const WriteGrace = 5 * time.Millisecond

// Window is what a queue holds as in flight: the bytes its drain is
// writing and those gathered for its next Write, as quic-go's buffer
// holds them for a direct Write. A publisher's bytes go to the queue at
// once (group commit: the drain passes what accumulated meanwhile to
// the transport in one Write, which costs about what one object's would);
// past Window the queue is behind (Queue.Behind), and what it holds is a
// backlog, counted against its Group's and Session's budgets.
const Window = 16 << 10

// ErrStopped reports a Send that Interrupt stopped.
var ErrStopped = errors.New("sendq: writer stopped")

// Writer writes one publisher's bytes to its streams' Queues, one Send at
// a time: its methods but Interrupt and Stopped belong to one goroutine
// at a time, the publisher.
type Writer struct {
	now    func() int64
	stop   atomic.Bool
	stopCh chan struct{} // closed when stop is set
	once   sync.Once
	// caughtUp is signalled when a queue stops being behind, or a drain
	// ends.
	caughtUp chan struct{}
	timer    *time.Timer // bounds Await
	waiting  atomic.Bool // in Await
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
}

// Send appends b, the next bytes of q's stream, to q, whose drain passes
// them to the transport. b ends with pl's payload, which the queues share
// (nil for none: b is only the stream's). While q then holds more than
// Window, Send waits for its drain, as a Write waits for flow control:
// with fanout (the bytes go to other streams too) for WriteGrace at most,
// otherwise until until (the Writer's clock); then q is behind, a backlog
// (Queue.Behind). With hold the drain writes them once the owner is
// Ready, and Send does not wait. It returns ErrStopped when Interrupt
// stopped the writer, a *CutError when the bytes could not be queued (the
// subscriber is to be cut off), or another error when the stream takes
// nothing more; the stream then gets no more.
func (w *Writer) Send(q *Queue, b []byte, pl *Payload, hold, fanout bool, until int64) error {
	if w.stop.Load() && !hold {
		return ErrStopped
	}
	over, err := q.send(b, pl, hold, fanout)
	if !over || err != nil {
		return err
	}
	if fanout {
		until = min(until, w.now()+int64(WriteGrace))
	}
	for {
		switch w.awaitRoom(q, until) {
		case ErrStopped:
			return ErrStopped
		case errWaitOver:
			return q.fallBehind()
		}
		if !q.stillOver() {
			return nil
		}
	}
}

// errWaitOver reports a wait for room that is over.
var errWaitOver = errors.New("sendq: wait over")

// awaitRoom waits until q's drain made room, the wait is over at until,
// or the writer is stopped.
func (w *Writer) awaitRoom(q *Queue, until int64) error {
	wait := time.Duration(until - w.now())
	if wait <= 0 {
		return errWaitOver
	}
	return w.sleep(q.room, wait)
}

// sleep waits up to wait for ch: nil once it fires, ErrStopped once the
// writer is stopped, errWaitOver when the wait is over first.
func (w *Writer) sleep(ch <-chan struct{}, wait time.Duration) error {
	w.waiting.Store(true)
	defer w.waiting.Store(false)
	if w.timer == nil {
		w.timer = time.NewTimer(wait)
	} else {
		w.timer.Reset(wait)
	}
	select {
	case <-ch:
		w.timer.Stop()
		return nil
	case <-w.stopCh:
		w.timer.Stop()
		return ErrStopped
	case <-w.timer.C:
		return errWaitOver
	}
}

// Interrupt stops the writer for good: Send sends nothing more but held
// bytes, and Await returns. It may be called from any goroutine, more
// than once.
func (w *Writer) Interrupt() {
	w.once.Do(func() {
		w.stop.Store(true)
		close(w.stopCh)
	})
}

// Stopped reports whether Interrupt was called.
func (w *Writer) Stopped() bool { return w.stop.Load() }

// Waiting reports whether the publisher waits, in Await or for room.
func (w *Writer) Waiting() bool { return w.waiting.Load() }

// Await waits up to wait for a queue to stop being behind, or a drain to
// end. It reports false when the wait is over, or the writer was
// interrupted, first.
func (w *Writer) Await(wait time.Duration) bool { return w.sleep(w.caughtUp, wait) == nil }

// wake tells a publisher waiting in Await that a queue caught up.
func (w *Writer) wake() {
	select {
	case w.caughtUp <- struct{}{}:
	default:
	}
}
