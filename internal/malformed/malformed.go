// Package malformed detects a Malformed Track on the subscriber (§12.1,
// C022, C023). A subscription checks the objects it receives against what
// it has already seen of the track with a Track, one Stream per subgroup
// stream, and cancels itself at the first contradiction, an *Error. The
// conditions checked, numbered as in §12.1:
//
//  1. An object whose Publisher Priority differs from that of the previous
//     object of its subgroup. Every object on a subgroup stream has the
//     stream's priority (§11.3.1), so this compares the streams that carry
//     one subgroup, once per stream.
//  2. An object whose Object ID is larger than the final object of its
//     subgroup: the last object before a FIN on a stream of that subgroup.
//  3. A subgroup received over several streams ended by FIN with different
//     final objects.
//  4. An object whose Object ID is larger than the final object of its
//     group: an END_OF_GROUP status object, the last object before a FIN on
//     a subgroup whose header has END_OF_GROUP set, or a datagram with the
//     END_OF_GROUP flag, which says the same thing (§11.2.1). Datagrams are
//     checked like stream objects.
//  5. An object whose Location is larger than the track's final object: an
//     END_OF_TRACK status object.
//  7. An object received with a different Forwarding Preference than
//     before. The Forwarding Preference belongs to each Object and may vary
//     within a Track (§11.1.1), and the Original Publisher may mix
//     Subgroups and Datagrams within a Group (§11), so this is read per
//     Object: one Location received both as an OBJECT_DATAGRAM and on a
//     subgroup stream.
//
// And, from §3.6 and §10.7, an object whose Object Properties hold a
// Mandatory Track Property (C005), or an IMMUTABLE_PROPERTIES that nests
// another, cannot be parsed or comes twice. (An unparseable outer block is
// a PROTOCOL_VIOLATION the codec reports, §11.1.3.) From §10.8 and §10.9,
// the Prior Group ID Gap and Prior Object ID Gap rules: each property once
// per object and no larger than its ID (properties.go), and against the
// rest of the track, on the subscription's streams, datagrams and fill
// streams (Track), or along one fetch stream (Fetch) (gaps.go). Sent
// applies the same rules to what a publisher sends.
//
// Condition 6, the same object received twice with a different payload or
// immutable properties, is not checked: it needs every payload kept or
// hashed, which the library does not do; an application that caches
// objects is the one to compare them.
//
// Each check compares a received object with what arrived before it, in
// either order: an END_OF_GROUP that arrives after a larger object of its
// group is caught as surely as a larger object arriving after it. A
// contradiction is reported by the object that completes it, which the
// caller is not to deliver (C023).
//
// A FIN marks the end of a subgroup only when the publisher had no reason
// to stop early: a subscription whose Location filter ends inside a group,
// or that has range filters, receives subgroups cut short by its filter and
// ended by FIN (§3.3, §11.3.2); and when subscriptions share an alias
// (§3.1.2) a copy meant for one can reach another. The caller knows when
// either applies and says so to Stream.Fin, which then does not read the
// FIN as a final object (conditions 2, 3 and the FIN form of 4); the other
// checks go on.
//
// Memory is bounded: a Track (or Sent) remembers at most checkedGroups
// groups, in each at most checkedSubgroups subgroups, the Object IDs of
// the last checkedDatagrams datagrams, the group's Prior Group ID Gap, the
// ranges of its last checkedGapRanges Prior Object ID Gaps and the first
// and last Object IDs its fill streams brought, forgetting the oldest
// first; about 45 KB at most. A Fetch is a few fields. Forgetting only
// loses evidence: what is forgotten cannot contradict a later object, so
// the checks never report a well-formed track.
//
// The per-object path is field comparisons and atomic operations on state
// found once per stream, but for an object that carries a Prior ID Gap or
// falls in a group that had a Prior Object ID Gap, which takes the Track's
// lock; it allocates nothing. It imports only the wire
// codec and the standard library.
package malformed

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/wire"
)

// Error reports a Malformed Track: Reason says which rule the track broke,
// naming the objects.
type Error struct{ Reason string }

func (e *Error) Error() string { return "malformed track: " + e.Reason }

// Bounds of what one subscription remembers of its track.
const (
	checkedGroups    = 32 // groups, the oldest forgotten first
	checkedSubgroups = 16 // subgroups per group, the oldest forgotten first
	checkedDatagrams = 16 // Object IDs of the latest datagrams per group
	checkedGapRanges = 8  // ranges of the latest Prior Object ID Gaps per group
)

