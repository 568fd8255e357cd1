// Package cache keeps one track's recent objects for FETCH and fill fetch
// streams (§9.11, §3.4): every field a fetch stream carries (§11.1.1), what
// the status objects say does not exist (§11.1.2), and which Locations it
// cannot speak for (§2.1: evicted, expired, never seen), within fixed
// limits of objects, bytes and age (§10.3).
//
// A Location the cache holds no entry for is in one of three states. It
// does not exist past an End of Group or End of Track. It is unknown when
// it lies at or below the floor (everything evicted, or published before
// the cache existed) or past the largest Location begun. It is pending
// when a subgroup still open may carry it (OpenSubgroup): objects below
// the Largest Object can still come, on a subgroup lagging behind a later
// group, and a Cursor waits for them. Otherwise it depends on where the
// objects come from. The original publisher's cache has seen every object
// begun since it was made, so a Location it was never given was never
// published, unless a reset subgroup may still carry it or it lies in one
// of the few recorded unknown ranges (an upstream Largest Object the
// cache never saw the objects of). A relayed cache (Limits.Relayed) was
// given what reached it, and a gap says nothing of the objects skipped
// (§2.1): such a Location is unknown unless Learn said it does not exist.
// Entries that are not served objects (abandoned objects, expired ones)
// are unknown.
package cache

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// EntryOverhead is what one entry costs beyond its payload and properties,
// counted against Limits.Bytes: the entry itself, its share of its
// group's slices and of the group header. BenchmarkMemoryPerByte measures
// the real figure.
const EntryOverhead = 160

// MaxUnknownRanges caps the unknown ranges recorded above the floor (see
// Unknown). Past it the floor rises over the lowest range, evicting what
// lies below it, so the record stays small whatever the calls.
const MaxUnknownRanges = 16

// MaxKnownRanges caps the ranges a relayed Cache learnt do not exist
// (Learn). Past it the lowest is forgotten: unknown again, so asked for
// again, which is safe.
const MaxKnownRanges = 64

// MaxInsertShift bounds the entries, or groups, that recording one object
// moves in a relayed Cache. An object whose place lies further back than
// that from the end of its group (or a new group that far back among the
// groups) is not recorded: unknown, as anything a relayed cache was not
// given, so a fetch asks upstream for it. A peer sending objects in
// descending order would otherwise make each insert move everything
// recorded before it: quadratic work for linear input.
const MaxInsertShift = 1024

// Limits bound a Cache. Objects and Bytes of 0 mean no limit of that
// kind; a Cache needs at least one of them, so its memory is bounded.
// Duration 0 keeps objects until the other limits evict them. Budget, if
// set, bounds the Cache's bytes together with the other Caches drawing on
// it.
type Limits struct {
	Objects  int
	Bytes    int64
	Duration time.Duration
	Budget   *Budget
	// Relayed marks a cache of objects received from elsewhere (a
	// relay's track): a Location it was not given is unknown, not absent,
	// unless it learnt otherwise (§2.1).
	Relayed bool
}

// Object is an object given to or served by the Cache, or, in a Cursor's
// output, an End of Range marker (EndOfRange set, only Location used).
type Object struct {
	Location   wire.Location
	SubgroupID uint64
	Priority   uint8
	Datagram   bool
	// EndOfGroup is the datagram END_OF_GROUP flag: no larger Object ID
	// exists in the group (§11.2.1).
	EndOfGroup bool
	// Status is Normal, or ObjectEndOfGroup / ObjectEndOfTrack: recorded
	// as knowledge, never served (§11.1.2).
	Status     wire.ObjectStatus
	Properties []byte
	Payload    []byte
	EndOfRange wire.EndOfRange
}

// span is a Location range, both ends included.
type span struct{ from, to wire.Location }

