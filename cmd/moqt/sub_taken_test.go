package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

func at(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }

// TestTakenResume: the resume point is the first object not taken, in the
// lowest group not complete (End of Group taken, and every object before
// it from the first wanted); objects at or past it are told apart by has,
// whatever order they came in.
func TestTakenResume(t *testing.T) {
	take := func(tk *taken, g, o uint64, eog bool) {
		obj := moqt.Object{Location: at(g, o)}
		if eog {
			obj.Status = wire.ObjectEndOfGroup
		}
		tk.take(obj)
	}
	tk := newTaken(at(3, 2)) // joined group 3 after its object 1
	assert.Equal(t, at(3, 2), tk.resume(), "nothing taken")
	take(tk, 4, 0, false) // group 4 came first
	take(tk, 3, 2, false)
	take(tk, 3, 4, false) // 3:3 still on its way, in another subgroup
	assert.Equal(t, at(3, 3), tk.resume())
	take(tk, 3, 3, false)
	take(tk, 3, 5, true)
	assert.Equal(t, at(4, 1), tk.resume(), "group 3 complete: from its first wanted object to its End of Group")
	assert.True(t, tk.has(at(3, 3)))
	assert.True(t, tk.has(at(4, 0)))
	assert.False(t, tk.has(at(4, 1)))
	assert.False(t, tk.has(at(5, 0)))
	take(tk, 6, 0, false)
	assert.Equal(t, at(4, 1), tk.resume(), "group 5 not seen: group 4 is not known complete")
	tk.below(6) // the sequencer gave groups 4 and 5 up
	assert.Equal(t, at(6, 1), tk.resume())
	assert.True(t, tk.has(at(5, 3)), "a group given up counts as taken")
	require.LessOrEqual(t, len(tk.groups), 1)
}

// TestTakenBound: a publisher that ends no group leaves every group
// incomplete; the oldest are given up past maxTakenGroups.
func TestTakenBound(t *testing.T) {
	tk := newTaken(wire.Location{})
	for g := range uint64(maxTakenGroups + 10) {
		tk.take(moqt.Object{Location: at(g, 0)})
	}
	assert.LessOrEqual(t, len(tk.groups), maxTakenGroups)
	assert.Equal(t, at(10, 1), tk.resume())
}

// TestSequencerThrough: a fill after a move delivers in order, without End
// of Group objects: its first object of a group ends the groups before it,
// group IDs it skips do not exist, and what waited for them goes out.
func TestSequencerThrough(t *testing.T) {
	h := newSeqHarness()
	h.s.begin(3, h.now)
	h.s.endsGroups = true // the publisher ends its groups: no stall gives a group up
	h.obj(t, 3, 0)
	h.obj(t, 5, 0) // live, from the old session, held
	require.NoError(t, h.s.through(3, h.now))
	h.obj(t, 3, 1) // the fill's
	assert.Equal(t, locs("3:0", "3:1"), h.out, "group 5 waits for group 3's end")
	require.NoError(t, h.s.through(5, h.now)) // the fill's first entry in group 5: group 4 does not exist
	assert.Equal(t, locs("3:0", "3:1", "5:0"), h.out)
	h.obj(t, 5, 1)
	assert.Equal(t, locs("3:0", "3:1", "5:0", "5:1"), h.out)
	assert.Empty(t, h.late)
}
