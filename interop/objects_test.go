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

// The track of subscribe-objects.
const (
	objectGroups    = 5
	objectsPerGroup = 4
	// doneWait is how long the page watches for the end of the
	// subscription once the server has ended the track.
	doneWait = 2 * time.Second
)

// objectPayload is object o of group g in subscribe-objects: from one byte
// to several QUIC packets, with bytes that depend on the group, the object
// and the offset, so that a swapped, shifted or truncated object shows.
func objectPayload(g, o uint64) []byte {
	sizes := [objectsPerGroup]int{1, 100, 1500, 20000}
	b := make([]byte, sizes[o])
	for i := range b {
		b[i] = byte(g*67 + o*29 + uint64(i)*13 + uint64(i>>8))
	}
	return b
}

// publishObjects writes the subscribe-objects track: objectGroups groups,
// each one subgroup stream of objectsPerGroup objectPayload objects ending
// with a FIN. It returns the writes' errors.
func publishObjects(track *moqt.LocalTrack) []error {
	var errs []error
	for g := range uint64(objectGroups) {
		errs = append(errs, publishGroup(track, g)...)
	}
	return errs
}

// publishGroup writes group g of the subscribe-objects track: one subgroup
// stream of objectsPerGroup objectPayload objects ending with a FIN. It
// returns the writes' errors.
func publishGroup(track *moqt.LocalTrack, g uint64) []error {
	var errs []error
	w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{EndOfGroup: true})
	for o := range uint64(objectsPerGroup) {
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: objectPayload(g, o)}); err != nil {
			errs = append(errs, fmt.Errorf("group %d object %d: %w", g, o, err))
		}
	}
	if err := w.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing group %d: %w", g, err))
	}
	return errs
}

// awaitOn waits for a value from ch while s lasts, within scenarioTimeout.
func awaitOn[T any](s *moqt.Session, ch <-chan T) (T, bool) {
	var zero T
	select {
	case v := <-ch:
		return v, true
	case <-s.Context().Done():
	case <-time.After(scenarioTimeout):
	}
	return zero, false
}

// checkJSGroups asserts that the page read groups 0 to objectGroups-1,
// each once, ended by a FIN and holding objectPayload's objects in order,
// byte for byte. Groups are streams of their own, so they may arrive in
// any order (@moq/net hands them out as their streams arrive).
func checkJSGroups(t *testing.T, read []jsGroup) {
	t.Helper()
	groups := jsGroupsBySequence(t, read)
	require.Len(t, read, objectGroups, "groups the page read")
	for seq := range uint64(objectGroups) {
		checkJSGroup(t, groups, seq)
	}
}

// jsGroupsBySequence indexes the groups the page read by their Group ID,
// asserting that none came twice, and logs their order of arrival.
func jsGroupsBySequence(t *testing.T, read []jsGroup) map[uint64]jsGroup {
	t.Helper()
	var order []uint64
	groups := map[uint64]jsGroup{}
	for _, g := range read {
		order = append(order, g.Sequence)
		_, dup := groups[g.Sequence]
		assert.False(t, dup, "group %d arrived twice", g.Sequence)
		groups[g.Sequence] = g
	}
	t.Logf("js: groups in the order they arrived: %v", order)
	return groups
}

// checkJSGroup asserts that groups holds group seq, ended by a FIN and
// holding objectPayload's objects in order, byte for byte.
func checkJSGroup(t *testing.T, groups map[uint64]jsGroup, seq uint64) {
	t.Helper()
	g, ok := groups[seq]
	if !assert.True(t, ok, "group %d is missing", seq) {
		return
	}
	assert.Nil(t, g.Error, "group %d did not end with a FIN", seq)
	if !assert.Len(t, g.Frames, objectsPerGroup, "objects in group %d", seq) {
		return
	}
	for o, f := range g.Frames {
		assert.Equal(t, uint64(o), f.Index, "group %d: object %d out of order", seq, o)
		want := hex.EncodeToString(objectPayload(seq, uint64(o)))
		assert.True(t, want == f.Payload, "group %d object %d: payload differs (%d hex digits, want %d)",
			seq, o, len(f.Payload), len(want))
	}
}

