package moqt

import (
	"sync"
	"sync/atomic"
	"time"
)

// writeWatchdog bounds a writer's blocked stream Writes with one timer
// that runs while writes go on, rather than a stream deadline per Write,
// which costs a lock, a wake-up and a timer in quic-go each time. The
// writer stores the bound of each Write it starts in until (a monoNow
// time; 0 between writes) and calls watch; for a Write still blocked past
// its bound the timer calls expire, which gives that Write's stream a
// past deadline. A Write that meets such a deadline meant for the Write
// before it has time left by until, which tells the two apart.
type writeWatchdog struct {
	until    atomic.Int64
	watching atomic.Bool // the timer is armed
	// expire runs on the timer's goroutine, under mu. Set before the
	// first watch.
	expire func()

	mu    sync.Mutex // serializes arming, firing and stopping
	timer *time.Timer
	off   bool // stopped for good
}

// watch makes sure the timer runs while a Write is in progress: an
// atomic load once it does.
func (d *writeWatchdog) watch() {
	if d.watching.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watching.Load() || d.off {
		return
	}
	d.watching.Store(true)
	wait := time.Duration(d.until.Load() - monoNow())
	if d.timer == nil {
		d.timer = time.AfterFunc(wait, d.fired)
		return
	}
	d.timer.Reset(wait)
}

// fired runs on the timer's goroutine: a Write blocked past its bound is
// expired, and while writes go on the timer is re-armed for the current
// one.
func (d *writeWatchdog) fired() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return
	}
	u, now := d.until.Load(), monoNow()
	if u != 0 && now >= u {
		d.expire()
	}
	if u != 0 && now < u {
		d.timer.Reset(time.Duration(u - now))
		return
	}
	d.watching.Store(false)
	// A write that began after until was read saw watching still set and
	// left the arming to this run: arm for it, or its Write would have no
	// bound.
	if u2 := d.until.Load(); u2 != 0 && u2 != u {
		d.watching.Store(true)
		d.timer.Reset(max(time.Duration(u2-monoNow()), 0))
	}
}

// stop stops the timer for good: the writer writes nothing more.
func (d *writeWatchdog) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.off = true
	if d.timer != nil {
		d.timer.Stop()
	}
	d.watching.Store(false)
}
