package cache

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// write begins and completes objects of s's group, as a SubgroupWriter
// does.
func write(c *Cache, s *Subgroup, g uint64, ids ...uint64) {
	for _, id := range ids {
		s.Begin(id)
		c.Add(obj(g, id))
	}
}

// walkLater starts walking cu and fails t unless the walk waits; the
// result comes on the channel once it ends.
func walkLater(t *testing.T, ctx context.Context, cu *Cursor) <-chan []want {
	t.Helper()
	got := make(chan []want, 1)
	go func() { got <- walk(t, ctx, cu) }()
	synctest.Wait()
	select {
	case w := <-got:
		t.Fatalf("the cursor did not wait: %v", w)
	default:
	}
	return got
}

// TestOpenSubgroupPending: Locations below the top that an open subgroup
// may still carry are pending, in both orders: a subgroup lagging behind a
// later group, and one opened with nothing begun yet. The cursor waits for
// them and serves them once each, in order, rather than skipping them as
// absent.
func TestOpenSubgroupPending(t *testing.T) {
	for _, desc := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
			lag := c.OpenSubgroup(0, 0)
			write(c, lag, 0, 0)
			idle := c.OpenSubgroup(1, 0)
			add(c, obj(2, 0), obj(2, 1))
			got := walkLater(t, context.Background(), c.Cursor(loc(0, 0), loc(2, 1), desc))
			write(c, lag, 0, 1, 3)
			synctest.Wait()
			lag.Finish(false)
			write(c, idle, 1, 0)
			idle.Finish(false)
			expect := []want{o(0, 0), o(0, 1), o(0, 3), o(1, 0), o(2, 0), o(2, 1)}
			if desc {
				expect = []want{o(2, 0), o(2, 1), o(1, 0), o(0, 0), o(0, 1), o(0, 3)}
			}
			assert.Equal(t, expect, <-got, "descending %v", desc)
		})
	}
}

// TestSubgroupEnds: a finished subgroup carries nothing more (the rest of
// its group, below the top, does not exist; with END_OF_GROUP, past the
// top too), a reset one may go on elsewhere (unknown, told in-band).
func TestSubgroupEnds(t *testing.T) {
	ctx := context.Background()
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	fin := c.OpenSubgroup(0, 0)
	write(c, fin, 0, 0, 1)
	reset := c.OpenSubgroup(1, 0)
	write(c, reset, 1, 0)
	eog := c.OpenSubgroup(2, 0)
	write(c, eog, 2, 0)
	fin.Finish(false)
	reset.Reset()
	eog.Finish(true)
	assert.Equal(t, []want{o(0, 0), o(0, 1), o(1, 0), unknown(1, maxID), o(2, 0)},
		walk(t, ctx, c.Cursor(loc(0, 0), whole(2), false)), "past {2, 0}: not produced, but for the End of Group")
	// A subgroup reset before its first object, in a group the cache holds
	// nothing of, below the top.
	none := c.OpenSubgroup(3, 0)
	add(c, obj(4, 0))
	none.Reset()
	assert.Equal(t, []want{unknown(3, maxID), o(4, 0)}, walk(t, ctx, c.Cursor(loc(3, 0), loc(4, 0), false)))

	// Relayed, what a finished subgroup did not carry is unknown all the
	// same, but for the End of Group.
	r := New(Limits{Objects: 100, Relayed: true}, wire.Opt[wire.Location]{})
	plain := r.OpenSubgroup(0, 0)
	write(r, plain, 0, 0)
	plain.Finish(false)
	eog = r.OpenSubgroup(1, 0)
	write(r, eog, 1, 0)
	eog.Finish(true)
	add(r, obj(2, 0))
	assert.Equal(t, []want{o(0, 0), unknown(0, maxID), o(1, 0), o(2, 0)}, walk(t, ctx, r.Cursor(loc(0, 0), loc(2, 0), false)))
}