// Track is what a subscription has seen of its track. The zero value is
// ready; it is safe for concurrent use by the subscription's streams and
// its datagram path.
type Track struct {
	// endOfTrack is the track's final object (condition 5): the first
	// END_OF_TRACK received. Nil until then.
	endOfTrack atomic.Pointer[wire.Location]
	// groupsSeen is the largest Group ID received, plus one; 0 for none.
	groupsSeen atomic.Uint64

	mu     sync.Mutex // guards groups, order, next, groupGaps and what groupCheck says it guards
	groups map[uint64]*groupCheck
	// last is the group of groups looked up last, with its ID: objects
	// come a group at a time, and a map lookup at each was a third of
	// Sent.Object's time in a relay's profile.
	last   *groupCheck
	lastID uint64
	order  [checkedGroups]uint64 // the Group IDs in groups, a ring from next
	next   int
	// groupGaps is set once a group remembered a Prior Group ID Gap: new
	// groups then look for themselves in the gaps (gaps.go).
	groupGaps bool
}

// groupCheck is what a subscription has seen of one group.
type groupCheck struct {
	// final is the group's final Object ID plus one (condition 4); 0 while
	// unknown.
	final atomic.Uint64
	// dgSeen is the largest Object ID received in a datagram, plus one.
	// Stream objects count in their subgroupCheck (see seenLocked).
	dgSeen atomic.Uint64
	// datagrams reports that an object of the group arrived as a datagram,
	// so stream objects look for their Object ID among them (condition 7).
	datagrams atomic.Bool

	// Guarded by Track.mu.
	subgroups [checkedSubgroups]*subgroupCheck // a ring from nextSub
	nextSub   int
	dgIDs     [checkedDatagrams]uint64 // Object IDs of datagrams, a ring
	dgCount   int                      // datagrams recorded, up to checkedDatagrams
	dgNext    int

	// The Prior ID Gap rules' (gaps.go).
	priorGaps
}

// subgroupCheck is what a subscription has seen of one subgroup.
type subgroupCheck struct {
	id       uint64
	priority uint8 // of the first stream seen; immutable (condition 1)
	// final is the subgroup's final Object ID plus one, from a FIN
	// (conditions 2 and 3); 0 while unknown.
	final atomic.Uint64
	// seen is the largest Object ID received, plus one.
	seen atomic.Uint64
	// gaps is set once the Object IDs received might not be every ID from
	// first to seen−1: a stream skipped IDs, or a second stream started.
	gaps atomic.Bool
	// first is the smallest Object ID a stream of it started with.
	// Guarded by Track.mu.
	first uint64
}

// malformed builds the error for a Malformed Track.
func malformed(format string, args ...any) *Error {
	return &Error{Reason: fmt.Sprintf(format, args...)}
}

// groupLocked returns the state of group id, remembering it, and forgetting the
// oldest group when full; fresh reports it was not remembered. t.mu is held.
func (t *Track) groupLocked(id uint64) (g *groupCheck, fresh bool) {
	if g := t.lookupLocked(id); g != nil {
		return g, false
	}
	if t.groups == nil {
		t.groups = make(map[uint64]*groupCheck, checkedGroups)
	}
	if len(t.groups) == checkedGroups {
		delete(t.groups, t.order[t.next])
	}
	g = &groupCheck{}
	t.groups[id] = g
	t.last, t.lastID = g, id // in place of any forgotten just now
	t.order[t.next] = id
	t.next = (t.next + 1) % checkedGroups
	return g, true
}

// lookupLocked returns the state of group id if remembered, or nil. t.mu
// is held.
func (t *Track) lookupLocked(id uint64) *groupCheck {
	if t.last != nil && t.lastID == id {
		return t.last
	}
	g := t.groups[id]
	if g != nil {
		t.last, t.lastID = g, id
	}
	return g
}

// subgroupLocked returns the state of subgroup id of g, remembering it,
// with priority, when new. t.mu is held.
func (g *groupCheck) subgroupLocked(id uint64, priority uint8) (sg *subgroupCheck, fresh bool) {
	for _, sg := range g.subgroups {
		if sg != nil && sg.id == id {
			return sg, false
		}
	}
	sg = &subgroupCheck{id: id, priority: priority, first: wire.MaxVarint}
	g.subgroups[g.nextSub] = sg
	g.nextSub = (g.nextSub + 1) % checkedSubgroups
	return sg, true
}

// seenLocked returns the largest Object ID received in g, plus one; 0 for
// none. t.mu is held.
func (g *groupCheck) seenLocked() uint64 {
	seen := g.dgSeen.Load()
	for _, sg := range g.subgroups {
		if sg != nil {
			seen = max(seen, sg.seen.Load())
		}
	}
	return seen
}

// hasSubgroupObjectLocked reports whether an object with Object ID id is
// known to have arrived on a subgroup stream of g. t.mu is held.
func (g *groupCheck) hasSubgroupObjectLocked(id uint64) bool {
	_, ok := g.subgroupObjectWithinLocked(id, id)
	return ok
}

