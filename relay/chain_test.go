package relay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// edgeOf starts a relay whose Upstream is a session to origin.
func edgeOf(t *testing.T, origin *node, name string) *node {
	t.Helper()
	up := newLateUpstream()
	edge := startNode(t, origin.scheme, Config{Upstream: up}, nil)
	up.bind(t, origin, "/"+name, edge.relay)
	return edge
}

// lateUpstream is an Upstream handing out one session to the next relay,
// made once the relay it serves, its Handler, exists; until then its
// callers wait, as they would for a Dialer's dial. Once that session has
// ended it has none: tests of redialing dial for real (integration_test.go).
type lateUpstream struct {
	ready chan struct{}
	s     *moqt.Session
}

func newLateUpstream() *lateUpstream { return &lateUpstream{ready: make(chan struct{})} }

func (l *lateUpstream) Session(ctx context.Context, _ wire.Namespace) (*moqt.Session, error) {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := l.s.Context().Err(); err != nil {
		return nil, err
	}
	return l.s, nil
}

// bind connects to target at path, h serving the requests it sends back.
func (l *lateUpstream) bind(t *testing.T, target *node, path string, h moqt.Handler) {
	t.Helper()
	l.s, _ = target.dial(path, h)
	close(l.ready)
}

// relayLoop starts two relays, each the other's upstream, with short
// UpstreamTimeouts, and their metrics.
func relayLoop(t *testing.T) (a, b *node, ma, mb *countingMetrics) {
	t.Helper()
	ma, mb = &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}, &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
	upA, upB := newLateUpstream(), newLateUpstream()
	a = startNode(t, "moqt", Config{Upstream: upA, UpstreamTimeout: 500 * time.Millisecond, Metrics: ma}, nil)
	b = startNode(t, "moqt", Config{Upstream: upB, UpstreamTimeout: 500 * time.Millisecond, Metrics: mb}, nil)
	upA.bind(t, b, "/from-a", a.relay)
	upB.bind(t, a, "/from-b", b.relay)
	return a, b, ma, mb
}

// ofKind is the number of requests of kind answered, whatever the outcome.
func (m *countingMetrics) ofKind(kind string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, v := range m.requests {
		if strings.HasPrefix(k, kind+"/") {
			n += v
		}
	}
	return n
}

// TestRelayLoopEnds: two relays each other's upstream. A SUBSCRIBE for a
// track neither has goes round once (each relay joins the request it
// already has in flight rather than asking again) and fails when the
// UpstreamTimeout of the first ends it; nothing is left behind.
func TestRelayLoopEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, ma, mb := relayLoop(t)
		c, _ := a.dial("/viewer", nil)
		_, err := subscribe(t, c, testTrack, wire.Params{})
		require.Error(t, err)
		assert.Equal(t, wire.ReqTimeout, requestCode(t, err), "ended by the upstream timeout, not bouncing")
		settled(t, "tables empty", func() bool { return a.relay.tracksEmptyAndNoHeld() && b.relay.tracksEmptyAndNoHeld() })
		count := func(m *countingMetrics) int { return m.ofKind(KindSubscribe) }
		settled(t, "answered", func() bool { return count(ma) == 2 && count(mb) == 1 })
		// Past both UpstreamTimeouts, on the bubble's clock: a request
		// still bouncing would have been answered by now.
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 2, count(ma), "a: the viewer's SUBSCRIBE and b's")
		assert.Equal(t, 1, count(mb), "b: a's, once")
	})
}

// TestThreeRelayChain carries one publisher's track through an origin to
// subscribers on two edges.
func TestThreeRelayChain(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin := startNode(t, scheme, Config{}, nil)
		edge1 := edgeOf(t, origin, "edge1")
		edge2 := edgeOf(t, origin, "edge2")

		tr, err := moqt.NewLocalTrack(testTrack, wire.KVList{{Type: 0x1234, Value: 5}})
		require.NoError(t, err)
		pc, _ := origin.dial("/publisher", nil)
		_, err = publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)

		var subs []*moqt.Subscription
		for i, edge := range []*node{edge1, edge2, edge1} {
			c, _ := edge.dial(fmt.Sprintf("/viewer%d", i), nil)
			sub, err := subscribe(t, c, testTrack, wire.Params{})
			require.NoError(t, err, "subscriber %d", i)
			assert.Equal(t, wire.KVList{{Type: 0x1234, Value: 5}}, sub.Properties(), "properties through two relays")
			subs = append(subs, sub)
		}
		e := origin.relay.reg.lookup(testTrack)
		require.NotNil(t, e)
		e.mu.Lock()
		downs := len(e.downs)
		e.mu.Unlock()
		assert.Equal(t, 2, downs, "the origin serves one subscription per edge")

		for g := range uint64(3) {
			writeGroup(t, tr, g, 4)
		}
		for i, sub := range subs {
			got := readAll(t, sub, 12)
			slices.SortFunc(got, func(a, b moqt.Object) int { return a.Location.Compare(b.Location) }) // groups are streams of their own
			for j, o := range got {
				assert.Equal(t, wire.Location{Group: uint64(j / 4), Object: uint64(j % 4)}, o.Location, "subscriber %d", i)
				assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
			}
		}
		// The publisher leaves: the end runs down the chain.
		tr.End(wire.DoneTrackEnded, "over")
		for _, sub := range subs {
			assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
		}
		for _, n := range []*node{origin, edge1, edge2} {
			settled(t, "tables empty", func() bool { return n.relay.tracksEmptyAndNoHeld() })
		}
	})
}

// TestRendezvousThroughChain: a SUBSCRIBE held at an edge waits at the
// origin too, and proceeds when the publisher comes.
func TestRendezvousThroughChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := startNode(t, "moqt", Config{}, nil)
		edge := edgeOf(t, origin, "edge")
		c, _ := edge.dial("/viewer", nil)
		res := asyncSubscribe(t, c, testTrack, wire.Params{RendezvousTimeout: wire.Some[uint64](10_000)})
		settled(t, "held at the origin", func() bool {
			origin.relay.reg.mu.Lock()
			defer origin.relay.reg.mu.Unlock()
			return origin.relay.reg.held == 1
		})
		tr, err := moqt.NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		pc, _ := origin.dial("/publisher", nil)
		_, err = publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		r := <-res
		require.NoError(t, r.err)
		writeGroup(t, tr, 0, 2)
		objs, err := readSubgroup(t, r.sub)
		require.NoError(t, err)
		assert.Len(t, objs, 2)
	})
}

// TestRelayLoopNamespaces: a SUBSCRIBE_NAMESPACE in a loop of two relays
// goes round once.
func TestRelayLoopNamespaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, _, ma, mb := relayLoop(t)
		c, _ := a.dial("/viewer", nil)
		_, err := subscribeNS(t, c, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		count := func(m *countingMetrics, kind string) int { return m.ofKind(kind) }
		settled(t, "round once", func() bool { return count(ma, KindSubscribeNamespace) == 2 && count(mb, KindSubscribeNamespace) == 1 })
		// Past both UpstreamTimeouts, on the bubble's clock: a request
		// still bouncing would have been answered by now.
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 2, count(ma, KindSubscribeNamespace), "a: the viewer's and b's")
		assert.Equal(t, 1, count(mb, KindSubscribeNamespace), "b: a's, once")
	})
}