// Cache is one track's cache. It is safe for concurrent use; it starts no
// goroutine and does no I/O.
type Cache struct {
	limits Limits

	// mu guards everything below. Callers may hold their track's lock
	// when they call in; the Cache calls out to nothing.
	mu     sync.Mutex
	groups []*group // by Group ID
	count  int      // entries
	bytes  int64    // their sizes
	// floor: every Location at or below it is unknown; valid when
	// hasFloor.
	floor    wire.Location
	hasFloor bool
	// top is the largest Location begun or reported (Unknown); valid
	// when hasTop. Locations past it are not produced yet: unknown.
	top    wire.Location
	hasTop bool
	// unknown are ranges above the floor the cache cannot speak for, at
	// most MaxUnknownRanges, by start.
	unknown []span
	// eot is the End of Track Location, valid when hasEOT: it and every
	// larger Location do not exist.
	eot    wire.Location
	hasEOT bool
	// open are the subgroups being published, by group (subgroup.go):
	// what they may still carry is pending.
	open []*Subgroup
	// wake, made when a Cursor waits on an open subgroup, is closed when
	// what it waits for may have changed (notify).
	wake chan struct{}
	// absent are the ranges a relayed cache learnt do not exist but for
	// their entries (Learn), at most MaxKnownRanges, by start, disjoint.
	absent []span
	closed bool
	// m is the Cache's place in Limits.Budget, nil for none or once
	// closed.
	m *member
	// While netting, grow owes m what it counts (owed), paid at the end
	// of the step (payGrowth): an object added and the one evicted for it
	// mostly cancel out, sparing the Budget's atomics.
	netting bool
	owed    int64
	// slab holds the entries' payloads and properties (slab.go).
	slab slab
	// goneAdded is the added count of the group that left last: room
	// for a new group (insert).
	goneAdded int
	// waits are the channels of the pending entries a Cursor waits on
	// (entry.waited), by Location.
	waits map[wire.Location]chan struct{}
}

// New returns an empty Cache. If neverSeen is set, the objects up to it
// were published before the cache existed: they are unknown.
func New(l Limits, neverSeen wire.Opt[wire.Location]) *Cache {
	c := &Cache{limits: l}
	if neverSeen.Set {
		c.floor, c.hasFloor = neverSeen.Value, true
		c.top, c.hasTop = neverSeen.Value, true
	}
	if l.Budget != nil {
		c.m = l.Budget.join(c)
	}
	return c
}

// grow counts n bytes more held (fewer for n < 0), in the Cache and its
// Budget; the caller holds mu.
func (c *Cache) grow(n int64) {
	c.bytes += n
	switch {
	case c.m == nil:
	case c.netting:
		c.owed += n
	default:
		c.m.grow(n)
	}
}

// payGrowth ends a step begun by setting netting: the Budget learns the
// net change. The caller holds mu throughout the step.
func (c *Cache) payGrowth() {
	c.netting = false
	if c.owed != 0 && c.m != nil {
		c.m.grow(c.owed)
	}
	c.owed = 0
}

// reclaim lets the Budget take back what passes it; the caller holds no
// lock of the Cache's (see Budget).
func (c *Cache) reclaim() {
	if b := c.limits.Budget; b != nil {
		b.reclaim()
	}
}

// Fits reports whether an object with a payload of n bytes may be held at
// all, so that a writer gathering a payload as it is streamed knows when
// not to.
func (c *Cache) Fits(n uint64) bool {
	return n <= math.MaxInt64-EntryOverhead && c.fits(int64(n)+EntryOverhead)
}

// fits reports whether an object of n bytes, EntryOverhead included, may
// be held at all: one the limits would evict at once is not.
func (c *Cache) fits(n int64) bool {
	return (c.limits.Bytes == 0 || n <= c.limits.Bytes) && (c.limits.Budget == nil || n <= c.limits.Budget.target())
}

// below reports whether l is at or below the floor.
func (c *Cache) below(l wire.Location) bool { return c.hasFloor && !c.floor.Less(l) }

// group returns the group with ID id, and where it is or would go.
func (c *Cache) group(id uint64) (*group, int) {
	// Objects mostly come in order: the newest group, or a new one.
	if n := len(c.groups); n == 0 || c.groups[n-1].id < id {
		return nil, n
	} else if c.groups[n-1].id == id {
		return c.groups[n-1], n - 1
	}
	i, ok := slices.BinarySearchFunc(c.groups, id, func(g *group, id uint64) int { return cmpU(g.id, id) })
	if ok {
		return c.groups[i], i
	}
	return nil, i
}