// subgroupObjectWithinLocked returns an Object ID from lo to hi known to
// have arrived on a subgroup stream of g. A subgroup whose IDs have gaps
// only vouches for its first and largest. t.mu is held.
func (g *groupCheck) subgroupObjectWithinLocked(lo, hi uint64) (uint64, bool) {
	for _, sg := range g.subgroups {
		if sg == nil {
			continue
		}
		seen := sg.seen.Load() // before gaps, which is set before seen moves
		if id, ok := runWithin(seen != 0, sg.first, seen-1, sg.gaps.Load(), lo, hi); ok {
			return id, true
		}
	}
	return 0, false
}

// addDatagramLocked records that object id of g arrived as a datagram.
// t.mu is held.
func (g *groupCheck) addDatagramLocked(id uint64) {
	g.dgIDs[g.dgNext] = id
	g.dgNext = (g.dgNext + 1) % checkedDatagrams
	g.dgCount = min(g.dgCount+1, checkedDatagrams)
	g.datagrams.Store(true)
}

// hasDatagramLocked reports whether object id of g arrived as a datagram
// among those remembered. t.mu is held.
func (g *groupCheck) hasDatagramLocked(id uint64) bool {
	for _, d := range g.dgIDs[:g.dgCount] {
		if d == id {
			return true
		}
	}
	return false
}

