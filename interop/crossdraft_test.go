package interop

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// testBrowserToBrowser: one browser, held to pubDraft, publishes a
// broadcast through one relay.Relay, which accepts both drafts; another,
// held to subDraft, discovers it (SUBSCRIBE_NAMESPACE, NAMESPACE) and
// subscribes. The relay subscribes upstream on the publisher's draft and
// serves the subscriber on its own: every object must arrive once, in
// order, byte for byte.
func testBrowserToBrowser(t *testing.T, h *harness, pubDraft, subDraft draft) {
	requested := h.signals.take("requested")
	received := h.signals.take("received")
	withdrawn := h.signals.take("withdrawn")
	openPublish := h.signals.gate("publish")
	openReceived := h.signals.gate("received")
	openClose := h.signals.gate("close")
	metrics := newAnswered()

	// The pages' steps, in order: the publisher writes once the relay has
	// subscribed upstream (its SUBSCRIBE reached the page) and answered the
	// subscriber, so that neither SUBSCRIBE_OK carries LARGEST_OBJECT, which
	// @moq/net misreads; it ends its track once the subscriber has every
	// object, and closes once it has withdrawn the broadcast.
	var failed error
	steps := make(chan struct{})
	coordinate := func() {
		defer close(steps)
		defer openClose()
		defer openReceived()
		defer openPublish()
		wait := func(c <-chan struct{}, what string) bool {
			select {
			case <-c:
				return true
			case <-time.After(scenarioTimeout):
				failed = errors.New(what)
				return false
			}
		}
		if !wait(requested, "the relay's SUBSCRIBE never reached the publishing page") ||
			!wait(metrics.subscribed, "the relay never answered the subscribing page") {
			return
		}
		openPublish()
		if !wait(received, "the subscribing page did not get every group") {
			return
		}
		openReceived()
		if wait(withdrawn, "the publishing page did not withdraw its broadcast") {
			openClose()
		}
	}

	pubPath, subPath := serverPath+"/publisher", serverPath+"/subscriber"
	runs := h.runPages(t, scenario{
		pages: []page{
			{name: "publish-broadcast", namespace: "moqt-interop/browser", track: "video", path: pubPath, held: &pubDraft,
				params: map[string]any{"groups": objectGroups}},
			{name: "subscribe-objects", namespace: "moqt-interop/browser", track: "video", path: subPath, held: &subDraft,
				params: map[string]any{"groups": objectGroups, "doneWaitMs": 0, "prefix": []string{"moqt-interop"}}},
		},
		cfg:      moqt.Config{Handler: newRelay(t, metrics), Versions: []wire.Version{pubDraft.version, subDraft.version}},
		onListen: func(string, [32]byte) { go coordinate() },
		beforeClose: func(*run) {
			select {
			case <-steps:
			case <-time.After(closeTimeout):
				failed = errors.Join(failed, errors.New("the steps did not end"))
			}
		},
	})
	pub, sub := runs[0], runs[1]
	require.NoError(t, failed)

	// Each side on its own draft (runPages checks both ends of each
	// session against the draft the browser was held to).
	require.NotNil(t, pub.session, "the relay accepted no session from the publishing browser")
	require.NotNil(t, sub.session, "the relay accepted no session from the subscribing browser")
	t.Logf("go: the publishing browser on %s, the subscribing one on %s", pub.session.Version(), sub.session.Version())

	// The publisher's view: the relay's SUBSCRIBE for its track.
	assert.Nil(t, pub.js.Error, "js error (publisher)")
	assert.True(t, pub.js.Established, "@moq/net did not establish the publisher's session")
	assert.Equal(t, []string{"video"}, pub.js.RequestedTracks, "the tracks the relay asked the publishing browser for")
	assert.Equal(t, objectGroups, pub.js.Published, "groups the publishing page wrote")

	// The subscriber's view: the namespace, then every object once, in
	// order, byte for byte, each group ended by a FIN.
	assert.Nil(t, sub.js.Error, "js error (subscriber)")
	assert.True(t, sub.js.Established, "@moq/net did not establish the subscriber's session")
	assert.Contains(t, sub.js.Announced, jsAnnounce{Path: "browser", Active: true}, "the namespaces the subscribing browser discovered")
	checkJSGroups(t, sub.js.Groups)

	for _, r := range runs {
		var se *moqt.SessionError
		if assert.ErrorAs(t, r.closed, &se, "how %s's session ended", r.session.Path()) {
			assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
			assert.Equal(t, wire.NoError, se.Code, "session close code: %v", se)
		}
	}
}
