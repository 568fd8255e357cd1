package moqt

import "sync"

// goroutines counts a session's own goroutines, which Close waits for.
//
// Some start from outside the session (a request this end opens, a data
// stream waiting for credit), and one may start just as Close waits:
// sync.WaitGroup forbids an Add from zero concurrent with Wait. Once the
// wait has begun, a goroutine therefore runs uncounted; the session has
// ended by then, and such a goroutine ends with it.
type goroutines struct {
	mu      sync.Mutex // guards waiting and orders Add before Wait
	waiting bool
	wg      sync.WaitGroup
}

// Go runs f in a new goroutine.
func (g *goroutines) Go(f func()) {
	g.mu.Lock()
	counted := !g.waiting
	if counted {
		g.wg.Add(1)
	}
	g.mu.Unlock()
	go func() {
		if counted {
			defer g.wg.Done()
		}
		f()
	}()
}

// Wait waits for the goroutines counted so far.
func (g *goroutines) Wait() {
	g.mu.Lock()
	g.waiting = true
	g.mu.Unlock()
	g.wg.Wait()
}
