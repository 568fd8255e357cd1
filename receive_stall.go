package moqt

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// A subscriber whose application stops reading cannot be told so by its
// publisher: the unread streams fill the connection's flow-control window,
// and the PUBLISH_DONE TOO_FAR_BEHIND on the request stream then waits
// behind them, as does everything else on the connection. So the
// subscriber watches its own application: a subscription whose streams
// wait unread for longer than Config.ReadStallTimeout, while the
// application takes and reads none of them, is cancelled here,
// its streams stopped (which returns their flow-control credit to the
// connection) and its request stream cancelled (§3.1.1, §6.4.2.3), and it
// ends with an error wrapping ErrFellBehind.

// ErrFellBehind is wrapped by the error of a subscription cancelled
// because its application left received data unread for longer than
// Config.ReadStallTimeout. It also wraps ErrCancelled.
var ErrFellBehind = errors.New("moqt: subscriber fell behind")

// readWatch is what the stall watchdog knows of one delivered stream. Its
// fields are atomics: the application's goroutine writes them, the
// watchdog reads them.
type readWatch struct {
	busy    atomic.Bool  // the application is inside Next or Read
	taken   atomic.Bool  // AcceptSubgroup returned the stream
	pending atomic.Bool  // the last call left payload or buffered bytes unread
	touched atomic.Int64 // unix nanoseconds of delivery or the last call
	// progress is the subscription's readProgress: when the application
	// last took or read any of its streams.
	progress *atomic.Int64
}

// enter marks the application inside a call on the stream.
func (w *readWatch) enter() { w.busy.Store(true) }

// leave marks the call over; unread tells whether data was left waiting.
func (w *readWatch) leave(unread bool) {
	w.pending.Store(unread)
	w.touch()
	w.busy.Store(false)
}

// take marks the stream handed to the application.
func (w *readWatch) take() {
	w.touch()
	w.taken.Store(true)
}

// touch records the application's progress on the stream, and so on its
// subscription.
func (w *readWatch) touch() {
	now := time.Now().UnixNano()
	w.touched.Store(now)
	if w.progress != nil {
		w.progress.Store(now)
	}
}

// stalled reports a stream the application has left waiting, with data,
// since before cutoff: not taken, or taken with bytes unread and no call
// in progress. A taken stream with nothing buffered may simply be idle.
func (w *readWatch) stalled(cutoff int64) bool {
	return !w.busy.Load() && w.touched.Load() < cutoff && (!w.taken.Load() || w.pending.Load())
}

// watchStallsLocked starts the subscription's stall watchdog if it is not
// running; it runs while the subscription has open streams and the session
// lasts. sub.mu is held.
func (sub *Subscription) watchStallsLocked() {
	d := sub.sess.cfg.ReadStallTimeout
	if d < 0 || sub.stallTimer != nil {
		return
	}
	sub.stallTimer = time.AfterFunc(stallTick(d), sub.checkStalls)
}

// stallTick is how often the watchdog looks: a stall is seen within a
// quarter of the timeout after it passes.
func stallTick(d time.Duration) time.Duration { return max(d/4, time.Millisecond) }

// checkStalls cancels the subscription if one of its streams has waited
// unread for longer than Config.ReadStallTimeout.
func (sub *Subscription) checkStalls() {
	d := sub.sess.cfg.ReadStallTimeout
	cutoff := time.Now().Add(-d).UnixNano()
	sub.mu.Lock()
	stalled := 0
	for r := range sub.readers {
		if r.watch.stalled(cutoff) {
			stalled++
		}
	}
	if sub.arrival.stalled(cutoff) {
		stalled++
	}
	if sub.readProgress.Load() >= cutoff {
		// The application took or read one of the subscription's
		// streams lately: it reads, one stream after another perhaps,
		// and the others wait their turn.
		stalled = 0
	}
	switch {
	case stalled > 0:
		sub.stallTimer = nil
	case len(sub.readers) == 0 || sub.sess.ctx.Err() != nil:
		sub.stallTimer = nil // restarted by the next stream
	default:
		sub.stallTimer.Reset(stallTick(d))
	}
	sub.mu.Unlock()
	if stalled > 0 {
		sub.fellBehind(fmt.Errorf("%w: %d data stream(s) unread for %v: %w", ErrFellBehind, stalled, d, ErrCancelled))
	}
}

// fellBehind cancels the subscription from this end: STOP_SENDING with
// EXCESSIVE_LOAD (§12.5: this endpoint cannot take more) on its data
// streams, taken or not, and on its request stream, whose reset carries
// the same code.
func (sub *Subscription) fellBehind(err error) {
	sub.mu.Lock()
	sub.stopCode = wire.ResetExcessiveLoad
	sub.mu.Unlock()
	sub.cancelWith(err, wire.ResetExcessiveLoad)
	sub.endData()
	sub.stopReaders()
}
