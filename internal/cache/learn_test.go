package cache

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// learn gives c an upstream's answer for [from, end], ascending: objs,
// then the end of the answer at end (its FIN).
func learn(t *testing.T, c *Cache, from, end wire.Location, objs ...Object) {
	t.Helper()
	for _, o := range objs {
		require.NoError(t, c.Learn(from, o))
		from = next(o.Location)
	}
	require.NoError(t, c.Learn(from, Object{Location: end, EndOfRange: wire.EndOfNonExistentRange}))
}

// TestLearnBelowFloor: what an upstream answers for Locations below the
// floor becomes known, objects and gaps alike, and the rest below the old
// floor stays unknown.
func TestLearnBelowFloor(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Some(loc(4, 3))) // groups 0-4 never seen
	add(c, obj(5, 0))
	ctx := context.Background()
	learn(t, c, loc(2, 0), whole(3), obj(2, 0), obj(2, 2), obj(3, 1))
	assert.Equal(t, []want{unknown(1, maxID), o(2, 0), o(2, 2), o(3, 1), absent(3, maxID), unknown(4, 3), o(5, 0)},
		walk(t, ctx, c.Cursor(loc(0, 0), loc(5, 0), false)))
	learn(t, c, loc(0, 0), whole(1))
	assert.Equal(t, []want{o(2, 0), o(2, 2), o(3, 1), absent(3, maxID), unknown(4, 3), o(5, 0)},
		walk(t, ctx, c.Cursor(loc(0, 0), loc(5, 0), false)), "groups 0 and 1 do not exist")
	n, _ := c.Len()
	assert.Equal(t, 4, n)
}

// TestLearnUnknownRange: an answer for part of an unknown range above the
// floor splits it; markers other than End of Non-Existent Range teach
// nothing.
func TestLearnUnknownRange(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0))
	c.Unknown(loc(5, 0)) // an upstream's Largest: {0, 1} to {5, 0} unknown
	add(c, obj(6, 0))
	ctx := context.Background()
	require.NoError(t, c.Learn(loc(2, 0), Object{Location: loc(2, 5), EndOfRange: wire.EndOfUnknownRange}))
	learn(t, c, loc(3, 0), whole(3), obj(3, 2))
	assert.Equal(t, []want{o(0, 0), unknown(2, maxID), o(3, 2), absent(3, maxID), unknown(5, 0), o(6, 0)},
		walk(t, ctx, c.Cursor(loc(0, 0), loc(6, 0), false)))
}

// TestLearnConflict: a learnt object that differs from the cached one in
// Subgroup ID, priority, forwarding preference or payload is refused and
// reported; the cached one stays (§7.1). The same object again is fine.
func TestLearnConflict(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0), obj(0, 1))
	require.NoError(t, c.Learn(loc(0, 0), obj(0, 0)))
	for name, change := range map[string]func(*Object){
		"subgroup": func(o *Object) { o.SubgroupID++ },
		"priority": func(o *Object) { o.Priority++ },
		"datagram": func(o *Object) { o.Datagram = true },
		"payload":  func(o *Object) { o.Payload = []byte("other") },
	} {
		d := obj(0, 1)
		change(&d)
		assert.ErrorIs(t, c.Learn(loc(0, 1), d), ErrConflict, name)
	}
	assert.Equal(t, []want{o(0, 0), o(0, 1)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 1), false)))
}

// TestLearnBounded: learnt objects count against the limits, lowest
// evicted first, and the unknown ranges stay few whatever is learnt.
func TestLearnBounded(t *testing.T) {
	c := New(Limits{Objects: 4}, wire.Some(loc(99, 0)))
	add(c, obj(100, 0), obj(100, 1))
	for g := range uint64(50) {
		learn(t, c, loc(2*g, 0), whole(2*g), obj(2*g, 0))
	}
	n, _ := c.Len()
	assert.Equal(t, 4, n)
	assert.LessOrEqual(t, len(c.unknown), MaxUnknownRanges)
	assert.Equal(t, []want{o(100, 0), o(100, 1)}, walk(t, context.Background(), c.Cursor(loc(100, 0), loc(100, 1), false)))
}
