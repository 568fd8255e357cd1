package moqt

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestGoroutinesStartDuringWait: goroutines started from outside the
// session while Close waits for its goroutines neither race the wait (the
// race detector checks it) nor are lost: each one runs.
func TestGoroutinesStartDuringWait(t *testing.T) {
	for range 50 {
		var g goroutines
		var ran atomic.Int32
		const n = 8
		done := make(chan struct{}, n)
		for range n {
			go func() {
				g.Go(func() { ran.Add(1) })
				done <- struct{}{}
			}()
		}
		g.Wait()
		for range n {
			<-done
		}
		assert.Eventually(t, func() bool { return ran.Load() == n }, 5*time.Second, time.Millisecond, "every goroutine runs")
	}
}
