package cache

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/moqt-go/moqt/wire"
)

// DefaultBudget is the limit of a Budget made with a limit of 0.
const DefaultBudget = 256 << 20

// Budget bounds the bytes of several Caches together, as Limits.Bytes
// bounds one (Limits.Budget): a process with many tracks, a relay, keeps
// what their caches hold within one figure however many tracks are open.
// Bytes count as for Limits.Bytes, EntryOverhead included.
//
// A Cache counts its bytes into the Budget as it counts its own, with two
// atomic adds (its member's mirror, the shared total): that is all a Budget
// costs an object while it has room. The Cache whose object passes the
// limit reclaims, once it released its own lock: the Budget brings the
// total down to 15/16 of the limit (so that reclaims come once per
// sixteenth of the limit published, not once per object), taking from the
// Caches holding the most. Each is cut to one common level, the highest at
// which the total fits (max-min fairness): a Cache holding no more than
// its fair share, 15/16 of the limit over the number of Caches, loses
// nothing, so a track that publishes fast, or one a peer made the process
// open, cannot flush the other tracks' recent objects, and a Cache nobody
// adds to any more gives up its old objects as the others need the room. A
// cut takes a Cache's lowest Locations, as its own limits do: its floor
// rises over them, so what went reads as unknown. A reclaim also drops what
// expired in every Cache, which a Cache only does by itself when it is
// added to.
//
// A Cache leaves its Budget when it is closed, or once the garbage
// collector finds it unreachable: the Budget holds no Cache alive.
//
// The total passes the limit only by the objects being added at that
// moment, one per goroutine adding: each then waits for a reclaim. The
// zero value is a Budget of DefaultBudget. A Budget is safe for
// concurrent use.
type Budget struct {
	limit int64        // 0 for DefaultBudget
	used  atomic.Int64 // bytes its Caches hold

	// mu guards members, and is held across a reclaim; under it each
	// Cache's mu is taken in turn. Only a Cache over the limit waits for
	// it.
	mu      sync.Mutex
	members map[*member]struct{}
}

// member is one Cache's place in its Budget. It does not hold the Cache
// alive, so that a Cache dropped without Close still leaves (its cleanup).
type member struct {
	b     *Budget
	c     weak.Pointer[Cache]
	bytes atomic.Int64 // what the Cache counted into b.used
	left  bool         // guarded by b.mu
}

// NewBudget returns a Budget of limit bytes; limit <= 0 means DefaultBudget.
func NewBudget(limit int64) *Budget {
	b := &Budget{}
	b.SetLimit(limit)
	return b
}

// SetLimit sets the limit of a Budget no Cache draws on yet, for one held
// by value; limit <= 0 means DefaultBudget.
func (b *Budget) SetLimit(limit int64) { b.limit = max(limit, 0) }

// Limit is the Budget's limit in bytes.
func (b *Budget) Limit() int64 {
	if b.limit == 0 {
		return DefaultBudget
	}
	return b.limit
}

// Held returns the bytes its Caches hold now.
func (b *Budget) Held() int64 { return b.used.Load() }

// target is what a reclaim brings the total down to.
func (b *Budget) target() int64 {
	l := b.Limit()
	return l - l/16
}

// join makes c draw on b until it is closed or collected.
func (b *Budget) join(c *Cache) *member {
	m := &member{b: b, c: weak.Make(c)}
	b.mu.Lock()
	if b.members == nil {
		b.members = make(map[*member]struct{})
	}
	b.members[m] = struct{}{}
	b.mu.Unlock()
	// m, not c: a cleanup must not hold what it watches.
	runtime.AddCleanup(c, func(m *member) { m.leave() }, m)
	return m
}

// leave takes the Cache's bytes out of the Budget for good. It is
// idempotent.
func (m *member) leave() {
	m.b.mu.Lock()
	m.leaveLocked()
	m.b.mu.Unlock()
}

func (m *member) leaveLocked() {
	if m.left {
		return
	}
	m.left = true
	delete(m.b.members, m)
	m.b.used.Add(-m.bytes.Load())
}

// grow counts n more bytes (or fewer, for n < 0) held by the Cache, whose
// mu the caller holds.
func (m *member) grow(n int64) {
	m.bytes.Add(n)
	m.b.used.Add(n)
}

// reclaim brings the total back under the limit if it is over. Whoever
// finds it over waits for the reclaim under way, if any, and checks again:
// a holder of mu descheduled mid-reclaim must not let the others add
// unchecked. The caller holds no Cache's lock.
func (b *Budget) reclaim() {
	if b.used.Load() <= b.Limit() {
		return
	}
	b.mu.Lock()
	if b.used.Load() > b.Limit() {
		b.reclaimLocked()
	}
	b.mu.Unlock()
}

// reclaimLocked drops what expired, then cuts the Caches holding the most
// to the level at which the total is the target. The caller holds b.mu.
func (b *Budget) reclaimLocked() {
	type held struct {
		c     *Cache
		bytes int64
	}
	list := make([]held, 0, len(b.members))
	var dead int64
	for m := range b.members {
		c := m.c.Value()
		if c == nil {
			// Collected, its cleanup not run yet: its memory is free.
			dead += m.bytes.Load()
			m.leaveLocked()
			continue
		}
		c.mu.Lock()
		c.evict()
		list = append(list, held{c, c.bytes})
		c.mu.Unlock()
	}
	if dead > 0 && b.used.Load() <= b.target() {
		return
	}
	sizes := make([]int64, len(list))
	for i, h := range list {
		sizes[i] = h.bytes
	}
	level := fairLevel(sizes, b.target())
	for _, h := range list {
		if h.bytes > level {
			h.c.mu.Lock()
			h.c.trim(level)
			h.c.mu.Unlock()
		}
	}
}

// fairLevel returns the largest level such that the sizes, each capped at
// it, sum to at most target; math.MaxInt64 when they fit uncapped. It
// sorts sizes.
func fairLevel(sizes []int64, target int64) int64 {
	slices.Sort(sizes)
	rest := max(target, 0)
	for i, s := range sizes {
		k := int64(len(sizes) - i)
		if s > rest/k {
			// This one and every larger one get the same share of what
			// is left.
			return rest / k
		}
		rest -= s
	}
	return math.MaxInt64
}

// trim drops the lowest Locations until the Cache holds at most n bytes;
// the floor rises over them, as eviction's does. The caller holds mu.
func (c *Cache) trim(n int64) {
	for len(c.groups) > 0 && c.bytes > n {
		g := c.groups[0]
		c.raiseFloor(wire.Location{Group: g.id, Object: g.objs[0].id})
	}
}