// testSubscribeObjects: the browser subscribes to a LocalTrack before
// anything is published, so that SUBSCRIBE_OK carries no LARGEST_OBJECT
// (which @moq/net 0.3.4 reads with a length prefix the spec does not
// have). Once the subscription is Established the server publishes
// objectGroups groups, each one subgroup stream of objectsPerGroup objects
// ending with a FIN, and the page reports each object it read.
func testSubscribeObjects(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "objects"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)

	type subscribe struct {
		params wire.Params
		ss     *moqt.ServedSubscription
		err    error
	}
	subscribed := make(chan subscribe, 1)
	handler := moqt.HandlerFunc(func(r moqt.Request) {
		sr, ok := r.(*moqt.SubscribeRequest)
		if !ok || !sr.Track.Equal(name) {
			moqt.DefaultHandler.ServeMOQT(r)
			return
		}
		ss, err := track.Accept(sr, moqt.AcceptOptions{})
		select {
		case subscribed <- subscribe{params: sr.Params, ss: ss, err: err}:
		default:
			t.Errorf("go: a second SUBSCRIBE for %s", name)
		}
	})

	received := h.signals.take("received")
	var sub subscribe       // set by onAccept
	var publishErrs []error // likewise
	var ended bool          // the server ended the track
	onAccept := func(s *moqt.Session) {
		select {
		case sub = <-subscribed:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		if sub.err != nil {
			return
		}
		// The subscription is Established: everything from here on passes
		// its filter (§9.20.10: StartGroup 1 with no Largest Object yet
		// starts at {0, 0}; so does 18's Largest Object filter, 18 §5.1.2).
		publishErrs = publishObjects(track)
		// Only once the page has every object does the track end: a
		// PUBLISH_DONE must not race the objects it follows.
		if _, ok := awaitOn(s, received); !ok {
			return
		}
		track.End(wire.DoneTrackEnded, "interop: track ended")
		ended = true
	}

	r := h.runScenario(t, scenario{
		name:      "subscribe-objects",
		namespace: "moqt-interop/objects",
		track:     "video",
		params:    map[string]any{"groups": objectGroups, "doneWaitMs": doneWait.Milliseconds()},
		cfg:       moqt.Config{Handler: handler},
		onAccept:  onAccept,
	})

	// The SUBSCRIBE @moq/net sent (ietf/subscribe.js joinFilter):
	// LOCATION_FILTER with StartGroup 1 alone, the current group, on
	// draft-20; on 18 the Largest Object filter type (0x2), which the codec
	// reads as draft-21's Next Object; FORWARD 1; no FILL_PARAMETERS and no
	// INCLUDE_PROPERTIES (it only sends the opt-out, and neither on 18).
	require.NotNil(t, r.session, "the server accepted no session")
	require.NotNil(t, sub.ss, "the server accepted no SUBSCRIBE: %v", sub.err)
	require.NoError(t, sub.err, "accepting the SUBSCRIBE")
	t.Logf("go: SUBSCRIBE parameters %+v", sub.params)
	wantFilter := wire.RelativeFilter(1)
	if h.draft.is18() {
		wantFilter = wire.NextObjectFilter()
	}
	assert.Equal(t, wire.Some(wantFilter), sub.params.LocationFilter, "LOCATION_FILTER")
	assert.Equal(t, wire.Some(true), sub.params.Forward, "FORWARD")
	assert.Nil(t, sub.params.FillParameters, "FILL_PARAMETERS")
	assert.False(t, sub.params.IncludeProperties.Set, "INCLUDE_PROPERTIES")
	assert.Empty(t, publishErrs, "the publisher's writes")

	// The browser's view: every group once, every object of each, byte for
	// byte and in order, and each group ended by a FIN.
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")
	checkJSGroups(t, r.js.Groups)

	// The end of the track: the server sent PUBLISH_DONE TRACK_ENDED and a
	// FIN on the request stream. @moq/net 0.3.4 never reads PUBLISH_DONE
	// (ietf/subscriber.js waits for its stream reader to close): the
	// unread message keeps the stream open, so the subscription is not
	// seen to end. The library still sends the spec's message.
	assert.True(t, ended, "the server did not end the track")
	assert.Error(t, sub.ss.Context().Err(), "the served subscription is still live")
	var de *moqt.DoneError
	if assert.ErrorAs(t, sub.ss.Err(), &de, "the served subscription's end") {
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
	}
	assert.False(t, r.js.SubscribeClosed, "@moq/net now notices PUBLISH_DONE (error %v): update the Interop section of README.md",
		r.js.SubscribeError)

	// Then the browser closed the session, without an error.
	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}

