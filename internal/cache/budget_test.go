package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// sized is obj(g, o) with a payload of n bytes, its Location first.
func sized(g, o uint64, n int) Object {
	ob := obj(g, o)
	ob.Payload = append(ob.Payload, make([]byte, n-len(ob.Payload))...)
	return ob
}

// walkSized is walk for objects made by sized.
func walkSized(t *testing.T, cu *Cursor) []want {
	t.Helper()
	var got []want
	for range 10000 {
		e, err := cu.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return got
		}
		require.NoError(t, err)
		if e.EndOfRange == 0 {
			require.True(t, bytes.HasPrefix(e.Payload, obj(e.Location.Group, e.Location.Object).Payload), "payload of %v", e.Location)
		}
		got = append(got, want{l: e.Location, k: e.EndOfRange})
	}
	t.Fatal("cursor does not end")
	return nil
}

// heldBy sums what caches hold by their own count.
func heldBy(caches []*Cache) int64 {
	var sum int64
	for _, c := range caches {
		_, b := c.Len()
		sum += b
	}
	return sum
}

func TestFairLevel(t *testing.T) {
	for _, tc := range []struct {
		sizes  []int64
		target int64
		want   int64
	}{
		{[]int64{10, 20, 30}, 100, math.MaxInt64}, // fits
		{[]int64{10, 20, 30}, 60, math.MaxInt64},
		{[]int64{10, 20, 30}, 50, 20},                 // 10 + 20 + 20
		{[]int64{30, 10, 20}, 40, 15},                 // 10 + 15 + 15
		{[]int64{100, 100, 100, 1}, 31, 10},           // 1 + 3 × 10
		{[]int64{5, 5}, 0, 0},                         // nothing fits
		{nil, 10, math.MaxInt64},                      // no caches
		{[]int64{1 << 40, 1 << 40}, 1 << 30, 1 << 29}, // no overflow
	} {
		level := fairLevel(append([]int64(nil), tc.sizes...), tc.target)
		assert.Equal(t, tc.want, level, "sizes %v, target %d", tc.sizes, tc.target)
		var sum int64
		for _, s := range tc.sizes {
			sum += min(s, level)
		}
		assert.LessOrEqual(t, sum, max(tc.target, 0), "sizes %v capped at %d", tc.sizes, level)
	}
}

// Many caches filled together stay within their Budget, each a share: 32
// caches of up to 1 MiB each on a budget of 2 MiB. Without the Budget they
// would hold 32 MiB.
func TestBudgetBoundsCaches(t *testing.T) {
	const (
		caches = 32
		size   = 1 << 10
		limit  = 2 << 20
		per    = size + EntryOverhead
	)
	b := NewBudget(limit)
	list := make([]*Cache, caches)
	for i := range list {
		list[i] = New(Limits{Bytes: 1 << 20, Budget: b}, wire.Opt[wire.Location]{})
	}
	most := int64(0)
	for g := range uint64(64) {
		for id := range uint64(16) {
			for _, c := range list {
				add(c, sized(g, id, size))
				most = max(most, b.Held())
			}
		}
	}
	assert.LessOrEqual(t, most, int64(limit), "the budget's total at its largest")
	assert.Equal(t, heldBy(list), b.Held(), "the budget counts what its caches hold")
	// Every cache took the same part (they publish alike): within one
	// reclaim's sixteenth, and one object, of a fair share.
	for i, c := range list {
		_, held := c.Len()
		assert.InDelta(t, limit/caches, held, float64(limit/16/caches+per), "cache %d", i)
	}
	// The evicted Locations read as unknown, the rest as they were.
	got := walkSized(t, list[0].Cursor(loc(0, 0), loc(63, 15), false))
	require.NotEmpty(t, got)
	require.Equal(t, wire.EndOfUnknownRange, got[0].k, "the evicted start is unknown")
	floor := got[0].l
	assert.True(t, floor.Less(loc(63, 0)), "the cache keeps its newest objects, floor %v", floor)
	for _, w := range got[1:] {
		assert.Zero(t, w.k, "only objects above the floor, at %v", w.l)
	}
	// A new object below the floor is not taken: it was evicted.
	add(list[0], sized(floor.Group, floor.Object, size))
	assert.Equal(t, []want{unknownTo(floor)}, walkSized(t, list[0].Cursor(loc(0, 0), floor, false)))
}

