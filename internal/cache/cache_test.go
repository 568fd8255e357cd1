package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/wire"
)

func loc(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }

// whole is the end of a window that takes group g whole.
func whole(g uint64) wire.Location { return loc(g, maxID) }

// obj is a Normal object whose payload names its Location.
func obj(g, o uint64) Object {
	p := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, g), o)
	return Object{Location: loc(g, o), SubgroupID: 1, Priority: 7, Payload: p}
}

// entry is what a test expects of a Cursor: an object's Location, or a
// marker.
type want struct {
	l wire.Location
	k wire.EndOfRange
}

func o(g, id uint64) want            { return want{l: loc(g, id)} }
func unknown(g, id uint64) want      { return want{l: loc(g, id), k: wire.EndOfUnknownRange} }
func absent(g, id uint64) want       { return want{l: loc(g, id), k: wire.EndOfNonExistentRange} }
func timedOut(g, id uint64) want     { return want{l: loc(g, id), k: wire.EndOfTimedOutRange} }
func unknownTo(l wire.Location) want { return want{l: l, k: wire.EndOfUnknownRange} }

// walk returns every entry of cu, checking each object's payload.
func walk(t *testing.T, ctx context.Context, cu *Cursor) []want {
	t.Helper()
	var got []want
	for range 10000 {
		e, err := cu.Next(ctx)
		if errors.Is(err, io.EOF) {
			return got
		}
		require.NoError(t, err)
		if e.EndOfRange == 0 {
			assert.Equal(t, obj(e.Location.Group, e.Location.Object).Payload, e.Payload, "payload of %v", e.Location)
		}
		got = append(got, want{l: e.Location, k: e.EndOfRange})
	}
	t.Fatal("cursor does not end")
	return nil
}

func add(c *Cache, objs ...Object) {
	for _, o := range objs {
		c.Begin(o.Location)
		c.Add(o)
	}
}

func TestCursorOrders(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0), obj(0, 2), obj(1, 0), obj(1, 1), obj(3, 4))
	ctx := context.Background()
	// Locations never published inside what the cache saw do not exist:
	// plain gaps, no marker.
	assert.Equal(t, []want{o(0, 0), o(0, 2), o(1, 0), o(1, 1), o(3, 4)}, walk(t, ctx, c.Cursor(loc(0, 0), loc(3, 4), false)))
	assert.Equal(t, []want{o(3, 4), o(1, 0), o(1, 1), o(0, 0), o(0, 2)}, walk(t, ctx, c.Cursor(loc(0, 0), loc(3, 4), true)))
	// Partial edge groups.
	assert.Equal(t, []want{o(0, 2), o(1, 0)}, walk(t, ctx, c.Cursor(loc(0, 1), loc(1, 0), false)))
	assert.Equal(t, []want{o(1, 0), o(0, 2)}, walk(t, ctx, c.Cursor(loc(0, 1), loc(1, 0), true)))
	// Past the largest Location begun nothing is produced yet: unknown.
	assert.Equal(t, []want{o(3, 4), unknownTo(loc(9, maxID))}, walk(t, ctx, c.Cursor(loc(2, 0), whole(9), false)))
	// Descending: groups 9 to 4, then the tail of group 3 past {3, 4}.
	assert.Equal(t, []want{unknown(4, maxID), o(3, 4), unknown(3, maxID)}, walk(t, ctx, c.Cursor(loc(2, 0), whole(9), true)))
	// An empty window has nothing.
	assert.Empty(t, walk(t, ctx, c.Cursor(loc(2, 0), loc(1, 0), false)))
}

func TestFieldsKept(t *testing.T) {
	c := New(Limits{Objects: 10}, wire.Opt[wire.Location]{})
	props := []byte{0x3e, 0x01}
	payload := []byte("hello")
	c.Begin(loc(1, 2))
	c.Add(Object{Location: loc(1, 2), SubgroupID: 9, Priority: 3, Properties: props, Payload: payload})
	c.Begin(loc(1, 3))
	c.Add(Object{Location: loc(1, 3), Priority: 4, Datagram: true, Payload: []byte("d")})
	props[0], payload[0] = 0, 0 // the cache keeps copies
	cu := c.Cursor(loc(1, 0), loc(1, 3), false)
	e, err := cu.Next(context.Background())
	require.NoError(t, err)
	assert.Equal(t, Object{Location: loc(1, 2), SubgroupID: 9, Priority: 3, Properties: []byte{0x3e, 0x01}, Payload: []byte("hello")}, e)
	e, err = cu.Next(context.Background())
	require.NoError(t, err)
	assert.Equal(t, Object{Location: loc(1, 3), Priority: 4, Datagram: true, Payload: []byte("d")}, e)
}