// raise sets v to at least x.
func raise(v *atomic.Uint64, x uint64) {
	for {
		cur := v.Load()
		if cur >= x || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// object checks one object, whether from a stream (sg set) or a datagram,
// against the group's and the track's final objects, and records it.
// Objects are recorded before the finals are read, and finals before the
// records are read (setGroupFinal, setEndOfTrack), so whichever of two
// contradicting objects comes second sees the first.
//
// before is the Object ID of the object before it on its stream, plus one;
// 0 for none.
func (t *Track) object(g *groupCheck, sg *subgroupCheck, loc wire.Location, status wire.ObjectStatus, props []byte, before uint64) *Error {
	var gaps Gaps
	if len(props) > 0 {
		var e *Error
		if gaps, e = checkObjectProperties(loc, props); e != nil {
			return e
		}
	}
	id := loc.Object
	if sg != nil {
		raise(&sg.seen, id+1)
		if f := sg.final.Load(); f != 0 && id >= f {
			return malformed("object %v after the final object %d of subgroup %d", loc, f-1, sg.id) // 2
		}
	} else {
		raise(&g.dgSeen, id+1)
	}
	// Recorded above before the flag is read, as priorGapsLocked sets it
	// before it reads the records (gaps.go).
	if gaps.any() || g.hasRanges.Load() {
		t.mu.Lock()
		e := t.priorGapsLocked(g, loc, gaps, before)
		t.mu.Unlock()
		if e != nil {
			return e
		}
	}
	if f := g.final.Load(); f != 0 && id >= f {
		return malformed("object %v after the final object %d of group %d", loc, f-1, loc.Group) // 4
	}
	if end := t.endOfTrack.Load(); end != nil && end.Less(loc) {
		return malformed("object %v after the final object %v of the track", loc, *end) // 5
	}
	switch status {
	case wire.ObjectEndOfGroup:
		return t.setGroupFinal(g, loc)
	case wire.ObjectEndOfTrack:
		return t.setEndOfTrack(loc)
	}
	return nil
}

// setGroupFinal records that loc is the final object of its group
// (condition 4). Another final, or an object already received past it,
// contradicts it: one of the two is a received object beyond the other.
func (t *Track) setGroupFinal(g *groupCheck, loc wire.Location) *Error {
	if !g.final.CompareAndSwap(0, loc.Object+1) {
		if f := g.final.Load(); f != loc.Object+1 {
			return malformed("group %d ends at object %d and at %d", loc.Group, f-1, loc.Object) // 4
		}
	}
	t.mu.Lock()
	seen := g.seenLocked()
	t.mu.Unlock()
	if seen > loc.Object+1 {
		return malformed("object {%d, %d} after the final object %d of group %d", loc.Group, seen-1, loc.Object, loc.Group) // 4
	}
	return nil
}

// setEndOfTrack records that loc is the final object of the track
// (condition 5), checking what was received before.
func (t *Track) setEndOfTrack(loc wire.Location) *Error {
	if !t.endOfTrack.CompareAndSwap(nil, &loc) {
		if end := t.endOfTrack.Load(); *end != loc {
			return malformed("the track ends at %v and at %v", *end, loc) // 5
		}
	}
	if gs := t.groupsSeen.Load(); gs > loc.Group+1 {
		return malformed("group %d received after the final object %v of the track", gs-1, loc) // 5
	}
	var seen uint64
	t.mu.Lock()
	if g := t.lookupLocked(loc.Group); g != nil {
		seen = g.seenLocked()
	}
	t.mu.Unlock()
	if seen > loc.Object+1 {
		return malformed("object {%d, %d} after the final object %v of the track", loc.Group, seen-1, loc) // 5
	}
	return nil
}

// Datagram checks an object received in an OBJECT_DATAGRAM, and records
// it.
func (t *Track) Datagram(d *wire.ObjectDatagram) *Error {
	loc := wire.Location{Group: d.GroupID, Object: d.ObjectID}
	raise(&t.groupsSeen, d.GroupID+1)
	t.mu.Lock()
	g, fresh := t.groupLocked(d.GroupID)
	// Recorded before the streams are searched, as stream objects record
	// themselves before looking here (Stream.Object).
	g.addDatagramLocked(d.ObjectID)
	onStream := g.hasSubgroupObjectLocked(d.ObjectID)
	var gap *Error
	if fresh {
		gap = t.inGroupGapLocked(loc)
	}
	t.mu.Unlock()
	if onStream {
		return malformed("object %v received as a datagram and on a subgroup stream", loc) // 7
	}
	if gap != nil {
		return gap
	}
	if e := t.object(g, nil, loc, d.Status, d.Properties, 0); e != nil {
		return e
	}
	if d.EndOfGroup {
		return t.setGroupFinal(g, loc)
	}
	return nil
}

// Stream follows one subgroup stream through its Track. The zero value is
// ready. It is owned by the stream's reader, which serializes its calls.
type Stream struct {
	t       *Track
	g       *groupCheck
	sg      *subgroupCheck
	prev    uint64 // Object ID of the last object
	started bool
	gaps    bool // the stream skipped an Object ID
}

// begin looks up the stream's group and subgroup with its first object:
// once per stream.
func (c *Stream) begin(t *Track, loc wire.Location, subgroup uint64, priority uint8) *Error {
	raise(&t.groupsSeen, loc.Group+1)
	t.mu.Lock()
	g, freshGroup := t.groupLocked(loc.Group)
	sg, fresh := g.subgroupLocked(subgroup, priority)
	if !fresh {
		sg.gaps.Store(true)
	}
	sg.first = min(sg.first, loc.Object)
	var gap *Error
	if freshGroup {
		gap = t.inGroupGapLocked(loc)
	}
	t.mu.Unlock()
	c.t, c.g, c.sg, c.started = t, g, sg, true
	if sg.priority != priority {
		return malformed("subgroup %d of group %d has Publisher Priority %d on one stream and %d on another",
			subgroup, loc.Group, sg.priority, priority) // 1
	}
	return gap
}

// Object checks the next object of the stream against t, the Track of
// its subscription, and records it. priority is the stream's Publisher
// Priority, the header's or the track's default.
func (c *Stream) Object(t *Track, loc wire.Location, subgroup uint64, priority uint8, status wire.ObjectStatus, props []byte) *Error {
	var before uint64 // the stream's previous Object ID plus one; 0 for none
	switch {
	case !c.started:
		if e := c.begin(t, loc, subgroup, priority); e != nil {
			return e
		}
	case loc.Object != c.prev+1 && !c.gaps:
		c.gaps = true
		c.sg.gaps.Store(true)
		fallthrough
	default:
		before = c.prev + 1
	}
	c.prev = loc.Object
	if e := t.object(c.g, c.sg, loc, status, props, before); e != nil {
		return e
	}
	if c.g.datagrams.Load() {
		t.mu.Lock()
		dup := c.g.hasDatagramLocked(loc.Object)
		t.mu.Unlock()
		if dup {
			return malformed("object %v received on a subgroup stream and as a datagram", loc) // 7
		}
	}
	return nil
}

// Fin checks the stream's FIN: its last object is the subgroup's final
// object and, when endOfGroup, the group's (conditions 2–4). partial says
// the FIN may have come before the subgroup's last object (see the package
// comment); it is then not checked.
func (c *Stream) Fin(group uint64, endOfGroup, partial bool) *Error {
	if !c.started || partial {
		return nil
	}
	last := c.prev
	if !c.sg.final.CompareAndSwap(0, last+1) {
		if f := c.sg.final.Load(); f != last+1 {
			return malformed("subgroup %d of group %d ends at object %d on one stream and %d on another",
				c.sg.id, group, f-1, last) // 3
		}
	}
	if s := c.sg.seen.Load(); s > last+1 {
		return malformed("object {%d, %d} after the final object %d of subgroup %d", group, s-1, last, c.sg.id) // 2
	}
	if endOfGroup {
		return c.t.setGroupFinal(c.g, wire.Location{Group: group, Object: last})
	}
	return nil
}

// Started reports whether the stream's first object has been checked.
func (c *Stream) Started() bool { return c.started }