// lookup returns the entry at l, its group, and the entry's index or
// where it would go. hint, if not nil, may be l's group (Subgroup.g): a
// relay writes several groups at once, each a search away from the newest.
func (c *Cache) lookup(l wire.Location, hint *group) (*entry, *group, int) {
	g := hint
	if g == nil || g.gone || g.id != l.Group {
		g, _ = c.group(l.Group)
	}
	if g == nil {
		return nil, nil, 0
	}
	i := g.find(l.Object)
	if i < len(g.objs) && g.objs[i].id == l.Object {
		return &g.objs[i], g, i
	}
	return nil, g, i
}

// insert adds e at l, which holds no entry and lies above the floor, in
// g, l's group as lookup found it (nil: none yet), and returns the group.
// It moves the group's entries: a pointer lookup returned is stale.
func (c *Cache) insert(l wire.Location, e entry, g *group) *group {
	if g == nil {
		_, gi := c.group(l.Group)
		g = &group{id: l.Group}
		if n := len(c.groups); gi == n {
			// Groups are mostly of one size: room for the newest one's
			// or the last one gone's, whichever is more (subgroups of
			// several groups at once: the newest may have just begun).
			hint := c.goneAdded
			if n > 0 {
				hint = max(hint, c.groups[n-1].added)
			}
			if hint > 0 {
				g.objs = make([]entry, 0, min(hint, maxGroupHint))
			}
		}
		c.groups = slices.Insert(c.groups, gi, g)
	}
	g.added++
	if i := g.find(l.Object); i == len(g.objs) {
		g.objs = append(g.objs, e)
	} else {
		g.objs = slices.Insert(g.objs, i, e)
	}
	c.count++
	c.grow(e.size())
	c.raiseTop(l)
	c.notify()
	return g
}

// farBack reports whether a relayed Cache leaves l unrecorded (see
// MaxInsertShift): l holds no entry, and its place, i in g as lookup found
// it (nil: a new group), lies too far back. The caller holds mu.
func (c *Cache) farBack(l wire.Location, g *group, i int) bool {
	if !c.limits.Relayed {
		return false
	}
	if g != nil {
		return len(g.objs)-i > MaxInsertShift
	}
	_, gi := c.group(l.Group)
	return len(c.groups)-gi > MaxInsertShift
}

func (c *Cache) raiseTop(l wire.Location) {
	if !c.hasTop || c.top.Less(l) {
		c.top, c.hasTop = l, true
	}
}

// Begin records that the object at l started being published: a Cursor
// reaching it waits until Add completes it or Abandon gives it up. A
// Location already held, or unknown below the floor, is left as it is.
func (c *Cache) Begin(l wire.Location) {
	c.mu.Lock()
	held := c.begin(l)
	c.mu.Unlock()
	if held {
		c.reclaim()
	}
}

// begin is Begin under mu; it reports whether an entry was made.
func (c *Cache) begin(l wire.Location) bool {
	if c.closed || c.below(l) {
		return false
	}
	e, g, i := c.lookup(l, nil)
	if e != nil || c.farBack(l, g, i) {
		return false
	}
	now := c.now()
	c.netting = true
	c.insert(l, entry{id: l.Object, kind: kindPending, received: now}, g)
	c.evictAt(now)
	c.payGrowth()
	return true
}

// Add stores a complete object, copying its slices, or the knowledge a
// status object carries. It completes the pending entry Begin made, and
// counts its age from then (§10.3: from the beginning of the object).
// An object the limits cannot hold at all is recorded as unknown.
func (c *Cache) Add(o Object) {
	c.mu.Lock()
	if c.closed || c.below(o.Location) {
		c.mu.Unlock()
		return
	}
	c.add(o)
	c.mu.Unlock()
	c.reclaim()
}

