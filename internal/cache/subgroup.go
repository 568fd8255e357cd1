package cache

import (
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// MaxOpenSubgroups caps the subgroups a Cache follows at once. Past it the
// one of the lowest group is given up as if reset, so that subgroups
// opened and never ended cannot grow the record without bound.
const MaxOpenSubgroups = 1024

// Subgroup is a subgroup being published into a Cache (OpenSubgroup).
// While it is open, the Locations of its group from its next Object ID on
// are pending: objects are written to a subgroup in increasing Object ID
// order, so any of them may still come on it, though a later group has
// begun (§2.2). A Cursor reaching one waits until an object is begun
// there or the subgroup moves past it or ends. Its fields are guarded by
// its Cache's mu.
type Subgroup struct {
	c       *Cache
	group   uint64
	next    uint64 // the smallest Object ID it may still carry
	started bool   // an object was begun on it
	open    bool   // in c.open
	// g is the group of the last object Put, if the Cache held it then:
	// the next one's, unless it left since (group.gone).
	g *group
}

// OpenSubgroup starts following a subgroup of group whose first object
// has an Object ID of at least first. A closed Cache, or one whose floor
// is past the group, returns a Subgroup that records nothing.
func (c *Cache) OpenSubgroup(group, first uint64) *Subgroup {
	s := &Subgroup{c: c, group: group, next: first}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || (c.hasFloor && group < c.floor.Group) {
		return s
	}
	i, _ := slices.BinarySearchFunc(c.open, group, func(o *Subgroup, g uint64) int { return cmpU(o.group, g) })
	// After those of the same group: the list is by group only.
	for i < len(c.open) && c.open[i].group == group {
		i++
	}
	c.open = slices.Insert(c.open, i, s)
	s.open = true
	if len(c.open) > MaxOpenSubgroups {
		c.endSubgroup(c.open[0], false, false)
	}
	c.notify()
	return s
}

// Of reports whether s follows a subgroup in c.
func (s *Subgroup) Of(c *Cache) bool { return s.c == c }

// Begin records that the subgroup's object id started being published, as
// Cache.Begin does: the Locations of the group before it are no longer
// pending on this subgroup.
func (s *Subgroup) Begin(id uint64) {
	c := s.c
	c.mu.Lock()
	s.begun(id)
	held := c.begin(wire.Location{Group: s.group, Object: id})
	c.mu.Unlock()
	if held {
		c.reclaim()
	}
}

// Put records that the subgroup's object o, complete, started being
// published at now (mono.Now's clock): Begin and Cache.Add in one step,
// one lookup and one eviction pass, for an object published whole.
func (s *Subgroup) Put(o Object, now int64) {
	c := s.c
	c.mu.Lock()
	s.begun(o.Location.Object)
	held := !c.closed && !c.below(o.Location)
	if held {
		s.g = c.addAt(o, now, s.g)
	}
	c.mu.Unlock()
	if held {
		c.reclaim()
	}
}

// begun moves the subgroup past object id, begun on it; the caller holds
// c.mu.
func (s *Subgroup) begun(id uint64) {
	if !s.open {
		return
	}
	s.started = true
	if id == maxID {
		s.c.endSubgroup(s, true, false) // nothing can follow it
	} else if id >= s.next {
		s.next = id + 1
		s.c.notify()
	}
}

// Finish ends the subgroup with its last object: it carries nothing more
// (a FIN, §11.3.2). With endOfGroup, the subgroup was the one holding the
// group's largest object (END_OF_GROUP in its header, §11.3.1): nothing of
// the group past its last object exists.
func (s *Subgroup) Finish(endOfGroup bool) {
	s.c.mu.Lock()
	s.c.endSubgroup(s, true, endOfGroup)
	s.c.mu.Unlock()
}

// Reset ends the subgroup short: its objects after the last one begun may
// still be published on another stream (§11.3.2), so the Locations of the
// group from there on that hold no entry are unknown, not absent.
func (s *Subgroup) Reset() {
	s.c.mu.Lock()
	s.c.endSubgroup(s, false, false)
	s.c.mu.Unlock()
}

// endSubgroup takes s out of the open subgroups: finished (fin), with the
// group's end after its last object (eog), or reset. The caller holds mu.
func (c *Cache) endSubgroup(s *Subgroup, fin, eog bool) {
	s.g = nil // nothing more is Put: the group may go
	if !s.open {
		return
	}
	s.open = false
	if i := slices.Index(c.open, s); i >= 0 {
		c.open = slices.Delete(c.open, i, i+1)
	}
	c.subgroupEnded(s, fin, eog)
	c.notify()
}

// subgroupEnded records what the end of s, out of the open subgroups now,
// says of its group. The caller holds mu.
func (c *Cache) subgroupEnded(s *Subgroup, fin, eog bool) {
	l := wire.Location{Group: s.group, Object: s.next}
	if c.closed || c.below(l) {
		return
	}
	g, _ := c.group(s.group)
	switch {
	case fin && eog && s.started:
		if g != nil {
			g.noteEOG(s.next)
		}
	case fin:
	case c.limits.Relayed:
		// What a relayed cache was not given is unknown anyway.
	case g != nil:
		g.noteUnknown(s.next)
	case c.hasTop && l.Less(c.top):
		// A group the Cache holds nothing of: a range (rare: a subgroup
		// reset before its first object while later ones were begun).
		c.addUnknown(span{from: l, to: wire.Location{Group: s.group, Object: maxID}})
	}
}

// openFrom returns the smallest Object ID an open subgroup of group g may
// still carry, if g has one: the group's Locations from there on are
// pending. The caller holds mu.
func (c *Cache) openFrom(g uint64) (uint64, bool) {
	i, _ := slices.BinarySearchFunc(c.open, g, func(s *Subgroup, g uint64) int { return cmpU(s.group, g) })
	from, found := maxID, false
	for ; i < len(c.open) && c.open[i].group == g; i++ {
		from, found = min(from, c.open[i].next), true
	}
	return from, found
}

// hasOpen reports whether group g has an open subgroup. The caller holds
// mu.
func (c *Cache) hasOpen(g uint64) bool {
	_, found := c.openFrom(g)
	return found
}

// notify wakes the Cursors waiting on an open subgroup: what they wait
// for may have come. The caller holds mu.
func (c *Cache) notify() {
	if c.wake != nil {
		close(c.wake)
		c.wake = nil
	}
}

// waitOpen returns the channel notify closes. The caller holds mu.
func (c *Cache) waitOpen() <-chan struct{} {
	if c.wake == nil {
		c.wake = make(chan struct{})
	}
	return c.wake
}