func TestEvictByCount(t *testing.T) {
	c := New(Limits{Objects: 3}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0), obj(0, 1), obj(1, 0), obj(1, 1), obj(2, 0))
	n, _ := c.Len()
	assert.Equal(t, 3, n)
	// The lowest Locations went: unknown up to the last of them.
	assert.Equal(t, []want{unknown(0, 1), o(1, 0), o(1, 1), o(2, 0)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(2, 0), false)))
	// Descending, the tail of group 1 does not exist and precedes the
	// unknown start of group 0: told apart.
	assert.Equal(t, []want{o(2, 0), o(1, 0), o(1, 1), absent(1, maxID), unknown(0, 1)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(2, 0), true)))
}

func TestEvictByBytes(t *testing.T) {
	per := int64(16 + EntryOverhead)
	c := New(Limits{Bytes: 2 * per}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0), obj(0, 1), obj(0, 2))
	n, b := c.Len()
	assert.Equal(t, 2, n)
	assert.Equal(t, 2*per, b)
	assert.Equal(t, []want{unknown(0, 0), o(0, 1), o(0, 2)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 2), false)))
	// An object larger than the whole budget is not kept: unknown.
	big := obj(0, 3)
	big.Payload = make([]byte, 3*per)
	c.Begin(big.Location)
	c.Add(big)
	assert.Equal(t, []want{o(0, 2), unknown(0, 3)}, walk(t, context.Background(), c.Cursor(loc(0, 2), loc(0, 3), false)))
}

func TestExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100, Duration: time.Second}, wire.Opt[wire.Location]{})
		add(c, obj(0, 0), obj(0, 1))
		time.Sleep(600 * time.Millisecond)
		add(c, obj(0, 2))
		time.Sleep(600 * time.Millisecond)
		// 1.2 s after the first two began, 0.6 s after the third: the
		// first two may not be served any more (§10.3).
		assert.Equal(t, []want{unknown(0, 1), o(0, 2)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 2), false)))
		// They go at the next Add.
		add(c, obj(0, 3))
		n, _ := c.Len()
		assert.Equal(t, 2, n)
		time.Sleep(time.Second)
		assert.Equal(t, []want{unknown(0, 3)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 3), false)))
	})
}

// The age counts from when publication began, not when it completed.
func TestExpiryFromBegin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100, Duration: time.Second}, wire.Opt[wire.Location]{})
		c.Begin(loc(0, 0))
		time.Sleep(1500 * time.Millisecond)
		c.Add(obj(0, 0))
		c.Begin(loc(0, 1))
		c.Add(obj(0, 1))
		assert.Equal(t, []want{unknown(0, 0), o(0, 1)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 1), false)))
	})
}

func TestNeverSeen(t *testing.T) {
	// A cache set once {2, 5} was published knows nothing up to it.
	c := New(Limits{Objects: 10}, wire.Some(loc(2, 5)))
	add(c, obj(2, 7), obj(3, 0))
	assert.Equal(t, []want{unknown(2, 5), o(2, 7), o(3, 0)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(3, 0), false)))
	assert.Equal(t, []want{o(3, 0), unknown(2, 5), o(2, 7), absent(2, maxID), unknown(0, maxID)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(3, 0), true)))
	// An object of that span arriving late is not taken.
	add(c, obj(1, 0))
	n, _ := c.Len()
	assert.Equal(t, 2, n)
}

