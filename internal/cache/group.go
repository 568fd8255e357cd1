package cache

import (
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// kind is what an entry stands for.
type kind uint8

const (
	kindObject     kind = iota // a complete object, served
	kindPending                // publication began, not complete yet
	kindAbandoned              // begun but never completed: unknown (§2.1)
	kindEndOfGroup             // an END_OF_GROUP status object
	kindEndOfTrack             // an END_OF_TRACK status object
)

// entry is one Location the cache holds. Its fields do not change once
// kind is kindObject, nor do the bytes it names, so a Cursor returns its
// slices without a copy. It holds no pointer: a Cache's entries are
// arrays the collector does not scan.
type entry struct {
	id       uint64
	subgroup uint64
	received int64 // when its publication began (mono.Now), for Limits.Duration
	// data names the properties block (its first nprops bytes) and the
	// payload, in one run of the Cache's slab.
	data     dataRef
	nprops   uint32
	kind     kind
	datagram bool
	priority uint8
	// waited is set when a Cursor first waits on a pending entry: the
	// Cache's waits holds the channel closed when it completes, is
	// abandoned or is evicted (Cache.settle).
	waited bool
}

func (e *entry) size() int64 { return int64(e.data.n) + EntryOverhead }

// settle wakes the Cursors waiting on e, at l.
func (c *Cache) settle(l wire.Location, e *entry) {
	if e.waited {
		close(c.waits[l])
		delete(c.waits, l)
		e.waited = false
	}
}

// wait returns the channel settle closes for e, at l, pending.
func (c *Cache) wait(l wire.Location, e *entry) <-chan struct{} {
	if !e.waited {
		if c.waits == nil {
			c.waits = make(map[wire.Location]chan struct{})
		}
		c.waits[l] = make(chan struct{})
		e.waited = true
	}
	return c.waits[l]
}

// lend returns e's properties block, nil for none, and its payload, for a
// Cursor to return (slab.lend).
func (c *Cache) lend(e *entry) (props, payload []byte) {
	b := c.slab.lend(e.data)
	if e.nprops > 0 {
		props = b[:e.nprops:e.nprops]
	}
	return props, b[e.nprops:]
}

// group is one group's entries, by Object ID.
type group struct {
	id   uint64
	objs []entry
	// added counts the entries ever inserted: the next group starts with
	// room for as many (insert), not with append's doublings.
	added int
	// eog is the smallest Object ID known not to exist with all the
	// larger ones (END_OF_GROUP status, or one past a datagram's
	// END_OF_GROUP flag); valid when hasEOG.
	eog    uint64
	hasEOG bool
	// unk is the smallest Object ID from which the Locations of the group
	// holding no entry are unknown: a subgroup that may carry them was
	// reset (Subgroup.Reset); valid when hasUnk.
	unk    uint64
	hasUnk bool
	gone   bool // it left the Cache: a Subgroup's pointer to it is stale
}

// maxGroupHint bounds the room a new group starts with: 48 KiB of
// entries, whatever the size of the group before.
const maxGroupHint = 1024

// find returns the index of the first entry with an Object ID of at
// least id.
func (g *group) find(id uint64) int {
	if n := len(g.objs); n == 0 || g.objs[n-1].id < id {
		return n // the common case: the next object of the group
	}
	i, _ := slices.BinarySearchFunc(g.objs, id, func(e entry, id uint64) int { return cmpU(e.id, id) })
	return i
}

// noteEOG records that the Object IDs of the group from id on do not
// exist.
func (g *group) noteEOG(id uint64) {
	if !g.hasEOG || id < g.eog {
		g.eog, g.hasEOG = id, true
	}
}

// noteUnknown records that the group's Locations from id on with no entry
// are unknown.
func (g *group) noteUnknown(id uint64) {
	if !g.hasUnk || id < g.unk {
		g.unk, g.hasUnk = id, true
	}
}
