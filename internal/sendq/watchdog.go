package sendq

import (
	"sync"
	"sync/atomic"
	"time"
)

// Watchdog bounds a writer's blocked stream Writes with one timer that
// runs while writes go on, rather than a stream deadline per Write, which
// costs a lock, a wake-up and a timer in quic-go each time. The writer
// gives the bound of each Write it starts to Begin (a time on the
// watchdog's clock) and calls End once it returns; for a Write still
// blocked past its bound the timer calls expire, which gives that Write's
// stream a past deadline. A Write that meets such a deadline meant for
// the Write before it has time left by its bound, which tells the two
// apart.
type Watchdog struct {
	until atomic.Int64 // the current Write's bound; 0 between writes
	// begun counts Begins: it tells a Write begun while Fire ran from the
	// one Fire read, though a fixed deadline gives both the same bound.
	begun    atomic.Uint64
	watching atomic.Bool // the timer is armed
	// now and expire are set by Init; expire runs on the timer's
	// goroutine, under mu.
	now    func() int64
	expire func()

	mu    sync.Mutex // serializes arming, firing and stopping
	timer *time.Timer
	off   bool // stopped for good
}

// Init sets the watchdog's clock, a monotonic time in nanoseconds, and
// what it calls for a Write blocked past its bound. It is called before
// the first Begin.
func (d *Watchdog) Init(now func() int64, expire func()) {
	d.now, d.expire = now, expire
}

// Begin starts watching a Write bounded by until (now's clock, not 0).
func (d *Watchdog) Begin(until int64) {
	d.begun.Add(1)
	d.until.Store(until)
	d.watch()
}

// End ends the watch of the Write begun last.
func (d *Watchdog) End() { d.until.Store(0) }

// watch makes sure the timer runs while a Write is in progress: an
// atomic load once it does.
func (d *Watchdog) watch() {
	if d.watching.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watching.Load() || d.off {
		return
	}
	d.watching.Store(true)
	d.resetTimer(time.Duration(d.until.Load() - d.now()))
}

// Fire is what the timer runs: a Write blocked past its bound is expired,
// and while writes go on the timer is re-armed for the current one. Tests
// call it to fire the timer at a chosen moment.
func (d *Watchdog) Fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return
	}
	n := d.begun.Load()
	u, now := d.until.Load(), d.now()
	if u != 0 && now >= u {
		d.expire()
	}
	if u != 0 && now < u {
		d.resetTimer(time.Duration(u - now))
		return
	}
	d.watching.Store(false)
	// A write that began after until was read saw watching still set and
	// left the arming to this run: arm for it, or its Write would have no
	// bound.
	if u2 := d.until.Load(); u2 != 0 && (u2 != u || d.begun.Load() != n) {
		d.watching.Store(true)
		d.resetTimer(max(time.Duration(u2-d.now()), 0))
	}
}

// resetTimer arms the timer, made on first use. d.mu is held.
func (d *Watchdog) resetTimer(wait time.Duration) {
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.Fire)
		return
	}
	d.timer.Reset(wait)
}

// Stop stops the timer for good: the writer writes nothing more.
func (d *Watchdog) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.off = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.watching.Store(false)
}
