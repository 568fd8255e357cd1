package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// SETUP against the library's Dial and Server, over Pipes in synctest
// bubbles (server_pipe_test.go): the URL's path and authority in SETUP or
// in the CONNECT request, the Server's checks of a client's SETUP
// (ServerOptions.CheckSetup, tokens), control streams. The session's own
// SETUP rules are in conformance_setup_test.go.

func TestSetupLibraryServerSendsNoPathOrAuthority(t *testing.T) {
	inBubble(t, func(t *testing.T) {
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
	})
}

func TestSetupLibraryClientSendsPathAndAuthority(t *testing.T) {
	for _, tc := range []struct {
		name, scheme string
		wt           bool
	}{{"pipe/quic", "moqt", false}, {"pipe/webtransport", "https", true}} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				fs := startFakeServer(t)
				fp, dial := fs.dialLib(tc.scheme, nil)
				st := fp.readPeerSetup()
				if tc.wt {
					// Over WebTransport the URI travels in the CONNECT request.
					assert.False(t, st.Path.Set)
					assert.False(t, st.Authority.Set)
				} else {
					assert.Equal(t, "/live?x=1", st.Path.Value)
					assert.Equal(t, pipeAuthority, st.Authority.Value)
				}
				fp.sendSetup(&wire.Setup{})
				s, err := dial.wait()
				require.NoError(t, err)
				assert.True(t, s.isClient)
			})
		})
	}
}

// Unknown Setup Options are ignored and may repeat (§9.1).
func TestSetupUnknownOptionsIgnored(t *testing.T) {
	inBubble(t, func(t *testing.T) {
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
	})
}

// PATH and AUTHORITY (§9.1.1, §9.1.2).
func TestSetupPathAndAuthorityRules(t *testing.T) {
	t.Run("server sends PATH", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("server sends AUTHORITY", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			fs := startFakeServer(t)
			fp, dial := fs.dialLib("moqt", nil)
			fp.readPeerSetup()
			fp.sendSetup(&wire.Setup{Authority: wire.Some("example.com")})
			_, err := dial.wait()
			require.Error(t, err)
			fp.expectClose(wire.InvalidAuthority)
		})
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
			inBubble(t, func(t *testing.T) {
				ls := startLibServer(t, nil, nil)
				fp := ls.dial(tc.scheme)
				fp.sendSetup(&tc.setup)
				fp.expectClose(tc.code)
			})
		})
	}
	t.Run("server does not serve the PATH", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
			inBubble(t, func(t *testing.T) {
				ls := startLibServer(t, nil, nil)
				fp := ls.dial("moqt")
				str := fp.openControl()
				_, err := str.Write(frame(tc.typ, []byte{0}))
				require.NoError(t, err)
				fp.expectClose(wire.ProtocolViolation)
			})
		})
	}
}

// Each endpoint opens exactly one control stream (§6.3).
func TestSetupSecondControlStream(t *testing.T) {
	t.Run("both before the session is up", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			ls := startLibServer(t, nil, nil)
			fp := ls.dial("moqt")
			fp.sendSetup(ls.clientSetup())
			fp.writeTo(fp.openControl(), ls.clientSetup())
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("after the session is up", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			fp.alive(0)
			fp.writeTo(fp.openControl(), &wire.Setup{})
			fp.expectClose(wire.ProtocolViolation)
			expectSessionError(t, s, wire.ProtocolViolation)
		})
	})
}

// A control stream must stay open for the whole session (§6.3).
func TestSetupControlStreamClosed(t *testing.T) {
	t.Run("FIN", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			require.NoError(t, fp.ctrl.Close())
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("RESET_STREAM", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.ctrl.CancelWrite(uint64(wire.ResetInternalError))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("FIN right after SETUP", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			ls := startLibServer(t, nil, nil)
			fp := ls.dial("moqt")
			fp.sendSetup(ls.clientSetup())
			require.NoError(t, fp.ctrl.Close())
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("STOP_SENDING on the library's control stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			fp.peerCtrlStr.CancelRead(uint64(wire.ResetCancelled))
			fp.expectClose(wire.ProtocolViolation)
			expectSessionError(t, s, wire.ProtocolViolation)
		})
	})
	t.Run("library client, server resets", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			fp.ctrl.CancelWrite(uint64(wire.ResetCancelled))
			fp.expectClose(wire.ProtocolViolation)
			expectSessionError(t, s, wire.ProtocolViolation)
		})
	})
}

// An endpoint may pipeline requests right after its SETUP (§9.1).
func TestSetupPipelinedRequest(t *testing.T) {
	inBubble(t, func(t *testing.T) {
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
	})
}

// Request streams that arrive before the peer's control stream wait in
// their stream's flow-control window, bounded by the QUIC stream limit, and
// are served once SETUP arrives (§6.3).
func TestSetupRequestBeforeControlStream(t *testing.T) {
	inBubble(t, func(t *testing.T) {
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
	})
}

func TestAuthTokenMaxCacheSizeSent(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ls := startLibServer(t, nil, nil)
		fp := ls.dial("moqt")
		fp.sendSetup(ls.clientSetup())
		assert.False(t, fp.readPeerSetup().MaxAuthTokenCacheSize.Set, "the default 0 is not sent")

		ls = startLibServer(t, &Config{MaxAuthTokenCacheSize: 4096}, nil)
		fp = ls.dial("moqt")
		fp.sendSetup(ls.clientSetup())
		assert.Equal(t, wire.Some[uint64](4096), fp.readPeerSetup().MaxAuthTokenCacheSize)
	})
}