// add is Add for a Location above the floor; the caller holds mu.
func (c *Cache) add(o Object) { c.addAt(o, c.now(), nil) }

// addAt is add with the clock read at now and lookup's hint; it returns
// o's group.
func (c *Cache) addAt(o Object, now int64, hint *group) *group {
	l := o.Location
	received := now
	e, g, i := c.lookup(l, hint)
	if e == nil && c.farBack(l, g, i) {
		return g
	}
	if e != nil {
		switch e.kind {
		case kindPending:
			received = e.received
		case kindAbandoned: // known after all
		default:
			return g // an object does not change (§2.1)
		}
	}
	c.netting = true
	n := entry{id: l.Object, priority: o.Priority, subgroup: o.SubgroupID, datagram: o.Datagram, received: received}
	switch o.Status {
	case wire.ObjectEndOfGroup:
		n.kind = kindEndOfGroup
	case wire.ObjectEndOfTrack:
		n.kind = kindEndOfTrack
		if !c.hasEOT || l.Less(c.eot) {
			c.eot, c.hasEOT = l, true
		}
	default:
		size := uint64(len(o.Properties)) + uint64(len(o.Payload))
		if size > math.MaxUint32 || !c.fits(int64(size)+EntryOverhead) {
			n.kind = kindAbandoned
			break
		}
		var data []byte
		data, n.data = c.slab.alloc(int(size), c.bytes)
		copy(data, o.Properties)
		copy(data[len(o.Properties):], o.Payload)
		n.nprops = uint32(len(o.Properties))
	}
	if e != nil {
		// In place of the pending entry, which names no bytes: a Cursor
		// waiting on it looks again. No Cursor holds an entry across its
		// calls.
		old, waited := e.size(), e.waited
		c.slab.release(e.data)
		*e = n
		c.grow(e.size() - old)
		e.waited = waited
		c.settle(l, e)
	} else {
		g = c.insert(l, n, g)
	}
	switch {
	case n.kind == kindEndOfGroup:
		g.noteEOG(l.Object)
	case o.EndOfGroup && l.Object < ^uint64(0):
		g.noteEOG(l.Object + 1)
	}
	c.evictAt(now)
	c.payGrowth()
	return g
}

// Abandon gives up the object begun at l: it was closed short or reset,
// so its state stays unknown. Anything else at l is left as it is.
func (c *Cache) Abandon(l wire.Location) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, _, _ := c.lookup(l, nil); e != nil && e.kind == kindPending {
		e.kind = kindAbandoned
		c.settle(l, e)
	}
}

// Unknown records l as a Largest Object learnt from elsewhere (an
// upstream's, §9.7): the Locations past the largest the cache saw, up to
// l, were published without it, so they are unknown.
func (c *Cache) Unknown(l wire.Location) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || (c.hasTop && !c.top.Less(l)) {
		return
	}
	if c.count == 0 || !c.hasTop {
		c.raiseFloor(l)
		c.raiseTop(l)
		return
	}
	if !c.limits.Relayed { // a relayed cache takes what it was not given for unknown
		c.addUnknown(span{from: next(c.top), to: l})
	}
	c.raiseTop(l)
}

// addUnknown records s, above the floor, as unknown. The caller holds mu.
func (c *Cache) addUnknown(s span) {
	i, _ := slices.BinarySearchFunc(c.unknown, s.from, func(u span, l wire.Location) int { return u.from.Compare(l) })
	c.unknown = slices.Insert(c.unknown, i, s)
	if len(c.unknown) > MaxUnknownRanges {
		c.raiseFloor(c.unknown[0].to)
	}
}

// Close abandons every pending object, and what open subgroups may still
// carry (unknown), and makes the Cache take nothing more; its Cursors go
// on over what it holds. A track closes the cache it replaces, so nobody
// waits for objects it will never be told of.
//
// A closed Cache leaves its Budget: what it holds is no longer counted,
// since it goes once the Cursors over it are done.
func (c *Cache) Close() {
	c.mu.Lock()
	// What the open subgroups may still carry goes to the Cache replacing
	// this one: unknown here, as if they were reset.
	for _, s := range c.open {
		s.open = false
		c.subgroupEnded(s, false, false)
	}
	c.open = nil
	c.closed = true
	c.notify()
	for _, g := range c.groups {
		for i := range g.objs {
			if e := &g.objs[i]; e.kind == kindPending {
				e.kind = kindAbandoned
				c.settle(wire.Location{Group: g.id, Object: e.id}, e)
			}
		}
	}
	m := c.m
	c.m = nil
	c.mu.Unlock()
	if m != nil {
		m.leave()
	}
}

