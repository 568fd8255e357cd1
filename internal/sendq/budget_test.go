package sendq

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sessionsOn returns n sessions of limit bytes drawing on b.
func sessionsOn(b *Shared, n int, limit int) []*Session {
	ss := make([]*Session, n)
	for i := range ss {
		ss[i] = new(Session)
		ss[i].Init(limit, b)
	}
	return ss
}

// TestSharedShares: the shared budget's rule. Any session may draw on the
// pool (half the limit) while it has room; each may hold its share (half
// the limit over the sessions) whatever the others hold; the limit is
// never passed.
func TestSharedShares(t *testing.T) {
	var zero Shared
	assert.Equal(t, int64(256<<20), zero.Bytes(), "the zero value is the default budget")
	assert.Equal(t, int64(256<<20), (&Shared{Limit: -1}).Bytes())
	b := &Shared{Limit: 1000}
	s := sessionsOn(b, 4, 1<<20)
	// Share 1000 / (2 × 4) = 125, pool 500.
	require.NoError(t, s[0].Charge(500), "from the pool")
	assert.ErrorIs(t, s[0].Charge(1), ErrExcessiveLoad, "the pool is spent and s0 holds more than its share")
	require.NoError(t, s[1].Charge(125), "a share, whatever the others hold")
	assert.Error(t, s[1].Charge(1), "past its share")
	require.NoError(t, s[2].Charge(125))
	require.NoError(t, s[3].Charge(125))
	assert.Equal(t, int64(875), b.Queued())
	s[0].Release(500)
	require.NoError(t, s[1].Charge(100), "the pool has room again")
	assert.Equal(t, int64(475), b.Queued())
	s[1].Release(225)
	s[2].Release(125)
	s[3].Release(125)
	assert.Zero(t, b.Queued())

	// Whatever the order of charges, the limit holds, and a session
	// within its share is never refused.
	for seed := range 50 {
		b := &Shared{Limit: 1000}
		ss := sessionsOn(b, 5, 1<<20)
		x := uint64(seed)*2654435761 + 1
		for range 200 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			i, n := int(x%5), int(x>>8%90)+1
			within := ss[i].Used()+int64(n) <= 1000/(2*5)
			if err := ss[i].Charge(n); err != nil {
				assert.False(t, within, "a session within its share was refused")
			}
			require.LessOrEqual(t, b.Queued(), int64(1000))
			if x>>20%4 == 0 {
				ss[i].Release(int(ss[i].Used()))
			}
		}
	}
}

// TestSessionLimit: a session refuses what would pass its own limit with
// the reason its peer is told, forces what must be queued, and stops
// drawing on the shared budget once done.
func TestSessionLimit(t *testing.T) {
	b := &Shared{Limit: 1 << 20}
	var s Session
	done := s.Init(100, b)
	assert.Equal(t, int64(1), b.Sessions())
	require.NoError(t, s.Charge(100))
	err := s.Charge(1)
	var ce *CutError
	require.ErrorAs(t, err, &ce)
	assert.ErrorIs(t, err, ErrExcessiveLoad)
	assert.Equal(t, "moqt: backlog budget spent: more than 100 bytes queued for the peer's session", err.Error())
	s.Force(50)
	assert.Equal(t, int64(150), s.Used(), "forced past the limit")
	assert.Equal(t, int64(150), b.Queued())
	s.Release(150)
	assert.Zero(t, b.Queued())
	done()
	assert.Zero(t, b.Sessions())

	var alone Session
	alone.Init(10, nil)()
	require.NoError(t, alone.Charge(10), "no shared budget")
	assert.Error(t, alone.Charge(1))
}

// TestGroupLimit: a group refuses what would pass its limit as too far
// behind, and what its session refuses as excessive load, counting
// neither.
func TestGroupLimit(t *testing.T) {
	var s Session
	s.Init(150, nil)
	var g, other Group
	g.Init(100, 0, &s)
	other.Init(100, 0, &s)
	require.NoError(t, g.charge(100, 100, 0))
	err := g.charge(1, 1, 0)
	assert.ErrorIs(t, err, ErrTooFarBehind)
	var ce *CutError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "more than 100 bytes waiting for the subscriber", ce.Reason)
	assert.Equal(t, int64(100), g.Queued())
	require.NoError(t, other.charge(50, 50, 0))
	assert.ErrorIs(t, other.charge(1, 1, 0), ErrExcessiveLoad, "the session's limit")
	assert.Equal(t, int64(50), other.Queued())
	g.release(100, 100)
	other.release(50, 50)
	assert.Zero(t, s.Used())
}

// TestGroupLimitWholeObject: the bytes of a whole object larger than half
// the limit are taken while no more than another such object waits before
// them (bound), in the group and in its session, and so are small objects
// after them; a third is too far behind. Pieces of a streamed object
// (whole 0) widen nothing.
func TestGroupLimitWholeObject(t *testing.T) {
	var s Session
	s.Init(150, nil)
	var g Group
	g.Init(100, 0, &s)
	require.NoError(t, g.charge(300, 10, 300), "one object past the limits")
	require.NoError(t, g.charge(10, 10, 300), "the next one's header")
	require.NoError(t, g.charge(250, 0, 300), "and most of its payload")
	require.NoError(t, g.charge(5, 5, 5), "a small object after them")
	assert.ErrorIs(t, g.charge(300, 300, 300), ErrTooFarBehind, "a third")
	assert.Equal(t, int64(565), g.Queued())
	g.release(565, 25)
	assert.Zero(t, s.Used())

	var streamed Group
	streamed.Init(100, 0, nil)
	require.NoError(t, streamed.charge(100, 100, 0))
	assert.ErrorIs(t, streamed.charge(1, 1, 0), ErrTooFarBehind, "a streamed object's piece")

	var alone Session
	alone.Init(100, nil)
	require.NoError(t, alone.charge(200, 200, 200))
	require.NoError(t, alone.charge(200, 200, 200))
	assert.ErrorIs(t, alone.charge(1, 1, 0), ErrExcessiveLoad, "past two objects")
}
