package moqt

import (
	"sync/atomic"
	"time"
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

// stallClock is a subscription's coarse clock for the stall watchdog: it
// counts the watchdog's looks, a stallTick apart at least. Readers record
// the count, not the time: reading the clock on every object cost more
// than the rest of the reader's bookkeeping, and a count is all a watchdog
// that looks every tick needs. It runs in a testing/synctest bubble too,
// since its ticks are the watchdog's timer.
type stallClock struct {
	ticks atomic.Int64 // the watchdog's looks so far
	// progress is the tick in which the application last took or read
	// any of the subscription's streams.
	progress atomic.Int64
}

// now is the current tick; nil-safe, for a stream not yet tracked.
func (c *stallClock) now() int64 {
	if c == nil {
		return 0
	}
	return c.ticks.Load()
}

// advance records that the application made progress now.
func (c *stallClock) advance(now int64) {
	// A load first: on most calls the tick has not changed, and a load
	// costs less than a store.
	if c != nil && c.progress.Load() != now {
		c.progress.Store(now)
	}
}

// readWatch is what the stall watchdog knows of one delivered stream. Its
// fields are atomics: the application's goroutine writes them, the
// watchdog reads them. Each is stored only when it changes, so that a
// reader keeping up with its stream pays loads, not stores, per object.
type readWatch struct {
	busy    atomic.Bool  // the application waits inside Next or Read for data
	taken   atomic.Bool  // AcceptSubgroup returned the stream
	pending atomic.Bool  // the last call left payload or buffered bytes unread
	touched atomic.Int64 // the clock's tick at delivery or the last call
	// clock is the subscription's.
	clock *stallClock
}

// wait marks the application inside a call that may wait for the network.
// A call that does not wait is over before it matters: the watchdog looks
// at what the last call left, and only a call that waits can take long.
func (w *readWatch) wait() {
	if !w.busy.Load() {
		w.busy.Store(true)
	}
}

// leave marks a call over; unread tells whether data was left waiting.
// touched is stored before pending, and stalled reads them the other way
// round, so a watchdog that sees the new pending sees the new touched.
func (w *readWatch) leave(unread bool) {
	w.touch()
	if w.pending.Load() != unread {
		w.pending.Store(unread)
	}
	if w.busy.Load() {
		w.busy.Store(false)
	}
}

// take marks the stream handed to the application.
func (w *readWatch) take() {
	w.touch()
	w.taken.Store(true)
}

// touch records the application's progress on the stream, and so on its
// subscription.
func (w *readWatch) touch() {
	now := w.clock.now()
	if w.touched.Load() != now {
		w.touched.Store(now)
	}
	w.clock.advance(now)
}

// stalled reports a stream the application has left waiting, with data,
// since before the tick cutoff: not taken, or taken with bytes unread and
// no call waiting. A taken stream with nothing buffered may simply be idle.
func (w *readWatch) stalled(cutoff int64) bool {
	return !w.busy.Load() && (!w.taken.Load() || w.pending.Load()) && w.touched.Load() < cutoff
}

// stallTick is how often the watchdog looks: a stall is seen within a
// quarter of the timeout after it passes.
func stallTick(d time.Duration) time.Duration { return max(d/4, time.Millisecond) }

// stallTicks is how many ticks a stream must be left alone to be stalled.
// What was touched in the tick after look j has waited at least k-j-1
// ticks at look k, each at least stallTick long (the timer is reset after
// each look, and fires late if anything): so the ticks that cover d, and
// one for the touch's own part of a tick. A stall is then seen at most a
// tick after d.
func stallTicks(d time.Duration) int64 {
	t := stallTick(d)
	return int64((d+t-1)/t) + 1
}
