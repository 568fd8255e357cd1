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

// TestUpstreamTooFarBehindNotPassedOn: a publisher that cuts the relay off
// as too far behind ends the relay's own subscription, not its
// subscribers': they are told INTERNAL_ERROR, with the publisher's code and
// reason in the reason, not TOO_FAR_BEHIND, which says that the relay's
// queue to them passed its limit (§12.4). `moqt pub` of a file faster than
// a 10 % lossy link cut the relay so, and both `moqt sub`s behind it said
// "this subscriber fell too far behind", having received nothing. The same
// for UPDATE_FAILED, the relay's REQUEST_UPDATE.
func TestUpstreamTooFarBehindNotPassedOn(t *testing.T) {
	for _, code := range []wire.PublishDoneCode{wire.DoneTooFarBehind, wire.DoneUpdateFailed} {
		t.Run(code.String(), func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, nil)
				pub := n.newPublisher("/pub", testTrack, nil)
				n.announce(pub, wire.NewNamespace("live"))
				c, _ := n.dial("/sub", nil)
				sub, err := subscribe(t, c, testTrack, wire.Params{})
				require.NoError(t, err)
				pub.track.End(code, "queue full")
				assert.Equal(t, wire.DoneInternalError, doneCode(t, sub))
				var de *moqt.DoneError
				require.ErrorAs(t, sub.Err(), &de)
				assert.Contains(t, de.Reason, code.String())
				assert.Contains(t, de.Reason, "queue full")
			})
		})
	}
}