// Largest Objects learnt from upstream leave unknown ranges; what the cache
// saw around them is kept.
func TestUnknownRanges(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	c.Unknown(loc(1, 3)) // nothing held: the floor
	add(c, obj(1, 4), obj(1, 5))
	c.Unknown(loc(4, 2))
	add(c, obj(4, 3))
	// {1,6}..{4,2}: unknown. A non-existent range before an unknown one is
	// told apart only where they touch without an object between.
	assert.Equal(t, []want{unknown(1, 3), o(1, 4), o(1, 5), unknown(4, 2), o(4, 3)},
		walk(t, context.Background(), c.Cursor(loc(0, 0), loc(4, 3), false)))
	assert.Equal(t, []want{unknown(4, 2), o(4, 3), unknown(1, 3), o(1, 4), o(1, 5), unknown(0, maxID)},
		walk(t, context.Background(), c.Cursor(loc(0, 0), loc(4, 3), true)))
	// Past MaxUnknownRanges the floor rises over the lowest.
	for i := range uint64(MaxUnknownRanges + 1) {
		g := 10 + 2*i
		add(c, obj(g, 0))
		c.Unknown(loc(g+1, 0))
	}
	assert.LessOrEqual(t, len(c.unknown), MaxUnknownRanges)
	assert.Equal(t, []want{unknownTo(loc(11, 0)), o(12, 0)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(12, 0), false)))
}

// End of Non-Existent Range splits what does not exist from an unknown
// range right after it, and only there.
func TestNonExistentSplit(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0))
	c.Begin(loc(0, 5))
	c.Abandon(loc(0, 5)) // closed short: unknown
	add(c, obj(0, 6))
	c.Begin(loc(0, 7))
	c.Abandon(loc(0, 7))
	add(c, obj(0, 9))
	assert.Equal(t, []want{o(0, 0), absent(0, 4), unknown(0, 5), o(0, 6), unknown(0, 7), o(0, 9)},
		walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 9), false)))
	// Without the abandoned objects: plain gaps.
	d := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(d, obj(0, 0), obj(0, 6), obj(0, 9))
	assert.Equal(t, []want{o(0, 0), o(0, 6), o(0, 9)}, walk(t, context.Background(), d.Cursor(loc(0, 0), loc(0, 9), false)))
}

// Status objects are knowledge: End of Group and End of Track say what
// does not exist past them, and are not served.
func TestStatusObjects(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(c, obj(0, 0), Object{Location: loc(0, 2), Status: wire.ObjectEndOfGroup})
	add(c, obj(1, 0), Object{Location: loc(1, 1), Status: wire.ObjectEndOfTrack})
	// Past the End of Track nothing exists, produced or not: no marker.
	assert.Equal(t, []want{o(0, 0), o(1, 0)}, walk(t, context.Background(), c.Cursor(loc(0, 0), whole(5), false)))
	assert.Equal(t, []want{o(1, 0), o(0, 0)}, walk(t, context.Background(), c.Cursor(loc(0, 0), whole(5), true)))
	// Past an End of Group, with the group above the top: no marker.
	d := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	add(d, obj(0, 0), Object{Location: loc(0, 1), Status: wire.ObjectEndOfGroup})
	assert.Equal(t, []want{o(0, 0)}, walk(t, context.Background(), d.Cursor(loc(0, 0), whole(0), false)))
	// A datagram's END_OF_GROUP flag likewise.
	e := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	eog := obj(0, 0)
	eog.Datagram, eog.EndOfGroup = true, true
	add(e, eog)
	assert.Equal(t, []want{o(0, 0)}, walk(t, context.Background(), e.Cursor(loc(0, 0), whole(0), false)))
	assert.Equal(t, []want{o(0, 0), absent(0, maxID), unknown(1, maxID)}, walk(t, context.Background(), e.Cursor(loc(0, 0), whole(1), false)))
}

func TestPendingCompletes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
		add(c, obj(0, 0))
		c.Begin(loc(0, 1))
		cu := c.Cursor(loc(0, 0), loc(0, 1), false)
		got := make(chan []want)
		go func() { got <- walk(t, context.Background(), cu) }()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("the cursor did not wait for the pending object")
		default:
		}
		c.Add(obj(0, 1))
		assert.Equal(t, []want{o(0, 0), o(0, 1)}, <-got)
		assert.Empty(t, c.waits, "the wait's channel goes once closed")
	})
}

func TestPendingAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
		c.Begin(loc(0, 0))
		got := make(chan []want)
		go func() { got <- walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 0), false)) }()
		synctest.Wait()
		c.Abandon(loc(0, 0))
		assert.Equal(t, []want{unknown(0, 0)}, <-got)
		assert.Empty(t, c.waits, "the wait's channel goes once closed")
	})
}

func TestPendingTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
		add(c, obj(0, 0))
		c.Begin(loc(0, 1))
		add(c, obj(0, 2))
		c.Begin(loc(0, 3))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		got := walk(t, ctx, c.Cursor(loc(0, 0), loc(0, 3), false))
		// One wait, then no more: the second pending object times out at
		// once.
		assert.Equal(t, time.Second, time.Since(start))
		assert.Equal(t, []want{o(0, 0), timedOut(0, 1), o(0, 2), timedOut(0, 3)}, got)
	})
}

// A cursor waits for a pending object no longer than it may be served.
func TestPendingExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 10, Duration: time.Second}, wire.Opt[wire.Location]{})
		c.Begin(loc(0, 0))
		start := time.Now()
		assert.Equal(t, []want{unknown(0, 0)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 0), false)))
		assert.Equal(t, time.Second, time.Since(start))
	})
}

func TestPendingEvicted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 2}, wire.Opt[wire.Location]{})
		c.Begin(loc(0, 0))
		got := make(chan []want)
		go func() { got <- walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 2), false)) }()
		synctest.Wait()
		add(c, obj(0, 1), obj(0, 2))
		assert.Equal(t, []want{unknown(0, 0), o(0, 1), o(0, 2)}, <-got)
		assert.Empty(t, c.waits, "the wait's channel goes once closed")
	})
}

func TestCloseAbandonsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Limits{Objects: 10}, wire.Opt[wire.Location]{})
		c.Begin(loc(0, 0))
		got := make(chan []want)
		go func() { got <- walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 0), false)) }()
		synctest.Wait()
		c.Close()
		assert.Equal(t, []want{unknown(0, 0)}, <-got)
		assert.Empty(t, c.waits, "the wait's channel goes once closed")
		add(c, obj(0, 1))
		n, _ := c.Len()
		assert.Equal(t, 1, n, "a closed cache takes nothing")
	})
}

// A window of 2^62 groups with a few objects in it is walked in a few
// steps, in both orders.
func TestHugeWindow(t *testing.T) {
	c := New(Limits{Objects: 10}, wire.Some(loc(1000, 0)))
	add(c, obj(1<<40, 0), obj(1<<41, 3))
	end := whole(1 << 62)
	assert.Equal(t, []want{unknown(1000, 0), o(1<<40, 0), o(1<<41, 3), unknownTo(loc(1<<62, maxID))},
		walk(t, context.Background(), c.Cursor(loc(0, 0), end, false)))
	assert.Equal(t, []want{unknown(1<<41+1, maxID), o(1<<41, 3), unknown(1<<41, maxID), o(1<<40, 0),
		absent(1001, maxID), unknown(1000, 0), absent(1000, maxID), unknown(0, maxID)},
		walk(t, context.Background(), c.Cursor(loc(0, 0), end, true)))
}

// Memory stays within the limits whatever the rate: entries and bytes
// counted, and the heap really held, with many small groups or one huge
// one.
func TestBounded(t *testing.T) {
	for name, perGroup := range map[string]uint64{"small groups": 16, "one group": 1 << 62} {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c := New(Limits{Objects: 64, Bytes: 64 << 10}, wire.Opt[wire.Location]{})
			for i := range uint64(200000) {
				o := obj(i/perGroup, i%perGroup)
				o.Payload = make([]byte, int(i%3000))
				c.Begin(o.Location)
				if i%7 == 0 {
					c.Abandon(o.Location)
					continue
				}
				c.Add(o)
				n, b := c.Len()
				if n > 64 || b > 64<<10 {
					t.Fatalf("after %d objects: %d entries, %d bytes", i, n, b)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			assert.LessOrEqual(t, len(c.groups), 64)
			// 64 KiB of objects, their slices and bookkeeping: far below
			// 1 MiB, where 200,000 objects of 1.5 KB on average would be
			// 300 MB.
			assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(1<<20))
			runtime.KeepAlive(c)
		})
	}
}

