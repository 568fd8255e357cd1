package main

import (
	"encoding/base64"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// seqHarness feeds a sequencer and records what it writes out.
type seqHarness struct {
	s    *sequencer
	out  []string
	late []string
	now  time.Time
}

func newSeqHarness() *seqHarness {
	h := &seqHarness{now: time.Unix(1000, 0)}
	h.s = newSequencer(func(o moqt.Object) error {
		h.out = append(h.out, string(o.Payload))
		return nil
	})
	h.s.late = func(o moqt.Object) { h.late = append(h.late, loc(o.Location)) }
	return h
}

// obj feeds object g:o, whose payload is "g:o".
func (h *seqHarness) obj(t *testing.T, g, o uint64) {
	t.Helper()
	l := wire.Location{Group: g, Object: o}
	require.NoError(t, h.s.add(moqt.Object{Location: l, Payload: []byte(loc(l))}, h.now))
}

// eog feeds group g's End of Group at object o.
func (h *seqHarness) eog(t *testing.T, g, o uint64) {
	t.Helper()
	require.NoError(t, h.s.add(moqt.Object{Location: wire.Location{Group: g, Object: o}, Status: wire.ObjectEndOfGroup}, h.now))
}

func locs(s ...string) []string { return s }

func TestSequencerInterleavedGroups(t *testing.T) {
	h := newSeqHarness()
	h.s.begin(0, h.now)
	h.obj(t, 1, 0) // group 1 before group 0's first object
	h.obj(t, 2, 0)
	h.obj(t, 0, 0)
	h.obj(t, 1, 1)
	h.obj(t, 0, 1)
	assert.Equal(t, locs("0:0", "0:1"), h.out, "later groups wait")
	h.eog(t, 0, 2)
	assert.Equal(t, locs("0:0", "0:1", "1:0", "1:1"), h.out, "group 1 follows once group 0 ends")
	h.eog(t, 1, 2)
	h.obj(t, 2, 1)
	h.eog(t, 2, 2)
	require.NoError(t, h.s.flush())
	assert.Equal(t, locs("0:0", "0:1", "1:0", "1:1", "2:0", "2:1"), h.out)
	assert.Empty(t, h.late)
}

func TestSequencerFirstObjectStarts(t *testing.T) {
	// A fill's entries come first and in order: the first one starts.
	h := newSeqHarness()
	h.obj(t, 5, 0)
	h.obj(t, 5, 1)
	h.obj(t, 6, 0)
	h.eog(t, 5, 2)
	h.obj(t, 6, 1)
	assert.Equal(t, locs("5:0", "5:1", "6:0", "6:1"), h.out)
}

func TestSequencerEndedWithLargest(t *testing.T) {
	// The Largest Object was group 5's End of Group: its fill's objects
	// come, then group 6's live ones say group 5 is over.
	h := newSeqHarness()
	h.s.endedWith(5)
	h.obj(t, 5, 0)
	h.obj(t, 5, 1)
	h.obj(t, 6, 0)
	assert.Equal(t, locs("5:0", "5:1", "6:0"), h.out)
}

func TestSequencerIncompleteGroup(t *testing.T) {
	h := newSeqHarness()
	h.s.begin(0, h.now)
	h.obj(t, 0, 0)
	h.obj(t, 1, 0)
	require.NoError(t, h.s.incomplete(0, h.now)) // group 0's stream was reset
	assert.Equal(t, locs("0:0", "1:0"), h.out)
	h.obj(t, 0, 1) // too late: written anyway, and told
	assert.Equal(t, locs("0:0", "1:0", "0:1"), h.out)
	assert.Equal(t, locs("0:1"), h.late)
}

func TestSequencerStall(t *testing.T) {
	// A group that never ends (no End of Group) is given up once nothing
	// of it came for sequenceStall while a later one waits.
	h := newSeqHarness()
	skipped := []uint64{}
	h.s.skip = func(g uint64) { skipped = append(skipped, g) }
	h.s.begin(0, h.now)
	h.obj(t, 0, 0)
	h.obj(t, 1, 0)
	assert.Equal(t, sequenceStall, h.s.wake(h.now))
	h.now = h.now.Add(sequenceStall / 2)
	require.NoError(t, h.s.tick(h.now))
	assert.Equal(t, locs("0:0"), h.out)
	h.now = h.now.Add(sequenceStall / 2)
	require.NoError(t, h.s.tick(h.now))
	assert.Equal(t, locs("0:0", "1:0"), h.out)
	assert.Equal(t, []uint64{0}, skipped)
	assert.Zero(t, h.s.wake(h.now), "nothing waits")
}

func TestSequencerGapInGroupIDs(t *testing.T) {
	// A restarted clock skips group IDs: after a quiet while the next
	// group goes out after reorderWait (the group before it, written
	// back to back, may arrive just after); soon after, it waits its turn.
	h := newSeqHarness()
	h.s.begin(10, h.now)
	h.obj(t, 10, 0)
	h.eog(t, 10, 1)
	h.now = h.now.Add(3 * sequenceStall)
	h.obj(t, 20, 0)
	assert.Equal(t, locs("10:0"), h.out)
	assert.Equal(t, reorderWait, h.s.wake(h.now))
	h.now = h.now.Add(reorderWait)
	require.NoError(t, h.s.tick(h.now))
	assert.Equal(t, locs("10:0", "20:0"), h.out)
	h.eog(t, 20, 1)
	h.obj(t, 25, 0) // group 21 might still come
	assert.Equal(t, locs("10:0", "20:0"), h.out)
	require.NoError(t, h.s.flush())
	assert.Equal(t, locs("10:0", "20:0", "25:0"), h.out)
}

// TestSequencerReorderAfterIdle: after an idle spell longer than the
// stall, the next two groups, written back to back, arrive in reverse
// order and are still written in order. Before, the later one went out at
// once (seen after moqt sub moved, its track idle meanwhile).
func TestSequencerReorderAfterIdle(t *testing.T) {
	h := newSeqHarness()
	h.s.begin(1, h.now)
	h.obj(t, 1, 0)
	h.eog(t, 1, 1)
	h.now = h.now.Add(3 * sequenceStall)
	h.obj(t, 3, 0)
	h.obj(t, 2, 0)
	h.eog(t, 2, 1)
	assert.Equal(t, locs("1:0", "2:0", "3:0"), h.out)
}

func TestSequencerBound(t *testing.T) {
	h := newSeqHarness()
	h.s.begin(0, h.now)
	h.obj(t, 0, 0)
	big := make([]byte, maxAheadBytes/4)
	for g := uint64(1); g <= 5; g++ {
		require.NoError(t, h.s.add(moqt.Object{Location: wire.Location{Group: g}, Payload: big}, h.now))
	}
	require.GreaterOrEqual(t, len(h.out), 2, "past the bound, groups waiting go out")
	assert.LessOrEqual(t, h.s.aheadBytes, maxAheadBytes+len(big)+objectBookkeeping)
}

func TestParseCertificateHash(t *testing.T) {
	var want [32]byte
	for i := range want {
		want[i] = byte(i * 7)
	}
	hexText := fmt.Sprintf("%x", want)
	colons := ""
	for i, b := range want {
		if i > 0 {
			colons += ":"
		}
		colons += fmt.Sprintf("%02X", b)
	}
	for _, in := range []string{hexText, " " + hexText + "\n", colons,
		base64.StdEncoding.EncodeToString(want[:]), base64.RawURLEncoding.EncodeToString(want[:])} {
		got, err := parseCertificateHash(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{"", "abc", hexText[:62], hexText + "00"} {
		_, err := parseCertificateHash(in)
		assert.Error(t, err, in)
	}
}

func TestNames(t *testing.T) {
	ns, err := parseNamespace("live/cam%2F1", false)
	require.NoError(t, err)
	assert.Equal(t, wire.NewNamespace("live", "cam/1"), ns)
	assert.Equal(t, "live/cam%2F1", formatNamespace(ns))
	_, err = parseNamespace("a//b", false)
	assert.Error(t, err)
	_, err = parseNamespace("", false)
	assert.Error(t, err)
	empty, err := parseNamespace("", true)
	require.NoError(t, err)
	assert.Empty(t, empty)
	tr, err := parseTrack("clock", "time%00")
	require.NoError(t, err)
	assert.Equal(t, "clock time%00", formatTrack(tr))
	l, err := parseLocation("3:4")
	require.NoError(t, err)
	assert.Equal(t, wire.Location{Group: 3, Object: 4}, l)
	_, err = parseLocation("x")
	assert.Error(t, err)
	// A gap through the end of a group (moqt fetch's stderr).
	assert.Equal(t, "the end of group 8", rangeEnd(wire.Location{Group: 8, Object: math.MaxUint64}))
	assert.Equal(t, "8:3", rangeEnd(wire.Location{Group: 8, Object: 3}))
}

func TestParseArgsInterspersed(t *testing.T) {
	fs := newFlagSet()
	v := fs.Bool("v", false, "")
	from := fs.String("from", "", "")
	pos, err := parseArgs(fs, []string{"url", "-v", "ns", "track", "-from", "1:2"})
	require.NoError(t, err)
	assert.Equal(t, []string{"url", "ns", "track"}, pos)
	assert.True(t, *v)
	assert.Equal(t, "1:2", *from)

	fs = newFlagSet()
	fs.Bool("v", false, "")
	pos, err = parseArgs(fs, []string{"a", "--", "-v"})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "-v"}, pos)
}

func TestSequencerStartAtLowest(t *testing.T) {
	// Where the track starts is not known: groups wait until group 0,
	// the lowest there can be, comes, then go out in order.
	h := newSeqHarness()
	h.s.beginAtLowest(h.now)
	h.obj(t, 3, 0)
	h.obj(t, 2, 0)
	h.eog(t, 3, 1)
	h.now = h.now.Add(sequenceStall / 2)
	require.NoError(t, h.s.tick(h.now))
	assert.Empty(t, h.out, "the start is not known yet")
	h.obj(t, 0, 0)
	assert.Equal(t, locs("0:0"), h.out)
	h.eog(t, 0, 1)
	h.obj(t, 1, 0)
	h.eog(t, 1, 1)
	h.eog(t, 2, 1)
	assert.Equal(t, locs("0:0", "1:0", "2:0", "3:0"), h.out)
	assert.Empty(t, h.late)

	// Without group 0, the lowest group to arrive within the stall starts,
	// however many objects keep coming meanwhile.
	h = newSeqHarness()
	h.s.beginAtLowest(h.now)
	h.obj(t, 7, 0)
	h.now = h.now.Add(sequenceStall / 2)
	h.obj(t, 5, 0)
	assert.Equal(t, sequenceStall/2, h.s.wake(h.now))
	h.now = h.now.Add(sequenceStall / 2)
	h.obj(t, 7, 1)
	assert.Equal(t, locs("5:0"), h.out)
	h.eog(t, 5, 1)
	h.obj(t, 6, 0)
	h.eog(t, 6, 1)
	assert.Equal(t, locs("5:0", "6:0", "7:0", "7:1"), h.out)

	// The track ends before the start is known: all of it, in order.
	h = newSeqHarness()
	h.s.beginAtLowest(h.now)
	h.obj(t, 2, 0)
	h.obj(t, 1, 0)
	require.NoError(t, h.s.flush())
	assert.Equal(t, locs("1:0", "2:0"), h.out)
}

func TestSequencerWaitsForEndOfGroup(t *testing.T) {
	// A publisher that ends its groups: the group being written is waited
	// for past sequenceStall, so that a slow object of it (a large one over
	// a lossy path) is not written after later groups.
	h := newSeqHarness()
	h.s.begin(0, h.now)
	h.obj(t, 0, 0)
	h.eog(t, 0, 1)
	h.obj(t, 1, 0)
	h.obj(t, 2, 0)
	h.eog(t, 2, 1)
	h.now = h.now.Add(3 * sequenceStall)
	require.NoError(t, h.s.tick(h.now))
	assert.Equal(t, locs("0:0", "1:0"), h.out, "group 2 waits for group 1's end")
	h.obj(t, 1, 1)
	h.eog(t, 1, 2)
	assert.Equal(t, locs("0:0", "1:0", "1:1", "2:0"), h.out)
	assert.Empty(t, h.late)
}
