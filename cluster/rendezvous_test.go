package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// A SUBSCRIBE held at B by RENDEZVOUS_TIMEOUT, with no publisher of its
// track anywhere yet, proceeds when the publisher appears at A: by
// PUBLISH_NAMESPACE (B is offered the namespace) or by PUBLISH (B learns
// of the track), and gets its objects.
func TestHeldSubscribeAtOneNodeProceedsWhenPublisherAppearsAtAnother(t *testing.T) {
	for _, by := range []string{"announce", "publish"} {
		t.Run(by, func(t *testing.T) {
			ns := startNATS(t)
			a, b := startTestNode(t, "A", ns.url()), startTestNode(t, "B", ns.url())
			b.waitRoute(video, nil, 10*time.Second) // B's view current: a miss is final
			c := b.client(nil)
			res := make(chan error, 1)
			var sub *moqt.Subscription
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				var err error
				sub, err = c.Subscribe(ctx, video, wire.Params{RendezvousTimeout: wire.Some[uint64](15_000)})
				res <- err
			}()
			b.waitAnswered(video, 1, 10*time.Second) // held: Upstream had no node for it

			pub := newPublisher(t, video)
			switch by {
			case "announce":
				pub.announce(t, a)
			case "publish":
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, err := pub.track.Publish(ctx, a.client(nil), wire.Params{}, moqt.AcceptOptions{})
				require.NoError(t, err, "PUBLISH_OK")
			}
			select {
			case err := <-res:
				require.NoError(t, err, "the held SUBSCRIBE proceeds")
			case <-time.After(10 * time.Second):
				t.Fatal("the held SUBSCRIBE still waits")
			}
			defer sub.Close()
			writeGroup(t, pub.track, 0, 3)
			assert.ElementsMatch(t, payloads(0, 1, 3), readObjects(t, sub, 3))
		})
	}
}
