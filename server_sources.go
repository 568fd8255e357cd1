package moqt

import (
	"net"
	"net/netip"
	"sync"

	"github.com/moqt-go/moqt/internal/pending"
)

// sourceCounts bounds the sessions one source holds at once
// (ServerOptions.MaxSessionsPerSource): a host that sets sessions up and
// leaves them idle costs the server at most that many, whatever it sends.
// A zero limit bounds nothing.
type sourceCounts struct {
	limit int
	mu    sync.Mutex
	n     map[netip.Prefix]int // sessions held now, by source; no zero entries
}

// take counts one more session from addr's source, or reports false when
// the source holds its limit already.
func (c *sourceCounts) take(addr net.Addr) (release func(), ok bool) {
	if c.limit <= 0 {
		return func() {}, true
	}
	src := pending.SourceOf(addr)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[src] >= c.limit {
		return nil, false
	}
	if c.n == nil {
		c.n = map[netip.Prefix]int{}
	}
	c.n[src]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n[src]--; c.n[src] == 0 {
				delete(c.n, src)
			}
		})
	}, true
}
