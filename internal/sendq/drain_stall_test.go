package sendq

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
)

// pathModel returns the counts of a path since the bubble's now: a packet
// from the peer every 500 ms if heard, and a full packet sent every 500 ms
// if sending (retransmitting, say).
func pathModel(heard, sending bool) func() transport.PathCounts {
	start := time.Now()
	return func() transport.PathCounts {
		n := uint64(time.Since(start) / (500 * time.Millisecond))
		var c transport.PathCounts
		if heard {
			c.Received = n
		}
		if sending {
			c.Sent = n * 1200
		}
		return c
	}
}

// stallRig queues "abc" on one stream that takes nothing, over a path
// modelled by heard and sending, with a 2 s grace.
func stallRig(t *testing.T, heard, sending bool) *rig {
	r := newRig(1<<20, 2*time.Second, 0)
	r.sess.SetPath(pathModel(heard, sending))
	require.NoError(t, r.send("abc", time.Second)[0])
	return r
}

// failedAt waits until d after begun, when the stream's drain began (at
// the send's own bound), and returns what the owner was told.
func failedAt(r *rig, begun time.Time, d time.Duration) []error {
	time.Sleep(d - time.Since(begun))
	synctest.Wait()
	_, failed, _, _ := r.owners[0].snapshot()
	return failed
}

// TestStallOverLossyPathWaits: a stream that takes nothing while its peer
// is still heard from and this end keeps sending is a path recovering from
// loss, not a subscriber that stopped reading: it is not cut at the grace,
// and once the path takes the bytes again they are all delivered.
func TestStallOverLossyPathWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := stallRig(t, true, true)
		begun := time.Now()
		assert.Empty(t, failedAt(r, begun, 7*time.Second), "three graces of loss recovery")
		r.strs[0].grant(10)
		synctest.Wait()
		assert.Equal(t, "abc", r.strs[0].taken())
		_, failed, _, drained := r.owners[0].snapshot()
		assert.Empty(t, failed)
		assert.Equal(t, 1, drained)
		assert.False(t, r.qs[0].Broken())
		r.w.Interrupt()
	})
}

// TestStallOverLossyPathBounded: loss recovery holds a stream for at most
// lossStall graces; past them the subscriber is cut all the same.
func TestStallOverLossyPathBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := stallRig(t, true, true)
		begun := time.Now()
		assert.Empty(t, failedAt(r, begun, lossStall*2*time.Second-time.Millisecond))
		failed := failedAt(r, begun, lossStall*2*time.Second)
		require.Len(t, failed, 1, "%d graces after the stall began", lossStall)
		assert.ErrorIs(t, failed[0], ErrTooFarBehind)
		var ce *CutError
		require.ErrorAs(t, failed[0], &ce)
		assert.Equal(t, "no data taken for 10s", ce.Reason)
		r.w.Interrupt()
	})
}

// TestStallWithoutRecovery: a stall is cut at the grace when the peer is
// not heard from (a killed subscriber: this end retransmits, nothing comes
// back), and when this end sends next to nothing (a peer that stopped
// reading: its windows are full, and it only acknowledges).
func TestStallWithoutRecovery(t *testing.T) {
	for _, tc := range []struct {
		name           string
		heard, sending bool
	}{{"silent peer", false, true}, {"idle path", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := stallRig(t, tc.heard, tc.sending)
				begun := time.Now()
				assert.Empty(t, failedAt(r, begun, 2*time.Second-time.Millisecond))
				failed := failedAt(r, begun, 2*time.Second)
				require.Len(t, failed, 1, "a grace after the stall began")
				assert.ErrorIs(t, failed[0], ErrTooFarBehind)
				r.w.Interrupt()
			})
		})
	}
}
