// Package goroutines counts the goroutines a component starts, so that its
// Close can wait for them: a session's, a relay's.
package goroutines

import "sync"

// Group counts the goroutines Go starts; Wait waits until none runs. The
// zero Group is ready for use.
//
// Goroutines start from handlers, timers and other goroutines of the
// group, some just as Close waits. sync.WaitGroup forbids an Add from zero
// concurrent with Wait, so Group keeps its own count: a goroutine started
// while Wait waits is counted and waited for like any other.
type Group struct {
	mu      sync.Mutex // a leaf: nothing is taken under it
	idle    *sync.Cond // on mu: running reached 0
	running int
}

// Go runs f in a new goroutine.
func (g *Group) Go(f func()) {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	go func() {
		defer g.done()
		f()
	}()
}

func (g *Group) done() {
	g.mu.Lock()
	if g.running--; g.running == 0 && g.idle != nil {
		g.idle.Broadcast()
	}
	g.mu.Unlock()
}

// Wait returns once no goroutine of the group runs, those started while it
// waits included.
func (g *Group) Wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.idle == nil {
		g.idle = sync.NewCond(&g.mu)
	}
	for g.running > 0 {
		g.idle.Wait()
	}
}

// Running returns how many goroutines of the group run now.
func (g *Group) Running() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}