// Objects begun, completed, abandoned and evicted while cursors walk, in
// both orders: each cursor yields Locations in strictly increasing order
// (its order), every object whole, and no published Location silently:
// the only plain gaps are the unpublished tails of the groups.
func TestConcurrentAddEvict(t *testing.T) {
	c := New(Limits{Objects: 50}, wire.Opt[wire.Location]{})
	const groups, per = 300, 10
	var wg sync.WaitGroup
	wg.Go(func() {
		for g := range uint64(groups) {
			for id := range uint64(per) {
				l := loc(g, id)
				c.Begin(l)
				runtime.Gosched()
				if (g+id)%13 == 0 {
					c.Abandon(l)
				} else {
					c.Add(obj(g, id))
				}
			}
		}
	})
	var markers atomic.Int64
	for i := range 4 {
		desc := i%2 == 1
		wg.Go(func() {
			// before reports whether a comes before b in the cursor's order.
			before := func(a, b wire.Location) bool {
				if desc && a.Group != b.Group {
					return a.Group > b.Group
				}
				return a.Less(b)
			}
			succ := func(l wire.Location) wire.Location {
				switch {
				case l.Object < maxID:
					return loc(l.Group, l.Object+1)
				case desc:
					return loc(l.Group-1, 0)
				}
				return loc(l.Group+1, 0)
			}
			for range 20 {
				cu := c.Cursor(loc(0, 0), loc(groups-1, per-1), desc)
				var prev *wire.Location
				covered := loc(0, 0) // everything before it in order was yielded or covered
				if desc {
					covered = loc(groups-1, 0)
				}
				for {
					e, err := cu.Next(context.Background())
					if errors.Is(err, io.EOF) {
						break
					}
					if !assert.NoError(t, err) {
						return
					}
					if prev != nil && !before(*prev, e.Location) {
						t.Errorf("%v after %v", e.Location, *prev)
						return
					}
					if e.EndOfRange == 0 {
						tail := loc(covered.Group+1, 0)
						if desc {
							tail = loc(covered.Group-1, 0)
						}
						gap := e.Location != covered && (covered.Object < per || e.Location != tail)
						assert.False(t, gap, "%v after %v without a marker", e.Location, covered)
						assert.Equal(t, obj(e.Location.Group, e.Location.Object).Payload, e.Payload)
					} else {
						markers.Add(1)
					}
					l := e.Location
					prev = &l
					covered = succ(l)
				}
			}
		})
	}
	wg.Wait()
	assert.Positive(t, markers.Load(), "the cursors met evicted ranges")
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A relayed cache records an object only within MaxInsertShift of the end
// of its group, and a group only within MaxInsertShift of the newest, so
// that objects sent in descending order cost no more than in order; what
// it skips is unknown. The original publisher's cache records them all.
func TestRelayedInsertsBounded(t *testing.T) {
	const n = 3 * MaxInsertShift
	for _, relayed := range []bool{true, false} {
		objects := New(Limits{Objects: 10 * n, Relayed: relayed}, wire.Opt[wire.Location]{})
		groups := New(Limits{Objects: 10 * n, Relayed: relayed}, wire.Opt[wire.Location]{})
		for i := n; i >= 0; i-- {
			add(objects, obj(0, uint64(i)))
			add(groups, obj(uint64(i), 0))
		}
		want := n + 1
		if relayed {
			want = MaxInsertShift + 1
		}
		count, _ := objects.Len()
		assert.Equal(t, want, count, "objects of one group, relayed %v", relayed)
		count, _ = groups.Len()
		assert.Equal(t, want, count, "groups, relayed %v", relayed)
	}
	c := New(Limits{Objects: 10 * n, Relayed: true}, wire.Opt[wire.Location]{})
	for i := MaxInsertShift + 1; i >= 0; i-- {
		add(c, obj(0, uint64(i)))
	}
	assert.Equal(t, []want{unknown(0, 0), o(0, 1), o(0, 2)}, walk(t, context.Background(), c.Cursor(loc(0, 0), loc(0, 2), false)))
}
