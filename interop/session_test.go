package interop

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// testSetupOnly: the SETUP exchange and a clean close by the server.
func testSetupOnly(t *testing.T, h *harness) {
	// Once the SETUPs are exchanged the server ends the session; the
	// browser waits for that, so its SETUP is sure to have arrived. The
	// server waits in turn for the page to say it has read the
	// server's SETUP: a close can discard stream data not yet read.
	established := h.signals.take("established")
	r := h.runScenario(t, scenario{name: "setup-only", onAccept: func(s *moqt.Session) {
		select {
		case <-established:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
		}
		_ = s.CloseWithError(wire.NoError, "interop: setup done")
	}})

	// The browser's view.
	assert.True(t, r.js.WebTransportSupported, "WebTransport is missing in the page")
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")
	assert.Equal(t, h.draft.moqNet, r.js.Version, "@moq/net's Connection.version")
	assert.Equal(t, "webtransport", r.js.Transport)

	// The server's view.
	require.NotNil(t, r.session, "the server accepted no session")
	assert.True(t, r.session.WebTransport())
	assert.Equal(t, h.draft.version, r.session.Version(), "the only version the server offers")
	assert.Equal(t, serverPath, r.session.Path())
	peer := r.session.PeerSetup()
	require.NotNil(t, peer)
	assert.Equal(t, wire.Some(moqNetImplementation), peer.MoqtImplementation)
	assert.False(t, peer.Path.Set, "PATH must not be sent over WebTransport")
	assert.False(t, peer.Authority.Set, "AUTHORITY must not be sent over WebTransport")
	for _, kv := range peer.Unknown {
		t.Logf("go: peer sent Setup Option 0x%x (not in %s, ignored): value %d, bytes %x", kv.Type, h.draft.version, kv.Value, kv.Bytes)
	}

	// The server closed the session with NO_ERROR, and the browser saw
	// a clean close (WT_CLOSE_SESSION), not an abrupt one.
	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.False(t, se.Remote, "the server should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
	assert.True(t, r.js.ClosedCleanly, "the browser did not see a clean close")
	assert.Nil(t, r.js.CloseError, "the browser saw an abrupt close")
}

// testSubscribeError: a SUBSCRIBE for a track the server does not have,
// refused with REQUEST_ERROR.
func testSubscribeError(t *testing.T, h *harness) {
	type seen struct {
		track []string
	}
	var mu sync.Mutex
	var subscribes []seen
	handler := moqt.HandlerFunc(func(r moqt.Request) {
		if sr, ok := r.(*moqt.SubscribeRequest); ok {
			var track []string
			for _, f := range sr.Track.Namespace {
				track = append(track, string(f))
			}
			mu.Lock()
			subscribes = append(subscribes, seen{track: append(track, string(sr.Track.Name))})
			mu.Unlock()
			t.Logf("go: SUBSCRIBE for %s %q, parameters %+v", sr.Track.Namespace, sr.Track.Name, sr.Params)
		}
		moqt.DefaultHandler.ServeMOQT(r)
	})
	r := h.runScenario(t, scenario{name: "subscribe-error", cfg: moqt.Config{Handler: handler}})

	// The browser's view: the subscription ended with REQUEST_ERROR
	// DOES_NOT_EXIST (0x10) and our reason.
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")
	assert.True(t, r.js.SubscribeClosed, "the subscription did not end")
	require.NotNil(t, r.js.SubscribeError, "the subscription ended without an error")
	assert.Contains(t, *r.js.SubscribeError, "SUBSCRIBE error: code=16 reason=no such track")

	// The server's view: one SUBSCRIBE for that track, with the
	// client's first Request ID.
	require.NotNil(t, r.session, "the server accepted no session")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, subscribes, 1, "SUBSCRIBEs the server saw")
	// The session checked its Request ID (a client's parity, never
	// reused); a bad one would have closed the session, not reached
	// the Handler.
	assert.Equal(t, []string{"moqt-interop", "missing", "video"}, subscribes[0].track)

	// The browser then closed the session, without an error.
	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}
