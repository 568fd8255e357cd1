package moqt

import (
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
