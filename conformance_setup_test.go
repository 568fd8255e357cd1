package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Session setup and the control streams (§6.3, §9.1, §9.2).

func TestSetupLibraryServerSendsNoPathOrAuthority(t *testing.T) {
	ls := startLibServer(t, nil, nil)
	fp := ls.dial("moqt")
	fp.sendSetup(ls.clientSetup())
	s := ls.accept()
	st := fp.readPeerSetup()
	// A server must not send PATH or AUTHORITY (§9.1.1, §9.1.2).
	assert.False(t, st.Path.Set)
	assert.False(t, st.Authority.Set)
	assert.Equal(t, "moqt-go", st.MoqtImplementation.Value)
	assert.Equal(t, "/live", s.Path())
	assert.Equal(t, ls.srv.Addr().String(), s.Authority())
	assert.False(t, s.isClient)
}

func TestSetupLibraryClientSendsPathAndAuthority(t *testing.T) {
	for _, tc := range []struct {
		scheme string
		wt     bool
	}{{"moqt", false}, {"https", true}} {
		t.Run(tc.scheme, func(t *testing.T) {
			fs := startFakeServer(t)
			fp, dial := fs.dialLib(tc.scheme, nil)
			st := fp.readPeerSetup()
			if tc.wt {
				// Over WebTransport the URI travels in the CONNECT request.
				assert.False(t, st.Path.Set)
				assert.False(t, st.Authority.Set)
			} else {
				assert.Equal(t, "/live?x=1", st.Path.Value)
				assert.Equal(t, fs.ln.Addr().String(), st.Authority.Value)
			}
			fp.sendSetup(&wire.Setup{})
			s, err := dial.wait()
			require.NoError(t, err)
			assert.True(t, s.isClient)
		})
	}
}

// Unknown Setup Options are ignored and may repeat (§9.1).
func TestSetupUnknownOptionsIgnored(t *testing.T) {
	ls := startLibServer(t, nil, nil)
	fp := ls.dial("moqt")
	st := ls.clientSetup()
	st.Unknown = wire.KVList{
		{Type: 0x0A, Value: 1},
		{Type: 0x0A, Value: 2}, // a duplicate of an unknown option
		{Type: 0x0B, Bytes: []byte("opaque")},
		{Type: 0x9D, Value: 7}, // grease
		{Type: 0x9D, Value: 8},
	}
	fp.sendSetup(st)
	s := ls.accept()
	fp.readPeerSetup()
	assert.Len(t, s.PeerSetup().Unknown, 5)
	fp.alive(0)
	assert.NoError(t, s.Context().Err())
}

// PATH and AUTHORITY (§9.1.1, §9.1.2).
func TestSetupPathAndAuthorityRules(t *testing.T) {
	t.Run("server sends PATH", func(t *testing.T) {
		fs := startFakeServer(t)
		fp, dial := fs.dialLib("moqt", nil)
		fp.readPeerSetup()
		fp.sendSetup(&wire.Setup{Path: wire.Some("/x")})
		_, err := dial.wait()
		var se *SessionError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.InvalidPath, se.Code)
		fp.expectClose(wire.InvalidPath)
	})
	t.Run("server sends AUTHORITY", func(t *testing.T) {
		fs := startFakeServer(t)
		fp, dial := fs.dialLib("moqt", nil)
		fp.readPeerSetup()
		fp.sendSetup(&wire.Setup{Authority: wire.Some("example.com")})
		_, err := dial.wait()
		require.Error(t, err)
		fp.expectClose(wire.InvalidAuthority)
	})
	for _, tc := range []struct {
		name   string
		scheme string
		setup  wire.Setup
		code   wire.SessionErrorCode
	}{
		{"PATH over WebTransport", "https", wire.Setup{Path: wire.Some("/live")}, wire.InvalidPath},
		{"AUTHORITY over WebTransport", "https", wire.Setup{Authority: wire.Some("127.0.0.1")}, wire.InvalidAuthority},
		{"PATH without leading slash", "moqt", wire.Setup{Path: wire.Some("live")}, wire.MalformedPath},
		{"PATH with a space", "moqt", wire.Setup{Path: wire.Some("/a b")}, wire.MalformedPath},
		{"empty AUTHORITY", "moqt", wire.Setup{Authority: wire.Some("")}, wire.MalformedAuthority},
		{"AUTHORITY with open IPv6 literal", "moqt", wire.Setup{Authority: wire.Some("[::1")}, wire.MalformedAuthority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := startLibServer(t, nil, nil)
			fp := ls.dial(tc.scheme)
			fp.sendSetup(&tc.setup)
			fp.expectClose(tc.code)
		})
	}
	t.Run("server does not serve the PATH", func(t *testing.T) {
		ls := startLibServer(t, nil, &ServerOptions{CheckSetup: func(s *Session, st *wire.Setup) error {
			if s.Path() != "/live" {
				return &SessionError{Code: wire.InvalidPath, Reason: "no such path"}
			}
			return nil
		}})
		fp := ls.dial("moqt")
		fp.sendSetup(&wire.Setup{Path: wire.Some("/other")})
		ce := fp.expectClose(wire.InvalidPath)
		assert.Equal(t, "no such path", ce.Reason)
	})
}

