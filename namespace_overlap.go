package moqt

import (
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// prefixClaims holds the prefixes of the peer's open SUBSCRIBE_NAMESPACE
// and SUBSCRIBE_TRACKS requests on a session, each type in its own space,
// so that one sharing a common prefix with another of its type is refused
// with PREFIX_OVERLAP (§9.15, §9.18, §9.5.2). A request claims its prefix
// on arrival, before the Handler sees it, and holds it until it ends. The
// zero value is ready; its lock is a leaf.
type prefixClaims struct {
	mu   sync.Mutex
	open [2]map[*requestStream]wire.Namespace // [0] SUBSCRIBE_NAMESPACE, [1] SUBSCRIBE_TRACKS
}

func claimSpace(tracks bool) int {
	if tracks {
		return 1
	}
	return 0
}

// overlaps reports whether a and b share a common prefix: one is a
// field-wise prefix of the other. The empty prefix overlaps every prefix.
func overlaps(a, b wire.Namespace) bool { return a.HasPrefix(b) || b.HasPrefix(a) }

// claim records prefix as key's, replacing what key held, unless it
// overlaps the prefix of another open request of the same type. The
// caller owns prefix.
func (c *prefixClaims) claim(tracks bool, key *requestStream, prefix wire.Namespace) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	space := &c.open[claimSpace(tracks)]
	for other, p := range *space {
		if other != key && overlaps(p, prefix) {
			return false
		}
	}
	if *space == nil {
		*space = make(map[*requestStream]wire.Namespace)
	}
	(*space)[key] = prefix
	return true
}

// release forgets key's claim, if it has one.
func (c *prefixClaims) release(tracks bool, key *requestStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open[claimSpace(tracks)], key)
}

// count is how many claims are held (tests: all are released when the
// requests end).
func (c *prefixClaims) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open[0]) + len(c.open[1])
}
