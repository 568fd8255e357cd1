package malformed

import (
	"sync/atomic"

	"github.com/moqt-go/moqt/wire"
)

// The Prior Group ID Gap (§10.8) and Prior Object ID Gap (§10.9) rules
// that need more than the object: a Track is malformed when
//
//   - a Group has objects with different Prior Group ID Gaps;
//   - an object's Prior Group ID Gap covers a group an object was
//     received in, or its Prior Object ID Gap an object of its group
//     received;
//   - an object is received in a group, or with an Object ID, within a
//     gap communicated before.
//
// The rules on the object alone (each property once, a gap no larger than
// the ID) are checkObjectProperties'. Gaps are Original Publisher facts
// that relays never add or modify (§10.8, §10.9): an object inside one is
// a contradiction whatever path it took, unlike the FETCH gaps of §2.1,
// which a source may report for objects that exist elsewhere.
//
// A Track keeps, per group it remembers, the group's Prior Group ID Gap
// and the ranges of the latest checkedGapRanges Prior Object ID Gaps; the
// objects received are those its groups, subgroups and datagrams already
// remember, and those of fill streams (Fetched). A Fetch follows one fetch
// stream alone, in a few fields. Sent applies the rules to what a
// publisher sends, to refuse what its receivers would take for malformed.

// gapRange is the Object IDs lo to hi, inclusive, that a Prior Object ID
// Gap said do not exist.
type gapRange struct{ lo, hi uint64 }

// priorGaps is what a group remembers for the rules. Guarded by Track.mu
// but hasRanges.
type priorGaps struct {
	// groupGap is the Prior Group ID Gap of the group's objects, plus
	// one; 0 while none came.
	groupGap uint64
	// ranges are the latest Prior Object ID Gaps of the group, a ring of
	// rangeCount from rangeNext.
	ranges     [checkedGapRanges]gapRange
	rangeCount int
	rangeNext  int
	// hasRanges is set, before ranges has any, once an object of the
	// group carried a Prior Object ID Gap: the group's objects then look
	// for themselves in ranges. It is read without the lock.
	hasRanges atomic.Bool
	// fetched is the group's objects received on fill streams.
	fetched idRun
}

// idRun is a series of Object IDs received: every ID from first to last,
// unless holes, when only first and last are known to have come.
type idRun struct {
	first, last uint64
	started     bool
	holes       bool
}

// add records Object ID id.
func (r *idRun) add(id uint64) {
	switch {
	case !r.started:
		r.first, r.last, r.started = id, id, true
		return
	case id != r.last+1:
		r.holes = true
	}
	r.first, r.last = min(r.first, id), max(r.last, id)
}

// within returns an Object ID known to have come from lo to hi.
func (r *idRun) within(lo, hi uint64) (uint64, bool) {
	return runWithin(r.started, r.first, r.last, r.holes, lo, hi)
}

// runWithin returns an Object ID from lo to hi of a run from first to last
// (none when !started): any of them, or only first or last when holes.
func runWithin(started bool, first, last uint64, holes bool, lo, hi uint64) (uint64, bool) {
	switch {
	case !started || first > hi || last < lo:
		return 0, false
	case !holes:
		return max(first, lo), true
	case first >= lo:
		return first, true
	case last <= hi:
		return last, true
	}
	return 0, false
}

// The faults, worded once for the Track, Fetch and Sent.

func errInGroupGap(loc wire.Location, gap, group uint64) *Error {
	return malformed("object %v is in the Prior Group ID Gap %d of group %d", loc, gap, group)
}

func errGroupGapsDiffer(group, a, b uint64) *Error {
	return malformed("group %d has objects with Prior Group ID Gap %d and %d", group, a, b)
}

func errGroupGapCovers(loc wire.Location, gap, group uint64) *Error {
	return malformed("object %v has Prior Group ID Gap %d, which covers group %d, received before", loc, gap, group)
}

func errObjectGapCovers(loc wire.Location, gap, id uint64) *Error {
	return malformed("object %v has Prior Object ID Gap %d, which covers object %d, received before", loc, gap, id)
}

// inGroupGapLocked checks loc, in a group t did not remember, against the
// Prior Group ID Gaps of the groups it remembers. A group it remembers
// needs no check: it was checked when it came, and a gap since then was
// checked against it (groupGapFaultLocked). t.mu is held.
func (t *Track) inGroupGapLocked(loc wire.Location) *Error {
	if !t.groupGaps {
		return nil
	}
	for id, g := range t.groups {
		if gap := g.groupGap; gap > 1 && id > loc.Group && id-loc.Group < gap {
			return errInGroupGap(loc, gap-1, id)
		}
	}
	return nil
}

