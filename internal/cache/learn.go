package cache

import (
	"bytes"
	"errors"
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// ErrConflict reports an object learnt from elsewhere that differs from
// the one the Cache holds at its Location in forwarding preference,
// Subgroup ID, priority or payload: the track is Malformed (§7.1).
var ErrConflict = errors.New("cache: a duplicate object differs from the cached one")

// Learn records what an upstream fetch answered, in ascending order, for
// the Locations from from to o.Location, both included (§9.11): the
// Locations before o.Location do not exist, and o is the object at its
// Location, kept as Add keeps it. An End of Non-Existent Range marker o
// says that none of them exists; an unknown or timed-out one teaches
// nothing. So a range the Cache could not speak for (below its floor, in
// an unknown range, or, relayed, not received) becomes known, and what it
// learns is evicted in turn, lowest first, within the same limits.
//
// What the Cache knew already stays: a held object is kept, and Learn
// returns ErrConflict when o differs from it in forwarding preference,
// Subgroup ID, priority or payload (the track is Malformed, §7.1); a
// pending or status entry at o's Location is left as it is. Locations
// past the largest begun are left unknown: nothing proves what lies
// between them and it.
func (c *Cache) Learn(from wire.Location, o Object) error {
	c.mu.Lock()
	err := c.learn(from, o)
	c.mu.Unlock()
	c.reclaim()
	return err
}

// learn is Learn under mu.
func (c *Cache) learn(from wire.Location, o Object) error {
	to := o.Location
	if c.closed || !c.hasTop || c.top.Less(to) || to.Less(from) {
		return nil
	}
	switch o.EndOfRange {
	case 0:
	case wire.EndOfNonExistentRange:
		c.known(from, to)
		return nil
	default:
		return nil
	}
	e, _, _ := c.lookup(to, nil)
	if e != nil {
		switch e.kind {
		case kindObject:
			payload := c.slab.bytes(e.data)[e.nprops:]
			if e.datagram != o.Datagram || (!o.Datagram && e.subgroup != o.SubgroupID) ||
				e.priority != o.Priority || !bytes.Equal(payload, o.Payload) {
				return ErrConflict
			}
			c.known(from, to)
			return nil
		case kindAbandoned:
		default:
			// What lies before it is learnt all the same.
			if from.Less(to) {
				c.known(from, prev(to))
			}
			return nil
		}
	}
	c.known(from, to)
	c.add(o)
	return nil
}

// known makes the Locations from from to to, which lie at or below the
// top, no longer unknown: the floor goes below from, the unknown ranges
// lose what they had of them, and a relayed cache records the range as
// absent but for its entries. The caller holds mu.
func (c *Cache) known(from, to wire.Location) {
	if c.hasFloor && !c.floor.Less(from) {
		old := c.floor
		if from == (wire.Location{}) {
			c.floor, c.hasFloor = wire.Location{}, false
		} else {
			c.floor = prev(from)
		}
		if to.Less(old) && !c.limits.Relayed {
			// The rest of what lay below the old floor stays unknown:
			// the lowest range, as the floor was below every other.
			// (A relayed cache takes it for unknown anyway.)
			c.unknown = slices.Insert(c.unknown, 0, span{from: next(to), to: old})
		}
	}
	if c.limits.Relayed {
		c.addAbsent(span{from: from, to: to})
	}
	c.notify()
	out := c.unknown[:0:0]
	for _, s := range c.unknown {
		if s.to.Less(from) || to.Less(s.from) {
			out = append(out, s)
			continue
		}
		if s.from.Less(from) {
			out = append(out, span{from: s.from, to: prev(from)})
		}
		if to.Less(s.to) {
			out = append(out, span{from: next(to), to: s.to})
		}
	}
	c.unknown = out
	for len(c.unknown) > MaxUnknownRanges {
		c.raiseFloor(c.unknown[0].to)
	}
}

// prev is the Location before l, which is not {0, 0}, in Location order.
func prev(l wire.Location) wire.Location {
	if l.Object == 0 {
		return wire.Location{Group: l.Group - 1, Object: ^uint64(0)}
	}
	return wire.Location{Group: l.Group, Object: l.Object - 1}
}

// addAbsent records that the Locations of s holding no entry do not exist,
// in a relayed cache. Ranges that overlap or touch merge, as do ranges
// only held entries lie between (the objects of a group between the gaps
// learnt at its two ends), so that learning a stretch of the track leaves
// one range. Past MaxKnownRanges the lowest is forgotten. The caller
// holds mu.
func (c *Cache) addAbsent(s span) {
	i, _ := slices.BinarySearchFunc(c.absent, s.from, func(a span, l wire.Location) int { return a.from.Compare(l) })
	c.absent = slices.Insert(c.absent, i, s)
	// The others join none of theirs: only the new range's neighbours
	// can join it.
	for i+1 < len(c.absent) && c.joins(c.absent[i], c.absent[i+1]) {
		c.absent[i].to = maxLocation(c.absent[i].to, c.absent[i+1].to)
		c.absent = slices.Delete(c.absent, i+1, i+2)
	}
	if i > 0 && c.joins(c.absent[i-1], c.absent[i]) {
		c.absent[i-1].to = maxLocation(c.absent[i-1].to, c.absent[i].to)
		c.absent = slices.Delete(c.absent, i, i+1)
	}
	if n := len(c.absent) - MaxKnownRanges; n > 0 {
		c.absent = slices.Delete(c.absent, 0, n)
	}
}

func maxLocation(a, b wire.Location) wire.Location {
	if a.Less(b) {
		return b
	}
	return a
}

// joins reports whether absent ranges a and b, a starting first, make one:
// they overlap or touch, or every Location between them holds an entry.
func (c *Cache) joins(a, b span) bool {
	if !a.to.Less(b.from) || a.to == (wire.Location{Group: maxID, Object: maxID}) {
		return true
	}
	from, to := next(a.to), b.from
	if from == to {
		return true
	}
	to = prev(to)
	if from.Group != to.Group {
		return false // a whole group's end between them: never all held
	}
	g, _ := c.group(from.Group)
	if g == nil {
		return false
	}
	i := g.find(from.Object)
	n := to.Object - from.Object
	if n >= uint64(len(g.objs)-i) {
		return false
	}
	j := i + int(n)
	// Object IDs are distinct and in order: the entries from i to j are
	// those from from to to exactly when the ends match.
	return g.objs[i].id == from.Object && g.objs[j].id == to.Object
}