// The session errors of §8.9 and §9.1.4, with the library as the server.
// Every request but the last is answered before the next is sent, so the
// library processes them in order.
func TestAuthTokenSessionErrors(t *testing.T) {
	five := "12345" // 21 bytes in the cache
	for _, tc := range []struct {
		name     string
		limit    uint64
		setup    []wire.Token
		requests [][]wire.Token
		code     wire.SessionErrorCode
	}{
		{"REGISTER of a registered alias", 100, nil, [][]wire.Token{{tokReg(1, "a")}, {tokReg(1, "b")}}, wire.DuplicateAuthTokenAlias},
		{"REGISTER of an alias SETUP registered", 100, toks(tokReg(1, "a")), [][]wire.Token{{tokReg(1, "b")}}, wire.DuplicateAuthTokenAlias},
		{"REGISTER past MAX_AUTH_TOKEN_CACHE_SIZE", 20, nil, [][]wire.Token{{tokReg(1, five)}}, wire.AuthTokenCacheOverflow},
		{"REGISTER without MAX_AUTH_TOKEN_CACHE_SIZE", 0, nil, [][]wire.Token{{tokReg(1, "")}}, wire.AuthTokenCacheOverflow},
		{"second REGISTER past the limit", 40, nil, [][]wire.Token{{tokReg(1, five)}, {tokReg(2, five)}}, wire.AuthTokenCacheOverflow},
		{"USE_ALIAS of an unknown alias", 100, nil, [][]wire.Token{{tokUse(1)}}, wire.UnknownAuthTokenAlias},
		{"DELETE of an unknown alias", 100, nil, [][]wire.Token{{tokDel(1)}}, wire.UnknownAuthTokenAlias},
		{"USE_ALIAS after DELETE", 100, nil, [][]wire.Token{{tokReg(1, "a")}, {tokDel(1)}, {tokUse(1)}}, wire.UnknownAuthTokenAlias},
		{"USE_ALIAS of a SETUP REGISTER that did not fit", 20, toks(tokReg(1, five)), [][]wire.Token{{tokUse(1)}}, wire.UnknownAuthTokenAlias},
		{"SETUP registers an alias twice", 100, toks(tokReg(1, "a"), tokReg(1, "b")), nil, wire.DuplicateAuthTokenAlias},
		{"SETUP from the client with DELETE", 100, toks(tokReg(1, "a"), tokDel(1)), nil, wire.ProtocolViolation},
		{"SETUP from the client with USE_ALIAS", 100, toks(tokUse(1)), nil, wire.ProtocolViolation},
		{"SETUP repeats a token", 100, toks(tokVal("a"), tokVal("a")), nil, wire.MalformedAuthToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				ls := startLibServer(t, &Config{MaxAuthTokenCacheSize: tc.limit}, nil)
				fp := ls.dial("moqt")
				st := ls.clientSetup()
				st.AuthorizationTokens = tc.setup
				fp.sendSetup(st)
				for i, req := range tc.requests {
					fs := fp.subscribeWith(uint64(2*i), req...)
					if i < len(tc.requests)-1 {
						assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
					}
				}
				fp.expectClose(tc.code)
			})
		})
	}
}

// The library as the client: the server's SETUP is resolved like any
// message, its aliases in their own space (§8.9, §9.1.4).
func TestAuthTokenServerSetup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit uint64
		setup []wire.Token
		code  wire.SessionErrorCode
	}{
		{"USE_ALIAS of nothing", 100, toks(tokUse(1)), wire.UnknownAuthTokenAlias},
		{"DELETE of nothing", 100, toks(tokDel(1)), wire.UnknownAuthTokenAlias},
		{"USE_ALIAS of a REGISTER that did not fit", 20, toks(tokReg(1, "12345"), tokUse(1)), wire.UnknownAuthTokenAlias},
		{"REGISTER then USE_ALIAS repeats the token", 100, toks(tokReg(1, "a"), tokUse(1)), wire.MalformedAuthToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				fs := startFakeServer(t)
				fp, dial := fs.dialLib("moqt", &Config{MaxAuthTokenCacheSize: tc.limit})
				fp.readPeerSetup()
				fp.sendSetup(&wire.Setup{AuthorizationTokens: tc.setup})
				_, err := dial.wait()
				var se *SessionError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, tc.code, se.Code)
				fp.expectClose(tc.code)
			})
		})
	}
	t.Run("REGISTER and DELETE in one SETUP", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			fs := startFakeServer(t)
			fp, dial := fs.dialLib("moqt", &Config{MaxAuthTokenCacheSize: 100})
			fp.readPeerSetup()
			fp.sendSetup(&wire.Setup{AuthorizationTokens: toks(tokReg(1, "a"), tokDel(1), tokVal("b"))})
			s, err := dial.wait()
			require.NoError(t, err)
			assert.Equal(t, []string{"a@1", "b"}, tokStrings(s.PeerAuthorizationTokens()))
		})
	})
}

// Dial and Listen refuse SETUP tokens the peer could not take (§9.1.4).
func TestAuthTokenSetupConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		toks []wire.Token
	}{
		{"DELETE", toks(tokDel(1))},
		{"USE_ALIAS", toks(tokReg(1, "a"), tokUse(1))},
		{"alias registered twice", toks(tokReg(1, "a"), tokReg(1, "b"))},
		{"repeated token", toks(tokVal("a"), tokVal("a"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(fakeCtx(t), "moqt://127.0.0.1:1/live", quietConfig(&Config{AuthorizationTokens: tc.toks}))
			assert.ErrorIs(t, err, ErrAuthToken)
			_, err = Listen("127.0.0.1:0", withServerTLS(quietConfig(&Config{AuthorizationTokens: tc.toks})), nil)
			assert.ErrorIs(t, err, ErrAuthToken)
		})
	}
}