// A unidirectional stream whose type is not 0x2F00 is not a control
// stream, so a "control stream" that starts with another message is read
// as a stream of that type: unknown ones close the session (§6.4.1).
func TestSetupControlStreamStartsWithOtherMessage(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  wire.MessageType
	}{
		{"SUBSCRIBE", wire.MsgSubscribe},
		{"REQUEST_OK", wire.MsgRequestOK},
		{"PUBLISH_STATE_NOTIFY", wire.MsgPublishStateNotify},
		{"CLIENT_SETUP of draft 16", 0x20},
		{"CLIENT_SETUP of draft 10", 0x40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := startLibServer(t, nil, nil)
			fp := ls.dial("moqt")
			str := fp.openControl()
			_, err := str.Write(frame(tc.typ, []byte{0}))
			require.NoError(t, err)
			fp.expectClose(wire.ProtocolViolation)
		})
	}
}

// Each endpoint opens exactly one control stream (§6.3).
func TestSetupSecondControlStream(t *testing.T) {
	t.Run("both before the session is up", func(t *testing.T) {
		ls := startLibServer(t, nil, nil)
		fp := ls.dial("moqt")
		fp.sendSetup(ls.clientSetup())
		fp.writeTo(fp.openControl(), ls.clientSetup())
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("after the session is up", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		fp.alive(0)
		fp.writeTo(fp.openControl(), &wire.Setup{})
		fp.expectClose(wire.ProtocolViolation)
		expectSessionError(t, s, wire.ProtocolViolation)
	})
}

// After SETUP only GOAWAY may appear on the control stream (§9, Table 5).
func TestSetupOnlyGoawayOnControlStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  func(t *testing.T) []byte
	}{
		{"SUBSCRIBE", func(t *testing.T) []byte {
			b, err := wire.AppendMessage(wire.Draft21, nil, subscribeMsg(0, trackA, wire.Params{}))
			require.NoError(t, err)
			return b
		}},
		{"second SETUP", func(t *testing.T) []byte {
			b, err := wire.AppendMessage(wire.Draft21, nil, &wire.Setup{})
			require.NoError(t, err)
			return b
		}},
		{"unknown message type", func(*testing.T) []byte { return frame(0x3F, nil) }},
		{"reserved PUBLISH_OK of draft 17", func(*testing.T) []byte { return frame(0x1E, nil) }},
		{"length larger than the body", func(*testing.T) []byte { return frame(wire.MsgGoaway, []byte{0, 0})[:4] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := serverSession(t, nil)
				fp.ctrlMu.Lock()
				_, err := fp.ctrl.Write(tc.raw(t))
				fp.ctrlMu.Unlock()
				require.NoError(t, err)
				if tc.name == "length larger than the body" {
					// The body never completes until the stream ends.
					require.NoError(t, fp.ctrl.Close())
				}
				fp.expectClose(wire.ProtocolViolation)
				expectSessionError(t, s, wire.ProtocolViolation)
			})
		})
	}
}

