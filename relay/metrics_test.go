package relay

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// countingMetrics counts what a relay reports.
type countingMetrics struct {
	mu                sync.Mutex
	started, ended    int
	requests          map[string]int
	objsIn, objsOut   int
	bytesIn, bytesOut int
	drops             map[string]int
}

func (m *countingMetrics) SessionStarted(bool) { m.mu.Lock(); m.started++; m.mu.Unlock() }
func (m *countingMetrics) SessionEnded(bool)   { m.mu.Lock(); m.ended++; m.mu.Unlock() }
func (m *countingMetrics) Request(kind, outcome string) {
	m.mu.Lock()
	m.requests[kind+"/"+outcome]++
	m.mu.Unlock()
}
func (m *countingMetrics) ObjectsIn(n, b int) {
	m.mu.Lock()
	m.objsIn += n
	m.bytesIn += b
	m.mu.Unlock()
}
func (m *countingMetrics) ObjectsOut(n, b int) {
	m.mu.Lock()
	m.objsOut += n
	m.bytesOut += b
	m.mu.Unlock()
}
func (m *countingMetrics) Dropped(r string, n int) { m.mu.Lock(); m.drops[r] += n; m.mu.Unlock() }

func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
		n := startNode(t, "moqt", Config{Metrics: m}, nil)
		a := n.newPublisher("/a", testTrack, nil)
		b := n.newPublisher("/b", testTrack, nil)
		n.announce(a, wire.NewNamespace("live"))
		n.announce(b, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		_, err = subscribe(t, c, wire.FullTrackName{Namespace: wire.NewNamespace("none"), Name: []byte("x")}, wire.Params{})
		require.Error(t, err)
		settled(t, "both serve", func() bool { return len(a.servedSubs()) == 1 && len(b.servedSubs()) == 1 })
		writeGroup(t, a.track, 0, 3)
		writeGroup(t, b.track, 0, 3)
		readAll(t, sub, 3)
		settled(t, "counted", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			// A request is counted once its answer is sent, which the
			// subscriber may read (and the objects after it) first.
			return m.objsIn == 6 && m.objsOut == 3 && m.drops[DropDuplicate] == 3 &&
				m.requests[KindSubscribe+"/"+OutcomeOK]+m.requests[KindSubscribe+"/"+OutcomeNotFound] >= 2
		})
		m.mu.Lock()
		assert.Equal(t, 1, m.requests[KindSubscribe+"/"+OutcomeOK])
		assert.Equal(t, 1, m.requests[KindSubscribe+"/"+OutcomeNotFound])
		assert.Equal(t, 9, m.bytesOut, "payloads of 3 bytes")
		assert.Equal(t, 3, m.started, "the subscriber and both publishers")
		m.mu.Unlock()
		require.NoError(t, c.Close())
		settled(t, "session ended", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.ended == 1 })
	})
}

// TestWatchCountsIdleSessions: a session the server hands to Watch at
// setup counts before, and without, any request of its own.
func TestWatchCountsIdleSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
		n := startNode(t, "moqt", Config{Metrics: m}, nil)
		c, s := n.dial("/idle", nil)
		assert.True(t, n.relay.Watch(s))
		assert.True(t, n.relay.Watch(s), "counted once")
		m.mu.Lock()
		assert.Equal(t, 1, m.started, "the idle session")
		m.mu.Unlock()
		require.NoError(t, c.Close())
		settled(t, "session ended", func() bool { m.mu.Lock(); defer m.mu.Unlock(); return m.ended == 1 })
		require.NoError(t, n.relay.Close())
		_, s2 := n.dial("/late", nil)
		assert.False(t, n.relay.Watch(s2), "the relay is closed")
	})
}