// testLargestObject: the browser subscribes to a track that already has
// objects, so SUBSCRIBE_OK must carry LARGEST_OBJECT (§9.20.18), a
// Location: two vi64s (§9.20). @moq/net 0.3.4 reads it with a length
// prefix first (ietf/parameters.js, "location"), so it cannot read the
// message. The library sends the spec's encoding regardless; this pins
// what then happens, and fails once @moq/net reads it.
func testLargestObject(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "largest"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	w := track.OpenSubgroup(0, 0, moqt.SubgroupOptions{EndOfGroup: true})
	for o := range uint64(3) {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 0, Object: o}, Payload: objectPayload(0, o)}))
	}
	require.NoError(t, w.Close())
	largest, ok := track.Largest()
	require.True(t, ok)
	require.Equal(t, wire.Location{Group: 0, Object: 2}, largest)

	handler, accepted := acceptOne(t, track)
	r := h.runScenario(t, scenario{
		name:      "subscribe-error", // subscribe, and report how the subscription ends
		namespace: "moqt-interop/largest",
		track:     "video",
		cfg:       moqt.Config{Handler: handler},
	})

	var ss *moqt.ServedSubscription
	select {
	case ss = <-accepted:
	default:
	}
	require.NotNil(t, ss, "the server accepted no SUBSCRIBE")
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.SubscribeClosed, "the subscription did not end: @moq/net now reads LARGEST_OBJECT? Update the Interop section of README.md")
	require.NotNil(t, r.js.SubscribeError, "the subscription ended without an error: @moq/net now reads LARGEST_OBJECT? Update the Interop section of README.md")
	t.Logf("js: @moq/net on a SUBSCRIBE_OK with LARGEST_OBJECT %v: %s", largest, *r.js.SubscribeError)
	// The parameter's value is 00 02: @moq/net takes the 00 (Group 0) for
	// a Length, and finds no bytes for the Location it expects inside.
	assert.Contains(t, *r.js.SubscribeError, "buffer is empty", "how @moq/net fails on LARGEST_OBJECT")

	// @moq/net then cancels the request (STOP_SENDING or a reset), which
	// ends the served subscription; the session survives, and the browser
	// closes it.
	select {
	case <-ss.Context().Done():
	case <-time.After(closeTimeout):
	}
	assert.Error(t, ss.Context().Err(), "the served subscription outlived the browser's cancel")
	t.Logf("go: the served subscription ended: %v", ss.Err())
	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}

// statusGroup is one group of object-status: how it is published and what
// @moq/net 0.3.4 makes of it.
type statusGroup struct {
	endOfGroup bool     // the subgroup's END_OF_GROUP flag (§11.3.1)
	objects    []string // payloads; "" is an empty Normal object
	endStatus  bool     // an End of Group status object follows them (§11.1.2)
	// want is the payloads @moq/net delivers, wantErr part of the error it
	// ends the group with ("" for a clean end).
	want    []string
	wantErr string
}

// statusGroups are object-status' groups. @moq/net reads a zero Payload
// Length's Object Status as moq-lite does (ietf/object.js Frame.decode):
// without END_OF_GROUP, Normal (0) ends the group, so the objects after an
// empty one are lost without an error; with it, the End of Group status is
// refused. The spec has an empty Normal object an object like any other,
// and End of Group valid in any subgroup (§11.1.2).
var statusGroups = []statusGroup{
	{endOfGroup: true, objects: []string{"a", "", "c"}, want: []string{"a", "", "c"}},
	{endOfGroup: false, objects: []string{"a", "", "c"}, want: []string{"a"}},
	{endOfGroup: false, objects: []string{"a", "b"}, endStatus: true, want: []string{"a", "b"}},
	{endOfGroup: true, objects: []string{"a", "b"}, endStatus: true, want: []string{"a", "b"}, wantErr: "Unsupported object status: 3"},
}