// TestOpenSubgroupTimesOut: a wait on an open subgroup ends with ctx: an
// End of Timed-Out Range, and nothing later is waited for. Close ends the
// wait too: what the subgroups may still carry is unknown.
func TestOpenSubgroupTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
		a := c.OpenSubgroup(0, 0)
		write(c, a, 0, 0)
		b := c.OpenSubgroup(1, 0)
		write(c, b, 1, 0)
		add(c, obj(2, 0))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		assert.Equal(t, []want{o(0, 0), timedOut(0, maxID), o(1, 0), timedOut(1, maxID), o(2, 0)},
			walk(t, ctx, c.Cursor(loc(0, 0), loc(2, 0), false)))
		assert.Equal(t, time.Second, time.Since(start), "one wait")

		got := walkLater(t, context.Background(), c.Cursor(loc(0, 0), loc(2, 0), false))
		c.Close()
		assert.Equal(t, []want{o(0, 0), unknown(0, maxID), o(1, 0), unknown(1, maxID), o(2, 0)}, <-got)
		a.Finish(false) // after Close: nothing
		b.Reset()
	})
}

// TestOpenSubgroupsBounded: the subgroups followed stay few whatever the
// calls: past MaxOpenSubgroups the lowest is given up (unknown, as if
// reset), and the floor rising past a group drops its subgroups.
func TestOpenSubgroupsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // a wait is a failure, not a hang
		c := New(Limits{Objects: 4}, wire.Opt[wire.Location]{})
		first := c.OpenSubgroup(0, 0)
		write(c, first, 0, 0)
		for g := range uint64(MaxOpenSubgroups) {
			c.OpenSubgroup(g+1, 0)
		}
		assert.Len(t, c.open, MaxOpenSubgroups)
		assert.False(t, first.open, "the lowest was given up")
		add(c, obj(MaxOpenSubgroups+1, 0))
		assert.Equal(t, []want{o(0, 0), unknown(0, maxID)}, walk(t, context.Background(), c.Cursor(loc(0, 0), whole(0), false)))
		for g := range uint64(8) {
			add(c, obj(MaxOpenSubgroups+2+g, 0))
		}
		// The floor is in group MaxOpenSubgroups+6: the subgroups below went.
		assert.Empty(t, c.open)
	})
}

// TestRelayedGapsUnknown: a relayed cache takes the Locations it was not
// given for unknown (§2.1), until Learn says they do not exist; what it
// learns merges into few ranges, objects it holds in between, and past
// MaxKnownRanges the lowest range is forgotten: unknown again.
func TestRelayedGapsUnknown(t *testing.T) {
	ctx := context.Background()
	c := New(Limits{Objects: 1000, Relayed: true}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0), obj(0, 2), obj(1, 0), obj(3, 0))
	assert.Equal(t, []want{o(0, 0), unknown(0, 1), o(0, 2), unknown(0, maxID), o(1, 0), unknown(2, maxID), o(3, 0)},
		walk(t, ctx, c.Cursor(loc(0, 0), loc(3, 0), false)))
	learn(t, c, loc(0, 1), loc(0, 1))
	learn(t, c, loc(0, 3), whole(0))
	learn(t, c, loc(1, 1), whole(2))
	assert.Equal(t, []want{o(0, 0), o(0, 2), o(1, 0), o(3, 0)}, walk(t, ctx, c.Cursor(loc(0, 0), loc(3, 0), false)))
	assert.Equal(t, []span{{from: loc(0, 1), to: whole(2)}}, c.absent, "one range, the objects between held")

	// Ranges apart: each its own, the lowest forgotten past the cap.
	for g := range uint64(MaxKnownRanges + 1) {
		add(c, obj(10+2*g, 0))
	}
	add(c, obj(1000, 0))
	for g := range uint64(MaxKnownRanges + 1) {
		learn(t, c, loc(10+2*g, 1), loc(10+2*g, 5))
	}
	assert.Len(t, c.absent, MaxKnownRanges)
	assert.Equal(t, []want{o(10, 0), unknown(11, maxID), o(12, 0), absent(12, 5), unknown(12, maxID)},
		walk(t, ctx, c.Cursor(loc(10, 0), whole(12), false)), "{10, 1}-{10, 5} forgotten; {12, 1}-{12, 5} kept")
	// One answer over many ranges takes them in.
	learn(t, c, loc(10, 1), whole(999))
	assert.Equal(t, []span{{from: loc(10, 1), to: whole(999)}}, c.absent)
	assert.Len(t, walk(t, ctx, c.Cursor(loc(10, 0), loc(1000, 0), false)), MaxKnownRanges+2, "the objects alone")
}

