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
// nothing. So a range the Cache could not speak for (below its floor or
// in an unknown range) becomes known, and what it learns is evicted in
// turn, lowest first, within the same limits.
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
	e, _, _ := c.lookup(to)
	if e != nil {
		switch e.kind {
		case kindObject:
			if e.datagram != o.Datagram || (!o.Datagram && e.subgroup != o.SubgroupID) ||
				e.priority != o.Priority || !bytes.Equal(e.payload, o.Payload) {
				return ErrConflict
			}
			c.known(from, to)
			return nil
		case kindAbandoned:
		default:
			return nil
		}
	}
	c.known(from, to)
	c.add(o)
	return nil
}

// known makes the Locations from from to to, which lie at or below the
// top, no longer unknown: the floor goes below from, and the unknown
// ranges lose what they had of them. The caller holds mu.
func (c *Cache) known(from, to wire.Location) {
	if c.hasFloor && !c.floor.Less(from) {
		old := c.floor
		if from == (wire.Location{}) {
			c.floor, c.hasFloor = wire.Location{}, false
		} else {
			c.floor = prev(from)
		}
		if to.Less(old) {
			// The rest of what lay below the old floor stays unknown:
			// the lowest range, as the floor was below every other.
			c.unknown = slices.Insert(c.unknown, 0, span{from: next(to), to: old})
		}
	}
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