// Len returns the number of entries held and their size in bytes (with
// EntryOverhead each).
func (c *Cache) Len() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count, c.bytes
}

// remove drops entry i of g, and g once empty.
func (c *Cache) remove(g *group, i int) {
	e := &g.objs[i]
	c.count--
	c.grow(-e.size())
	c.slab.release(e.data)
	if i == 0 {
		// Eviction takes the front: a reslice, not a shift. The backing
		// array's dropped head, which holds no pointer, goes when append
		// reallocates.
		g.objs = g.objs[1:]
	} else {
		g.objs = slices.Delete(g.objs, i, i+1)
	}
	if len(g.objs) == 0 {
		g.gone = true
		c.goneAdded = g.added
		if _, gi := c.group(g.id); gi == 0 {
			c.groups[0] = nil
			c.groups = c.groups[1:]
		} else {
			c.groups = slices.Delete(c.groups, gi, gi+1)
		}
	}
}

// now reads the clock (mono.Now) for an age limit; without one nothing
// reads the times it returns, and the clock is left alone.
func (c *Cache) now() int64 {
	if c.limits.Duration > 0 {
		return mono.Now()
	}
	return 0
}

// expired reports whether e may no longer be served at now (§10.3).
func (c *Cache) expired(e *entry, now int64) bool {
	return c.limits.Duration > 0 && now-e.received >= int64(c.limits.Duration)
}

// evict drops the lowest Locations while the limits are passed or the
// lowest has expired; the floor rises over them, so they read as unknown.
func (c *Cache) evict() { c.evictAt(c.now()) }

// evictAt is evict with the clock read at now.
func (c *Cache) evictAt(now int64) {
	for len(c.groups) > 0 {
		g := c.groups[0]
		e := &g.objs[0]
		over := (c.limits.Objects > 0 && c.count > c.limits.Objects) || (c.limits.Bytes > 0 && c.bytes > c.limits.Bytes)
		if !over && !c.expired(e, now) {
			return
		}
		c.raiseFloor(wire.Location{Group: g.id, Object: e.id})
	}
}

// raiseFloor makes every Location up to l unknown, dropping the entries
// there (waking the Cursors waiting on pending ones) and the unknown
// ranges it covers.
func (c *Cache) raiseFloor(l wire.Location) {
	if c.below(l) {
		return
	}
	c.floor, c.hasFloor = l, true
	for len(c.groups) > 0 && c.groups[0].id <= l.Group {
		g := c.groups[0]
		e := &g.objs[0]
		if g.id == l.Group && e.id > l.Object {
			break
		}
		c.settle(wire.Location{Group: g.id, Object: e.id}, e)
		c.remove(g, 0)
	}
	// Mostly there are none: eviction comes here at every object.
	if len(c.unknown) > 0 {
		c.unknown = slices.DeleteFunc(c.unknown, func(s span) bool { return !l.Less(s.to) })
	}
	if len(c.absent) > 0 {
		c.absent = slices.DeleteFunc(c.absent, func(s span) bool { return !l.Less(s.to) })
	}
	// A subgroup of a lower group can carry nothing above the floor.
	for len(c.open) > 0 && c.open[0].group < l.Group {
		c.open[0].open = false
		c.open = slices.Delete(c.open, 0, 1)
	}
	c.notify()
}

// next is the Location after l in Location order.
func next(l wire.Location) wire.Location {
	if l.Object == ^uint64(0) {
		return wire.Location{Group: l.Group + 1}
	}
	return wire.Location{Group: l.Group, Object: l.Object + 1}
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
