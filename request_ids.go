package moqt

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/wire"
)

// requestIDSpace is a session's Request IDs (§6.4.2.1): the ones this
// endpoint allocates, and the record of those the peer has used.
type requestIDSpace struct {
	next atomic.Uint64 // this endpoint's next Request ID

	mu   sync.Mutex // guards peer; held for no call out
	peer requestIDs
}

// newRequestIDSpace starts this endpoint's IDs at own and the peer's at
// peer: a client's are even, a server's odd.
func newRequestIDSpace(own, peer uint64) *requestIDSpace {
	r := &requestIDSpace{peer: newRequestIDs(peer)}
	r.next.Store(own)
	return r
}

// ownParity is the parity of this endpoint's Request IDs: 0 at a client,
// 1 at a server.
func (r *requestIDSpace) ownParity() uint64 { return r.next.Load() % 2 }

// allocate returns this endpoint's next Request ID.
func (r *requestIDSpace) allocate() uint64 { return r.next.Add(2) - 2 }

// checkPeer enforces the peer's parity and uniqueness.
func (r *requestIDSpace) checkPeer(id uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.peer.add(id); err != nil {
		return &SessionError{Code: wire.InvalidRequestID, Reason: err.Error()}
	}
	return nil
}

// nextPeer returns the peer's Request ID above every one it has used so
// far: draft 18's GOAWAY carries it (18 §10.4).
func (r *requestIDSpace) nextPeer() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peer.next
}

// requestIDs records the Request IDs a peer has used. IDs below floor are
// all used; used IDs above it wait in above until the gap closes. A peer
// that leaves a gap open cannot grow above past maxRequestIDGap: the floor
// then moves up, treating the skipped IDs as used. next is above every ID
// used.
type requestIDs struct {
	floor uint64
	next  uint64
	above map[uint64]struct{}
	// full is set once the floor passed the largest ID of the peer's
	// parity: every ID is used then, and the floor does not wrap to 0.
	full bool
}

const maxRequestIDGap = 1 << 12

func newRequestIDs(first uint64) requestIDs {
	return requestIDs{floor: first, next: first, above: map[uint64]struct{}{}}
}

func (r *requestIDs) add(id uint64) error {
	if id%2 != r.floor%2 {
		return fmt.Errorf("request ID %d has the wrong parity", id)
	}
	if _, dup := r.above[id]; id < r.floor || dup || r.full {
		return fmt.Errorf("request ID %d reused", id)
	}
	r.above[id] = struct{}{}
	if id < math.MaxUint64-1 {
		r.next = max(r.next, id+2)
	} else {
		r.next = math.MaxUint64 // saturated: no ID is above the last
	}
	if len(r.above) > maxRequestIDGap {
		lowest := id
		for k := range r.above {
			lowest = min(lowest, k)
		}
		r.floor = lowest
	}
	for {
		if _, ok := r.above[r.floor]; !ok {
			return nil
		}
		delete(r.above, r.floor)
		if r.floor >= math.MaxUint64-1 {
			r.full = true
			return nil
		}
		r.floor += 2
	}
}
