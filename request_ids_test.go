package moqt

import (
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Request IDs allocated concurrently, as a subscription's updates and new
// requests do, are distinct and keep this endpoint's parity (§6.4.2.1).
func TestRequestIDSpaceAllocateConcurrent(t *testing.T) {
	for _, own := range []uint64{0, 1} {
		ids := newRequestIDSpace(own, 1-own)
		const workers, each = 8, 200
		got := make(chan uint64, workers*each)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					got <- ids.allocate()
				}
			})
		}
		wg.Wait()
		close(got)
		seen := map[uint64]bool{}
		for id := range got {
			require.False(t, seen[id], "Request ID %d allocated twice", id)
			seen[id] = true
			assert.Equal(t, own, id%2)
		}
		assert.Len(t, seen, workers*each)
		assert.Equal(t, own+2*workers*each, ids.allocate(), "no ID skipped")
	}
}

// IDs used up to the top of the 64-bit space (draft 21's vi64 reaches it)
// leave every ID used: the record does not wrap to 0, where IDs used
// before would pass again (§6.4.2.1).
func TestRequestIDsAtTheTop(t *testing.T) {
	for _, first := range []uint64{0, 1} {
		r := newRequestIDs(first)
		require.NoError(t, r.add(first))
		top := uint64(math.MaxUint64) - 1 + first%2 // the largest ID of the parity
		// More than maxRequestIDGap IDs down from the top: the floor
		// jumps up to them and then passes the top.
		for i := range uint64(maxRequestIDGap + 1) {
			require.NoError(t, r.add(top-2*i))
		}
		assert.Error(t, r.add(first), "used before the jump")
		assert.Error(t, r.add(first+2), "below the floor")
		assert.Error(t, r.add(top), "the top itself")
	}
}