// testObjectStatus publishes statusGroups to the browser, as
// subscribe-objects does, and checks what @moq/net delivered of each.
func testObjectStatus(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "status"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	handler, accepted := acceptOne(t, track)
	received := h.signals.take("received")
	var publishErrs []error // set by onAccept
	onAccept := func(s *moqt.Session) {
		select {
		case <-accepted:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		for g, sg := range statusGroups {
			w := track.OpenSubgroup(uint64(g), 0, moqt.SubgroupOptions{EndOfGroup: sg.endOfGroup})
			for o, p := range sg.objects {
				if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: uint64(g), Object: uint64(o)}, Payload: []byte(p)}); err != nil {
					publishErrs = append(publishErrs, fmt.Errorf("group %d object %d: %w", g, o, err))
				}
			}
			if sg.endStatus {
				if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: uint64(g), Object: uint64(len(sg.objects))}, Status: wire.ObjectEndOfGroup}); err != nil {
					publishErrs = append(publishErrs, fmt.Errorf("group %d end: %w", g, err))
				}
			}
			if err := w.Close(); err != nil {
				publishErrs = append(publishErrs, fmt.Errorf("closing group %d: %w", g, err))
			}
		}
		select {
		case <-received:
		case <-s.Context().Done():
		case <-time.After(scenarioTimeout):
		}
	}
	r := h.runScenario(t, scenario{
		name:      "subscribe-objects",
		namespace: "moqt-interop/status",
		track:     "video",
		params:    map[string]any{"groups": len(statusGroups), "doneWaitMs": 0},
		cfg:       moqt.Config{Handler: handler},
		onAccept:  onAccept,
	})

	assert.Empty(t, publishErrs, "the publisher's writes")
	assert.Nil(t, r.js.Error, "js error")
	got := map[uint64]jsGroup{}
	for _, g := range r.js.Groups {
		got[g.Sequence] = g
	}
	require.Len(t, got, len(statusGroups), "groups the page read")
	for seq, sg := range statusGroups {
		g := got[uint64(seq)]
		var payloads []string
		for _, f := range g.Frames {
			b, err := hex.DecodeString(f.Payload)
			require.NoError(t, err)
			payloads = append(payloads, string(b))
		}
		assert.Equal(t, sg.want, payloads, "group %d (END_OF_GROUP %v, objects %q, End of Group status %v): what @moq/net delivered",
			seq, sg.endOfGroup, sg.objects, sg.endStatus)
		if sg.wantErr == "" {
			assert.Nil(t, g.Error, "group %d: @moq/net ended it with an error", seq)
		} else if assert.NotNil(t, g.Error, "group %d: @moq/net ended it cleanly", seq) {
			assert.Contains(t, *g.Error, sg.wantErr, "group %d: how @moq/net ended it", seq)
		}
	}
}

// acceptOne serves track's SUBSCRIBE with track.Accept and hands over the
// served subscription; anything else gets the default answer.
func acceptOne(t *testing.T, track *moqt.LocalTrack) (moqt.Handler, <-chan *moqt.ServedSubscription) {
	accepted := make(chan *moqt.ServedSubscription, 1)
	return moqt.HandlerFunc(func(r moqt.Request) {
		sr, ok := r.(*moqt.SubscribeRequest)
		if !ok || !sr.Track.Equal(track.Name()) {
			moqt.DefaultHandler.ServeMOQT(r)
			return
		}
		ss, err := track.Accept(sr, moqt.AcceptOptions{})
		if err != nil {
			t.Errorf("go: accepting the SUBSCRIBE: %v", err)
			return
		}
		accepted <- ss
	}), accepted
}
