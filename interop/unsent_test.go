package interop

import (
	"testing"

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
		if ss, _ = awaitOn(s, accepted); ss == nil {
			return
		}
		writeErrs = append(writeErrs, publishGroup(track, unsentGroup-1)...)
		track.OpenSubgroup(unsentGroup, 0, moqt.SubgroupOptions{EndOfGroup: true}).CloseIncomplete(wire.ResetCancelled)
		writeErrs = append(writeErrs, publishGroup(track, unsentGroup+1)...)
		if _, ok := awaitOn(s, received); ok {
			track.End(wire.DoneTrackEnded, "interop: track ended")
		}
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

	groups := jsGroupsBySequence(t, r.js.Groups)
	require.Len(t, groups, 2, "groups the page read")
	checkJSGroup(t, groups, unsentGroup-1)
	checkJSGroup(t, groups, unsentGroup+1)
	var de *moqt.DoneError
	if assert.ErrorAs(t, ss.Err(), &de, "the served subscription's end") {
		assert.Equal(t, uint64(3), de.StreamCount, "the header-only stream is counted")
	}
}