// A cache holding less than its fair share loses nothing to a cache that
// fills fast: the budget cuts the one holding the most.
func TestBudgetTakesFromTheLargest(t *testing.T) {
	const size = 1 << 10
	b := NewBudget(1 << 20)
	hot := New(Limits{Bytes: 4 << 20, Budget: b}, wire.Opt[wire.Location]{})
	quiet := make([]*Cache, 4)
	for i := range quiet {
		quiet[i] = New(Limits{Bytes: 4 << 20, Budget: b}, wire.Opt[wire.Location]{})
		for id := range uint64(50) { // about 58 KiB each: under a fifth of 1 MiB
			add(quiet[i], sized(0, id, size))
		}
	}
	for g := range uint64(200) {
		for id := range uint64(8) {
			add(hot, sized(g, id, size))
			require.LessOrEqual(t, b.Held(), int64(1<<20))
		}
	}
	for i, c := range quiet {
		n, _ := c.Len()
		assert.Equal(t, 50, n, "quiet cache %d kept everything", i)
		assert.Equal(t, []want{o(0, 0)}, walkSized(t, c.Cursor(loc(0, 0), loc(0, 0), false)))
	}
	_, held := hot.Len()
	assert.Greater(t, held, int64(1<<20)*3/4-4*50*(size+EntryOverhead), "the hot cache has the rest")
	assert.Equal(t, heldBy(append(quiet, hot)), b.Held())
}

// Objects added from many goroutines at once: the total is over the limit
// at most by what is being added at that moment.
func TestBudgetConcurrent(t *testing.T) {
	const (
		writers = 8
		size    = 4 << 10
		limit   = 1 << 20
	)
	b := NewBudget(limit)
	caches := make([]*Cache, writers)
	for i := range caches {
		caches[i] = New(Limits{Objects: 1 << 20, Budget: b}, wire.Opt[wire.Location]{})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	most := int64(0)
	for _, c := range caches {
		wg.Go(func() {
			for id := range uint64(2000) {
				add(c, sized(id/64, id%64, size))
				h := b.Held()
				mu.Lock()
				most = max(most, h)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most, int64(limit+writers*(size+EntryOverhead)), "at most one object in flight per writer")
	assert.LessOrEqual(t, b.Held(), int64(limit))
	assert.Equal(t, heldBy(caches), b.Held())
}

// A cache leaves its budget when closed, and when collected without
// Close: the budget holds no cache alive and keeps no count of one gone.
func TestBudgetLeave(t *testing.T) {
	b := NewBudget(1 << 20)
	c := New(Limits{Objects: 100, Budget: b}, wire.Opt[wire.Location]{})
	add(c, sized(0, 0, 1000), sized(0, 1, 1000))
	assert.Equal(t, int64(2*(1000+EntryOverhead)), b.Held())
	c.Close()
	assert.Zero(t, b.Held(), "closed")
	add(c, sized(0, 2, 1000))
	assert.Zero(t, b.Held(), "a closed cache takes nothing")

	func() {
		d := New(Limits{Objects: 100, Budget: b}, wire.Opt[wire.Location]{})
		add(d, sized(0, 0, 1000))
	}()
	require.Equal(t, int64(1000+EntryOverhead), b.Held())
	for i := 0; i < 100 && b.Held() != 0; i++ {
		runtime.GC() // the cleanup runs after a collection, on its own goroutine
		runtime.Gosched()
	}
	assert.Zero(t, b.Held(), "a collected cache left")
	b.mu.Lock()
	assert.Empty(t, b.members)
	b.mu.Unlock()
}

// A reclaim drops what expired in every cache, those nobody adds to
// included, before it cuts what may still be served.
func TestBudgetDropsExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 1 << 10
		b := NewBudget(64 << 10)
		idle := New(Limits{Objects: 1000, Duration: time.Second, Budget: b}, wire.Opt[wire.Location]{})
		for id := range uint64(20) {
			add(idle, sized(0, id, size))
		}
		time.Sleep(2 * time.Second)
		busy := New(Limits{Objects: 1000, Budget: b}, wire.Opt[wire.Location]{})
		for id := range uint64(40) { // 46 KiB: with the idle cache's 23, past 64
			add(busy, sized(0, id, size))
		}
		n, _ := idle.Len()
		assert.Zero(t, n, "the expired objects went")
		n, _ = busy.Len()
		assert.Equal(t, 40, n, "the busy cache, within the budget alone, lost nothing")
	})
}

// An object larger than what a reclaim leaves is not kept: unknown.
func TestBudgetObjectTooLarge(t *testing.T) {
	b := NewBudget(16 << 10)
	c := New(Limits{Objects: 10, Budget: b}, wire.Opt[wire.Location]{})
	add(c, sized(0, 0, 100), sized(0, 1, 16<<10))
	assert.Equal(t, []want{o(0, 0), unknown(0, 1)}, walkSized(t, c.Cursor(loc(0, 0), loc(0, 1), false)))
	assert.Equal(t, int64(2*EntryOverhead+100), b.Held())
}
