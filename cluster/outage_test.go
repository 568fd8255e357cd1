package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

func TestNATSOutageFlowsGoOnNewRoutesWaitAllRecover(t *testing.T) {
	ns, a, b, c := threeNodes(t)
	pub, sb := liveAcross(t, a, b)

	ns.stop()
	// Longer than the TTL: nothing the nodes knew expires while they
	// cannot hear the registry.
	time.Sleep(testTTL + testTTL/2)
	writeGroup(t, pub.track, 1, 3)
	assert.ElementsMatch(t, payloads(1, 2, 3), readObjects(t, sb, 3), "the flow goes on without NATS")

	// A publisher appears at C meanwhile: B cannot know yet, and a
	// SUBSCRIBE there waits for the registry rather than failing.
	audio := wire.FullTrackName{Namespace: wire.NewNamespace("live", "mic"), Name: []byte("audio")}
	pub2 := newPublisher(t, audio)
	pub2.announce(t, c)
	type result struct {
		sub *moqt.Subscription
		err error
	}
	got := make(chan result, 1)
	waiter := b.client(nil)
	go func() {
		sub, err := subscribe(t, waiter, audio)
		got <- result{sub, err}
	}()
	select {
	case r := <-got:
		t.Fatalf("the SUBSCRIBE did not wait for the registry: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}

	ns.start()
	r := <-got
	require.NoError(t, r.err, "routed once the registry is back")
	writeGroup(t, pub2.track, 0, 2)
	assert.ElementsMatch(t, payloads(0, 1, 2), readObjects(t, r.sub, 2))

	// The registry has everyone again, and the first flow still goes.
	c.waitRoute(video, a, 10*time.Second)
	writeGroup(t, pub.track, 2, 3)
	assert.ElementsMatch(t, payloads(2, 3, 3), readObjects(t, sb, 3))
	// Past a TTL after the restart nothing expired that lives.
	time.Sleep(testTTL + testTTL/2)
	writeGroup(t, pub.track, 3, 1)
	assert.Equal(t, []string{"3/0"}, readObjects(t, sb, 1))
	b.waitRoute(video, a, time.Second)
}
