package goroutines

import (
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestWaitWaitsForEveryGoroutine: Wait returns only once every goroutine
// has ended, those a goroutine of the group started while Wait waited
// included.
func TestWaitWaitsForEveryGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group
		release := make(chan struct{})
		releaseChild := make(chan struct{})
		childStarted := make(chan struct{})
		g.Go(func() {
			<-release
			g.Go(func() {
				close(childStarted)
				<-releaseChild
			})
		})
		waited := make(chan struct{})
		go func() {
			g.Wait()
			close(waited)
		}()
		synctest.Wait()
		assert.False(t, isClosed(waited), "Wait returned with a goroutine running")

		close(release) // the parent starts the child while Wait waits
		<-childStarted
		synctest.Wait()
		assert.False(t, isClosed(waited), "Wait returned with the child running")

		close(releaseChild)
		<-waited
	})
}

// TestWaitWithNone: the zero Group's Wait returns at once, and again after
// the group ran goroutines; Running counts those running.
func TestWaitWithNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var g Group
		g.Wait()
		var ran atomic.Int32
		release := make(chan struct{})
		g.Go(func() { <-release; ran.Add(1) })
		synctest.Wait()
		assert.Equal(t, 1, g.Running())
		close(release)
		g.Wait()
		assert.Equal(t, int32(1), ran.Load())
		assert.Equal(t, 0, g.Running())
		g.Wait()
	})
}

// TestStartDuringWait: goroutines started from outside the group while
// Wait waits neither race it (the race detector checks) nor are lost:
// each one runs.
func TestStartDuringWait(t *testing.T) {
	for range 50 {
		var g Group
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
		g.Wait() // every Go has returned: what it started is counted
		assert.Equal(t, int32(n), ran.Load(), "every goroutine runs")
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