// inObjectGapLocked checks loc against the Prior Object ID Gaps of its
// group g. t.mu is held.
func (g *groupCheck) inObjectGapLocked(loc wire.Location) *Error {
	for _, r := range g.ranges[:g.rangeCount] {
		if r.lo <= loc.Object && loc.Object <= r.hi {
			return malformed("object %v is in the Prior Object ID Gap of object {%d, %d}", loc, loc.Group, r.hi+1)
		}
	}
	return nil
}

// groupGapFaultLocked checks the Prior Group ID Gap gap of an object at loc
// of group g, nil when t does not remember the group, against the group's
// and the groups received. It records nothing. t.mu is held.
func (t *Track) groupGapFaultLocked(g *groupCheck, loc wire.Location, gap uint64) *Error {
	if g != nil && g.groupGap != 0 {
		if g.groupGap != gap+1 {
			return errGroupGapsDiffer(loc.Group, g.groupGap-1, gap)
		}
		return nil // checked when the group's first came
	}
	for id := range t.groups {
		if id < loc.Group && loc.Group-id <= gap {
			return errGroupGapCovers(loc, gap, id)
		}
	}
	return nil
}

// objectGapFaultLocked checks the Prior Object ID Gap gap of an object at
// loc of group g, nil when t does not remember the group, against the
// group's objects received and before, the Object ID of the object before
// it on its stream plus one (0 for none): the largest of that stream's
// below it, which its record may no longer vouch for once the stream
// skipped IDs, as one that carries a gap often does. It records nothing.
// t.mu is held.
func (g *groupCheck) objectGapFaultLocked(loc wire.Location, gap, before uint64) *Error {
	if gap == 0 {
		return nil
	}
	lo := loc.Object - gap
	if before != 0 && before-1 >= lo {
		return errObjectGapCovers(loc, gap, before-1)
	}
	if g == nil {
		return nil
	}
	if id, ok := g.objectWithinLocked(lo, loc.Object-1); ok {
		return errObjectGapCovers(loc, gap, id)
	}
	return nil
}

// recordGapsLocked records the gaps of an object at loc of group g. t.mu
// is held.
func (t *Track) recordGapsLocked(g *groupCheck, loc wire.Location, gaps Gaps) {
	if gaps.Group.Set && g.groupGap == 0 {
		g.groupGap = gaps.Group.Value + 1
		t.groupGaps = true
	}
	if v := gaps.Object.Value; gaps.Object.Set && v > 0 {
		g.hasRanges.Store(true)
		g.ranges[g.rangeNext] = gapRange{lo: loc.Object - v, hi: loc.Object - 1}
		g.rangeNext = (g.rangeNext + 1) % checkedGapRanges
		g.rangeCount = min(g.rangeCount+1, checkedGapRanges)
	}
}

// objectWithinLocked returns an Object ID from lo to hi known to have come
// in g: on a subgroup stream, in a datagram or on a fill stream. t.mu is
// held.
func (g *groupCheck) objectWithinLocked(lo, hi uint64) (uint64, bool) {
	if id, ok := g.subgroupObjectWithinLocked(lo, hi); ok {
		return id, true
	}
	for _, id := range g.dgIDs[:g.dgCount] {
		if lo <= id && id <= hi {
			return id, true
		}
	}
	return g.fetched.within(lo, hi)
}

// priorGapsLocked applies the rules to an object at loc of group g,
// already recorded as received, that carries gaps or whose group had a
// Prior Object ID Gap, and records its gaps. before is as for
// objectGapFaultLocked. t.mu is held.
func (t *Track) priorGapsLocked(g *groupCheck, loc wire.Location, gaps Gaps, before uint64) *Error {
	if e := g.inObjectGapLocked(loc); e != nil {
		return e
	}
	if gaps.Object.Set && gaps.Object.Value > 0 {
		// Set before the objects received are read, which a stream
		// object records before it reads the flag (Track.object).
		g.hasRanges.Store(true)
	}
	if gaps.Group.Set {
		if e := t.groupGapFaultLocked(g, loc, gaps.Group.Value); e != nil {
			return e
		}
	}
	if gaps.Object.Set {
		if e := g.objectGapFaultLocked(loc, gaps.Object.Value, before); e != nil {
			return e
		}
	}
	t.recordGapsLocked(g, loc, gaps)
	return nil
}

// Fetched checks an object received on a fill stream of the subscription
// (§3.4), with the gaps its properties carry, against the rules and what
// the subscription received, and records it. Only these rules reach
// across the subscription's streams from a fill: the fill stream's own
// order and range are the stream's reader's to check.
func (t *Track) Fetched(loc wire.Location, gaps Gaps) *Error {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, fresh := t.groupLocked(loc.Group)
	g.fetched.add(loc.Object)
	if fresh {
		if e := t.inGroupGapLocked(loc); e != nil {
			return e
		}
	}
	return t.priorGapsLocked(g, loc, gaps, 0)
}

