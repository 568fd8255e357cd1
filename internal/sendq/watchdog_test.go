package sendq

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWatchdog: a Write blocked past its bound is expired once, at its
// bound; one that ends in time is not; one timer serves a run of writes;
// after Stop nothing more is expired.
func TestWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var expired atomic.Int32
		var d Watchdog
		d.Init(now, func() { expired.Add(1) })
		start := time.Now()

		d.Begin(now() + int64(time.Second)) // ends in time
		time.Sleep(time.Second / 2)
		d.End()
		d.Begin(now() + int64(time.Second)) // blocked past its bound
		time.Sleep(time.Second - 1)
		synctest.Wait()
		assert.Zero(t, expired.Load(), "before its bound")
		time.Sleep(1)
		synctest.Wait()
		assert.Equal(t, int32(1), expired.Load(), "at its bound, %v in", time.Since(start))
		d.End()
		time.Sleep(time.Minute)
		assert.Equal(t, int32(1), expired.Load(), "no write: nothing to expire")

		// A stale fire (for the Write before) expires nothing.
		d.Begin(now() + int64(time.Second))
		d.Fire()
		assert.Equal(t, int32(1), expired.Load())
		d.Stop()
		time.Sleep(time.Minute)
		assert.Equal(t, int32(1), expired.Load(), "stopped")
		d.End()
	})
}

// TestWatchdogWriteBegunDuringFire: a Write that begins while the timer's
// run expires the one before, with the same bound (a fixed
// SetWriteDeadline gives every Write the same), is watched too: no timer
// for it would leave it blocked for good.
func TestWatchdogWriteBegunDuringFire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var expired atomic.Int32
		var d Watchdog
		var firing, begun atomic.Bool
		bound := now() + int64(time.Second)
		d.Init(func() int64 {
			if firing.Load() && !begun.Swap(true) {
				d.End()        // the Write the timer's run read returns,
				d.Begin(bound) // and the next begins, seeing the timer armed
			}
			return now()
		}, func() { expired.Add(1) })
		d.Begin(bound)
		firing.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.True(t, begun.Load())
		assert.Equal(t, int32(2), expired.Load(), "both Writes expired")
		d.End()
		d.Stop()
	})
}
