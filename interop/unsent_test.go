package interop

import (
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// unsentGroup is the group of testSubscribeUnsent that is closed
// incomplete, between two whole ones.
const unsentGroup = 1

// testSubscribeUnsent: a subgroup that will deliver no object
// (SubgroupWriter.CloseIncomplete, as a relay passes on an upstream stream
// lost before its first object) goes to the browser as a stream carrying
// the SUBGROUP_HEADER alone, then a reset (§11.3.2); Chromium offers no
// RESET_STREAM_AT, so the reset comes after the library's linger. @moq/net
// 0.3.4 drops such a stream ("dropping a group with no head" on its
// console) without telling the application, so the page reads the groups
// before and after it, whole and ended by a FIN, and nothing of it: the
// stream costs the browser nothing, and the served subscription counts it
// in its Stream Count.
func testSubscribeUnsent(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "unsent"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	handler, accepted := acceptOne(t, track)

	received := h.signals.take("received")
	var writeErrs []error
	var ss *moqt.ServedSubscription
	onAccept := func(s *moqt.Session) {
		select {
		case ss = <-accepted:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		for g := range uint64(3) {
			w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{EndOfGroup: true})
			if g == unsentGroup {
				w.CloseIncomplete(wire.ResetCancelled)
				continue
			}
			for o := range uint64(objectsPerGroup) {
				if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: objectPayload(g, o)}); err != nil {
					writeErrs = append(writeErrs, fmt.Errorf("group %d object %d: %w", g, o, err))
				}
			}
			if err := w.Close(); err != nil {
				writeErrs = append(writeErrs, fmt.Errorf("closing group %d: %w", g, err))
			}
		}
		select {
		case <-received:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		track.End(wire.DoneTrackEnded, "interop: track ended")
	}

	r := h.runScenario(t, scenario{
		name:      "subscribe-objects",
		namespace: "moqt-interop/unsent",
		track:     "video",
		params:    map[string]any{"groups": 2, "doneWaitMs": doneWait.Milliseconds()},
		cfg:       moqt.Config{Handler: handler},
		onAccept:  onAccept,
	})
	require.NotNil(t, ss, "the server accepted no SUBSCRIBE")
	assert.Empty(t, writeErrs, "the publisher's writes")
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")

	groups := map[uint64]jsGroup{}
	for _, g := range r.js.Groups {
		_, dup := groups[g.Sequence]
		assert.False(t, dup, "group %d arrived twice", g.Sequence)
		groups[g.Sequence] = g
	}
	require.Len(t, groups, 2, "groups the page read")
	for _, seq := range []uint64{unsentGroup - 1, unsentGroup + 1} {
		g, ok := groups[seq]
		if !assert.True(t, ok, "group %d is missing", seq) {
			continue
		}
		assert.Nil(t, g.Error, "group %d did not end with a FIN", seq)
		if assert.Len(t, g.Frames, objectsPerGroup, "objects in group %d", seq) {
			for o, f := range g.Frames {
				assert.True(t, hex.EncodeToString(objectPayload(seq, uint64(o))) == f.Payload, "group %d object %d: payload differs", seq, o)
			}
		}
	}
	var de *moqt.DoneError
	if assert.ErrorAs(t, ss.Err(), &de, "the served subscription's end") {
		assert.Equal(t, uint64(3), de.StreamCount, "the header-only stream is counted")
	}
}
