package relay

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// TestStalledSubscriberHoldsUpNobody: a subscriber that stops reading is cut
// off with TOO_FAR_BEHIND while the publisher and another subscriber go on.
// The stalled one is cut off by the backlog bound, 256 KiB behind. The
// graces are far longer than the test, on the relay and on the publisher
// (whose only subscriber is the relay), so that no wait for the subscriber
// that reads, however long a busy machine keeps it from running, cuts it
// off or the relay's upstream subscription.
func TestStalledSubscriberHoldsUpNobody(t *testing.T) {
	const grace = time.Minute
	forSchemes(t, func(t *testing.T, scheme string) {
		met := &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
		n := startNode(t, scheme, Config{Metrics: met}, &moqt.Config{
			SubscriberGrace:      grace,
			MaxSubscriberBacklog: 256 << 10,
		})
		pub := n.newPublisherConfig("/pub", testTrack, nil, func(c *moqt.Config) { c.SubscriberGrace = grace })
		n.announce(pub, wire.NewNamespace("live"))
		fast, _ := n.dial("/fast", nil)
		fastSub, err := subscribe(t, fast, testTrack, wire.Params{})
		require.NoError(t, err)
		// The stalled one: small windows, and it never reads.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		scfg := n.clientConfig(nil)
		scfg.StreamReceiveWindow = 16 << 10
		scfg.ReadStallTimeout = -1
		stalled, _ := n.dialConfig("/stalled", scfg)
		stalledSub, err := stalled.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)

		const groups, perGroup, size = 40, 8, 4 << 10
		got := make(chan int, 1)
		go func() {
			cnt := 0
			for cnt < groups*perGroup {
				o, err := fastSub.ReadObject(ctx)
				if err != nil {
					t.Logf("fast: %d objects, then %v", cnt, err)
					break
				}
				if o.Incomplete == nil {
					cnt++
				}
			}
			got <- cnt
		}()
		body := make([]byte, size)
		for g := range uint64(groups) {
			w := pub.track.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
			for o := range uint64(perGroup) {
				require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: body}))
			}
			require.NoError(t, w.Close())
		}
		assert.Equal(t, groups*perGroup, <-got, "the fast subscriber gets everything")
		assert.Equal(t, wire.DoneTooFarBehind, doneCode(t, stalledSub), "the stalled one is told")
		settled(t, "and counted", func() bool {
			met.mu.Lock()
			defer met.mu.Unlock()
			return met.drops[DropSlowSubscriber] == 1
		})
	})
}