// Fetch follows one fetch stream (§11.4.1) for the rules. Its objects come
// in order, groups ascending or descending and objects by increasing
// Object ID within a group (§9.11), which the stream's reader and writer
// hold it to before they ask here; so an object is compared with few
// others: in Ascending order a Prior Group ID Gap covers a group received
// when the group before its own is in it, and in Descending order a
// group's gap concerns only the group that follows it, all later ones
// being smaller; a Prior Object ID Gap covers an object received when the
// object before it in its group is in it. A relay may remove either
// property from the objects it serves by FETCH (§10.8, §10.9), so an
// object without one is never at fault. The zero value is ready; it is
// owned by the stream's reader or writer.
type Fetch struct {
	started bool
	last    wire.Location // the last object's Location
	// groupGap is the Prior Group ID Gap of last's group, once one of its
	// objects carried one.
	groupGap wire.Opt[uint64]
	// before is the group of the last object before last's group.
	before wire.Opt[uint64]
}

// Check checks the object at loc with Object Properties props that comes
// next on the stream, whose groups come in Descending order when
// descending: its properties (checkObjectProperties), then the rules against
// the objects before it. It returns the object's gaps, for Record, and
// records nothing.
func (f *Fetch) Check(loc wire.Location, props []byte, descending bool) (Gaps, *Error) {
	var gaps Gaps
	if len(props) > 0 {
		var e *Error
		if gaps, e = checkObjectProperties(loc, props); e != nil {
			return gaps, e
		}
	}
	if !f.started {
		return gaps, nil
	}
	last := f.last
	same := loc.Group == last.Group
	prior := f.before // in Ascending order, the largest group before loc's
	if !same {
		prior = wire.Some(last.Group)
	}
	g, o := gaps.Group, gaps.Object
	switch {
	case !same && descending && f.groupGap.Set && last.Group-loc.Group <= f.groupGap.Value:
		return gaps, errInGroupGap(loc, f.groupGap.Value, last.Group)
	case g.Set && same && f.groupGap.Set && g.Value != f.groupGap.Value:
		return gaps, errGroupGapsDiffer(loc.Group, f.groupGap.Value, g.Value)
	case g.Set && !descending && prior.Set && loc.Group-prior.Value <= g.Value:
		return gaps, errGroupGapCovers(loc, g.Value, prior.Value)
	case o.Set && same && loc.Object-last.Object <= o.Value:
		return gaps, errObjectGapCovers(loc, o.Value, last.Object)
	}
	return gaps, nil
}

// Record records that the object at loc, with gaps, went on the stream.
func (f *Fetch) Record(loc wire.Location, gaps Gaps) {
	switch {
	case !f.started || loc.Group != f.last.Group:
		if f.started {
			f.before = wire.Some(f.last.Group)
		}
		f.groupGap = gaps.Group
	case gaps.Group.Set:
		f.groupGap = gaps.Group
	}
	f.started, f.last = true, loc
}

// Sent is what a publisher sent of a track, for the rules: it refuses an
// object that its receivers would take for malformed, by its properties
// (checkObjectProperties) or by these rules against what was sent before. It
// remembers what Track does, within the same bounds, and only what it
// let go. The zero value is ready; it is safe for concurrent use.
type Sent struct{ t Track }

// Object checks an object the publisher is about to send at loc, in
// subgroup subgroup or as a datagram, with Object Properties props, and
// records it when it may go.
func (s *Sent) Object(loc wire.Location, subgroup uint64, datagram bool, props []byte) *Error {
	var gaps Gaps
	if len(props) > 0 {
		var e *Error
		if gaps, e = checkObjectProperties(loc, props); e != nil {
			return e
		}
	}
	t := &s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.lookupLocked(loc.Group)
	if g == nil {
		if e := t.inGroupGapLocked(loc); e != nil {
			return e
		}
	} else if e := g.inObjectGapLocked(loc); e != nil {
		return e
	}
	if gaps.Group.Set {
		if e := t.groupGapFaultLocked(g, loc, gaps.Group.Value); e != nil {
			return e
		}
	}
	if gaps.Object.Set {
		// Checked before o is recorded: the largest Object ID of its
		// subgroup, the one before it, is its record's last.
		if e := g.objectGapFaultLocked(loc, gaps.Object.Value, 0); e != nil {
			return e
		}
	}
	if g == nil {
		g, _ = t.groupLocked(loc.Group)
	}
	if datagram {
		g.addDatagramLocked(loc.Object)
	} else {
		sg, fresh := g.subgroupLocked(subgroup, 0)
		if !fresh && loc.Object != sg.seen.Load() {
			sg.gaps.Store(true)
		}
		sg.first = min(sg.first, loc.Object)
		raise(&sg.seen, loc.Object+1)
	}
	t.recordGapsLocked(g, loc, gaps)
	return nil
}