// A control stream must stay open for the whole session (§6.3).
func TestSetupControlStreamClosed(t *testing.T) {
	t.Run("FIN", func(t *testing.T) {
		_, fp := serverSession(t, nil)
		require.NoError(t, fp.ctrl.Close())
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("RESET_STREAM", func(t *testing.T) {
		_, fp := serverSession(t, nil)
		fp.ctrl.CancelWrite(uint64(wire.ResetInternalError))
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("FIN right after SETUP", func(t *testing.T) {
		ls := startLibServer(t, nil, nil)
		fp := ls.dial("moqt")
		fp.sendSetup(ls.clientSetup())
		require.NoError(t, fp.ctrl.Close())
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("STOP_SENDING on the library's control stream", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		fp.peerCtrlStr.CancelRead(uint64(wire.ResetCancelled))
		fp.expectClose(wire.ProtocolViolation)
		expectSessionError(t, s, wire.ProtocolViolation)
	})
	t.Run("library client, server resets", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		fp.ctrl.CancelWrite(uint64(wire.ResetCancelled))
		fp.expectClose(wire.ProtocolViolation)
		expectSessionError(t, s, wire.ProtocolViolation)
	})
}

// No SETUP within Config.SetupTimeout closes with CONTROL_MESSAGE_TIMEOUT.
func TestSetupTimeout(t *testing.T) {
	cfg := func() *Config { return &Config{SetupTimeout: 100 * time.Millisecond} }
	t.Run("no control stream", func(t *testing.T) {
		ls := startLibServer(t, cfg(), nil)
		fp := ls.dial("moqt")
		fp.expectClose(wire.ControlMessageTimeout)
	})
	t.Run("SETUP never completes", func(t *testing.T) {
		ls := startLibServer(t, cfg(), nil)
		fp := ls.dial("moqt")
		str := fp.openControl()
		_, err := str.Write([]byte{0xAF, 0x00, 0x00}) // type and half a length
		require.NoError(t, err)
		fp.expectClose(wire.ControlMessageTimeout)
	})
	// The same on the bubble's clock, to the millisecond.
	t.Run("pipe/no control stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			start := time.Now()
			_, fp, served := pipeServerAccept(t, transport.PipeConfig{}, cfg())
			fp.expectClose(wire.ControlMessageTimeout)
			assert.Equal(t, 100*time.Millisecond, time.Since(start))
			var se *SessionError
			require.ErrorAs(t, <-served, &se)
			assert.Equal(t, wire.ControlMessageTimeout, se.Code)
		})
	})
	t.Run("pipe/SETUP never completes", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			start := time.Now()
			_, fp, _ := pipeServerAccept(t, transport.PipeConfig{}, cfg())
			_, err := fp.openControl().Write([]byte{0xAF, 0x00, 0x00}) // type and half a length
			require.NoError(t, err)
			fp.expectClose(wire.ControlMessageTimeout)
			assert.Equal(t, 100*time.Millisecond, time.Since(start))
		})
	})
	t.Run("pipe/library client", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			start := time.Now()
			_, fp, dialed := pipeClientDial(t, transport.PipeConfig{}, cfg())
			fp.readPeerSetup()
			var se *SessionError
			require.ErrorAs(t, recvOrFail(t, dialed), &se)
			assert.Equal(t, wire.ControlMessageTimeout, se.Code)
			fp.expectClose(wire.ControlMessageTimeout)
			assert.Equal(t, 100*time.Millisecond, time.Since(start))
		})
	})
	t.Run("library client", func(t *testing.T) {
		fs := startFakeServer(t)
		fp, dial := fs.dialLib("moqt", cfg())
		fp.readPeerSetup()
		_, err := dial.wait()
		var se *SessionError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.ControlMessageTimeout, se.Code)
		fp.expectClose(wire.ControlMessageTimeout)
	})
}

// An endpoint may pipeline requests right after its SETUP (§9.1).
func TestSetupPipelinedRequest(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	ls := startLibServer(t, &Config{Handler: h}, nil)
	fp := ls.dial("moqt")
	fp.sendSetup(ls.clientSetup())
	// Before reading anything from the library.
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	ls.accept()
	expect[*wire.SubscribeOK](fs)
	ss := recvOrFail(t, served)
	assert.Equal(t, uint64(0), ss.requestID())
}

// Request streams that arrive before the peer's control stream wait in
// their stream's flow-control window, bounded by the QUIC stream limit, and
// are served once SETUP arrives (§6.3).
func TestSetupRequestBeforeControlStream(t *testing.T) {
	const n = 3
	waiting := make(chan struct{}, n)
	h, served := servedCh(AcceptOptions{})
	cfg := &Config{Handler: h, hooks: &sessionHooks{requestWaitsForSetup: func() { waiting <- struct{}{} }}}
	ls := startLibServer(t, cfg, nil)
	fp := ls.dial("moqt")
	var streams []*fakeStream
	for i := range n {
		streams = append(streams, fp.open(subscribeMsg(uint64(2*i), trackA, wire.Params{})))
	}
	for range n {
		recvOrFail(t, waiting)
	}
	fp.sendSetup(ls.clientSetup())
	ls.accept()
	for _, fs := range streams {
		expect[*wire.SubscribeOK](fs)
	}
	ids := map[uint64]bool{}
	for range n {
		ids[recvOrFail(t, served).requestID()] = true
	}
	assert.Equal(t, map[uint64]bool{0: true, 2: true, 4: true}, ids)
}