// TestLearnBeforePending: what an upstream says of the Locations before a
// pending one is learnt, the pending one left to complete.
func TestLearnBeforePending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100, Relayed: true}, wire.Opt[wire.Location]{})
		add(c, obj(0, 0))
		c.Begin(loc(0, 5))
		require.NoError(t, c.Learn(loc(0, 1), obj(0, 5)))
		got := walkLater(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 5), false))
		c.Add(obj(0, 5))
		assert.Equal(t, []want{o(0, 0), o(0, 5)}, <-got)
	})
}

// TestSubgroupPut: Put is Begin and Add in one step. The object is served
// at once, the subgroup moves past it (a cursor waiting on the Locations
// it may still carry is answered), the object's age counts from the time
// Put is given, and a Location already held does not change.
func TestSubgroupPut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := New(Limits{Objects: 100, Duration: time.Minute}, wire.Opt[wire.Location]{})
		s := c.OpenSubgroup(0, 0)
		s.Put(obj(0, 0), mono.Now())
		later := c.OpenSubgroup(1, 0)
		later.Put(obj(1, 0), mono.Now())
		got := walkLater(t, ctx, c.Cursor(loc(0, 0), loc(0, 2), false))
		s.Put(obj(0, 2), mono.Now())
		assert.Equal(t, []want{o(0, 0), o(0, 2)}, <-got, "0/1 is skipped: the subgroup moved past it")

		changed := obj(0, 2)
		changed.Payload = []byte("other")
		s.Put(changed, mono.Now())
		assert.Equal(t, []want{o(0, 2)}, walk(t, ctx, c.Cursor(loc(0, 2), loc(0, 2), false)),
			"the object as first put (walk checks the payload)")

		s.Finish(false)
		later.Finish(false)

		aged := New(Limits{Objects: 100, Duration: time.Minute}, wire.Opt[wire.Location]{})
		s = aged.OpenSubgroup(0, 0)
		s.Put(obj(0, 0), mono.Now()-int64(2*time.Minute))
		n, _ := aged.Len()
		assert.Equal(t, 1, n, "evicted only by a later pass")
		s.Put(obj(0, 1), mono.Now())
		n, _ = aged.Len()
		assert.Equal(t, 1, n, "0/0's age counts from the time it was put with")
		s.Finish(false)
	})
}

// TestSubgroupPutAfterItsGroupLeft: a subgroup whose group was evicted
// whole (another subgroup's objects pushed it out) Puts its next object
// into the group as the Cache holds it now, not into the one that left:
// the Cache counts what it holds, and evicts its lowest Location, not
// another group's object.
func TestSubgroupPutAfterItsGroupLeft(t *testing.T) {
	c := New(Limits{Objects: 2}, wire.Opt[wire.Location]{})
	s0 := c.OpenSubgroup(0, 0)
	s0.Put(Object{Location: wire.Location{Group: 0, Object: 0}, Payload: []byte("a")}, 0)
	s1 := c.OpenSubgroup(1, 0)
	s1.Put(Object{Location: wire.Location{Group: 1, Object: 0}, Payload: []byte("b")}, 0)
	s1.Put(Object{Location: wire.Location{Group: 1, Object: 1}, Payload: []byte("c")}, 0) // evicts group 0
	s0.Put(Object{Location: wire.Location{Group: 0, Object: 1}, Payload: []byte("d")}, 0) // the lowest: evicted at once

	n, _ := c.Len()
	assert.Equal(t, 2, n)
	for _, l := range []wire.Location{{Group: 1, Object: 0}, {Group: 1, Object: 1}} {
		e, _, _ := c.lookup(l, nil)
		assert.NotNil(t, e, "%v is held", l)
	}
	e, _, _ := c.lookup(wire.Location{Group: 0, Object: 1}, nil)
	assert.Nil(t, e, "the lowest Location went")
}
