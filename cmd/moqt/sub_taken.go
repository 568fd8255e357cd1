package main

import (
	"maps"
	"slices"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// taken keeps which objects of the track moqt sub has taken (written out,
// or waiting in the sequencer), so that the subscription it opens on a new
// session after GOAWAY resumes at the first object it lacks (resume), and
// objects that both sessions deliver are written once (has).
type taken struct {
	from   wire.Location          // the first object wanted
	floor  uint64                 // every group below it is complete, or given up
	groups map[uint64]*takenGroup // the groups from floor on with objects taken
	any    bool                   // an object was taken
}

// takenGroup is one group's objects taken.
type takenGroup struct {
	ids   []idSpan // sorted, disjoint, not adjacent
	end   uint64   // the End of Group's Object ID, once ended
	ended bool
}

// idSpan is the Object IDs lo through hi.
type idSpan struct{ lo, hi uint64 }

// maxTakenGroups bounds the groups kept: a publisher that ends no group
// (no End of Group) leaves every one incomplete, and the oldest are
// forgotten, as given up.
const maxTakenGroups = 1024

func newTaken(from wire.Location) *taken {
	return &taken{from: from, floor: from.Group, groups: map[uint64]*takenGroup{}}
}

// has reports whether the object at l was taken, or is in a group done with.
func (t *taken) has(l wire.Location) bool {
	if l.Group < t.floor {
		return true
	}
	g := t.groups[l.Group]
	if g == nil {
		return false
	}
	_, found := g.find(l.Object)
	return found
}

// take records an object ReadObject or a fetch returned.
func (t *taken) take(obj moqt.Object) {
	l := obj.Location
	t.any = true
	if l.Group < t.floor {
		return
	}
	g := t.groups[l.Group]
	if g == nil {
		g = &takenGroup{}
		t.groups[l.Group] = g
	}
	g.add(l.Object)
	if obj.Status == wire.ObjectEndOfGroup || obj.EndOfGroup {
		g.end, g.ended = l.Object, true
	}
	t.settle()
}

// below tells that the groups below g are done with: complete, or given up
// by the sequencer, which writes any later object of theirs out of order.
func (t *taken) below(g uint64) {
	if g <= t.floor {
		return
	}
	for id := range t.groups {
		if id < g {
			delete(t.groups, id)
		}
	}
	t.floor = g
	t.settle()
}

// settle moves floor past the groups that are complete.
func (t *taken) settle() {
	for {
		g := t.groups[t.floor]
		if g == nil || !g.complete(t.first(t.floor)) {
			break
		}
		delete(t.groups, t.floor)
		t.floor++
	}
	if len(t.groups) > maxTakenGroups {
		t.below(slices.Min(slices.Collect(maps.Keys(t.groups))) + 1)
	}
}

// first is the first Object ID wanted in group g.
func (t *taken) first(g uint64) uint64 {
	if g == t.from.Group {
		return t.from.Object
	}
	return 0
}

// resume is the first object not taken: everything before it was.
func (t *taken) resume() wire.Location {
	lo := t.first(t.floor)
	g := t.groups[t.floor]
	if g == nil {
		return wire.Location{Group: t.floor, Object: lo}
	}
	for _, s := range g.ids {
		if s.hi < lo {
			continue
		}
		if s.lo > lo {
			break
		}
		lo = s.hi + 1
	}
	return wire.Location{Group: t.floor, Object: lo}
}

// find returns the index of the first span whose hi is at least id, and
// whether id is in it.
func (g *takenGroup) find(id uint64) (int, bool) {
	i, _ := slices.BinarySearchFunc(g.ids, id, func(s idSpan, id uint64) int {
		switch {
		case s.hi < id:
			return -1
		case s.lo > id:
			return 1
		}
		return 0
	})
	return i, i < len(g.ids) && g.ids[i].lo <= id && id <= g.ids[i].hi
}

// add records Object ID id, merging spans that meet.
func (g *takenGroup) add(id uint64) {
	i, found := g.find(id)
	if found {
		return
	}
	// ids[i] is the first span after id, if any; ids[i-1] the one before.
	joinPrev := i > 0 && g.ids[i-1].hi+1 == id
	joinNext := i < len(g.ids) && g.ids[i].lo == id+1
	switch {
	case joinPrev && joinNext:
		g.ids[i-1].hi = g.ids[i].hi
		g.ids = slices.Delete(g.ids, i, i+1)
	case joinPrev:
		g.ids[i-1].hi = id
	case joinNext:
		g.ids[i].lo = id
	default:
		g.ids = slices.Insert(g.ids, i, idSpan{id, id})
	}
}

// complete reports whether every object from first through the End of
// Group was taken.
func (g *takenGroup) complete(first uint64) bool {
	if !g.ended {
		return false
	}
	if first > g.end {
		return true
	}
	i, found := g.find(first)
	return found && g.ids[i].hi >= g.end
}
