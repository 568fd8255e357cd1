package relay

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// movingUpstream is an Upstream with a session to each of several relays,
// of which it hands out the first that has not ended and that the relay
// has not sent GOAWAY on: a Dialer's next session, dialed ahead.
type movingUpstream struct {
	mu   sync.Mutex
	list []*moqt.Session
}

func (m *movingUpstream) Session(context.Context, wire.Namespace) (*moqt.Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.list {
		if s.Context().Err() == nil && !goingAway(s) {
			return s, nil
		}
	}
	return nil, nil
}

// add connects to target at path, h serving the requests it sends back.
func (m *movingUpstream) add(t *testing.T, target *node, path string, h moqt.Handler) {
	t.Helper()
	s, _ := target.dial(path, h)
	m.mu.Lock()
	m.list = append(m.list, s)
	m.mu.Unlock()
}

// TestUpstreamGoawayMigrates: when the relay's upstream sends GOAWAY, the
// relay subscribes to its tracks again through the session its Upstream
// returns now (§6.6.1: establish a new session and migrate Established
// subscriptions), before the old one ends. The track's subscriber sees no
// end, and gets every object once: those of the groups written while both
// subscriptions carried them, and those written after the upstream closed
// the old session.
func TestUpstreamGoawayMigrates(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin := startNode(t, scheme, Config{}, nil)
		b := edgeOf(t, origin, "b")
		c := edgeOf(t, origin, "c")
		up := &movingUpstream{}
		edge := startNode(t, scheme, Config{Upstream: up}, nil)
		up.add(t, b, "/edge", edge.relay)
		up.add(t, c, "/edge", edge.relay)

		tr, err := moqt.NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		pc, _ := origin.dial("/publisher", nil)
		_, err = publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		viewer, _ := edge.dial("/viewer", nil)
		sub, err := subscribe(t, viewer, testTrack, wire.Params{})
		require.NoError(t, err)

		var got []moqt.Object
		write := func(from, to uint64) {
			for g := from; g < to; g++ {
				writeGroup(t, tr, g, 3)
			}
			got = append(got, readAll(t, sub, int(to-from)*3)...)
		}
		write(0, 2)

		// b drains its session with the edge, within 2 s.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		sb := b.sessions["/edge"]
		drained := make(chan error, 1)
		go func() { drained <- sb.Shutdown(ctx, "") }()
		settled(t, "the edge subscribed through c", func() bool {
			return c.relay.reg.lookup(testTrack) != nil
		})
		write(2, 4) // both carry them
		<-drained
		require.Error(t, sb.Context().Err(), "b closed its session with the edge")
		write(4, 6) // c alone

		slices.SortFunc(got, func(x, y moqt.Object) int { return x.Location.Compare(y.Location) })
		require.Len(t, got, 18)
		for i, o := range got {
			assert.Equal(t, wire.Location{Group: uint64(i / 3), Object: uint64(i % 3)}, o.Location, "object %d, once", i)
			assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
		}
		assert.NoError(t, sub.Err(), "the subscription goes on")
		tr.End(wire.DoneTrackEnded, "over")
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
	})
}

// publisherAndViewer starts a relay with a publisher of testTrack and a
// subscriber to it, and returns the publisher, the subscription and what
// lists the subscriptions the publisher served.
func publisherAndViewer(t *testing.T, scheme string) (*publisher, *moqt.Subscription, func() []*moqt.ServedSubscription) {
	t.Helper()
	n := startNode(t, scheme, Config{}, nil)
	a := n.newPublisher("/a", testTrack, nil)
	n.announce(a, testTrack.Namespace)
	c, _ := n.dial("/viewer", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{})
	require.NoError(t, err)
	return a, sub, func() []*moqt.ServedSubscription {
		a.mu.Lock()
		defer a.mu.Unlock()
		return slices.Clone(a.served)
	}
}

// TestUpstreamRequestGoawayMigrates: when the publisher sends GOAWAY on the
// relay's SUBSCRIBE alone, naming no URI (§9.2: re-issue that request on
// the current session), the relay subscribes again on the same session;
// the old subscription goes on until the publisher ends it. The track's
// subscriber sees no end and gets every object once.
func TestUpstreamRequestGoawayMigrates(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		a, sub, served := publisherAndViewer(t, scheme)

		var got []moqt.Object
		write := func(g uint64) {
			writeGroup(t, a.track, g, 3)
			got = append(got, readAll(t, sub, 3)...)
		}
		write(0)
		settled(t, "subscribed upstream", func() bool { return len(served()) == 1 })
		old := served()[0]
		require.NoError(t, old.Goaway("", 2*time.Second))
		settled(t, "subscribed again on the same session", func() bool { return len(served()) == 2 })
		write(1) // both carry it
		time.Sleep(2 * time.Second)
		synctest.Wait()
		var done *moqt.DoneError
		require.ErrorAs(t, old.Err(), &done, "the publisher ended the old one at the GOAWAY's Timeout")
		assert.Equal(t, wire.DoneGoingAway, done.Code)
		write(2) // the new one alone

		slices.SortFunc(got, func(x, y moqt.Object) int { return x.Location.Compare(y.Location) })
		require.Len(t, got, 9)
		for i, o := range got {
			assert.Equal(t, wire.Location{Group: uint64(i / 3), Object: uint64(i % 3)}, o.Location, "object %d, once", i)
		}
		assert.NoError(t, sub.Err(), "the subscription goes on")
		a.track.End(wire.DoneTrackEnded, "over")
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
	})
}

// TestUpstreamRequestGoawayBounded: a publisher that sends GOAWAY on the
// relay's SUBSCRIBE and again on the one issued in its place, ending
// neither, gets no third: the relay keeps at most two subscriptions of a
// track to one session (maxUpstreamsPerSession).
func TestUpstreamRequestGoawayBounded(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		_, sub, served := publisherAndViewer(t, scheme)
		// The publisher's handler records its subscription after it
		// answered, so after the relay may have answered the viewer.
		settled(t, "subscribed upstream", func() bool { return len(served()) == 1 })
		require.NoError(t, served()[0].Goaway("", 0))
		settled(t, "subscribed again", func() bool { return len(served()) == 2 })
		require.NoError(t, served()[1].Goaway("", 0))
		synctest.Wait()
		assert.Len(t, served(), 2, "no third subscription")
		assert.NoError(t, sub.Err())
	})
}
