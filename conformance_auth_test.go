package moqt

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Authorization tokens and their aliases (§8.9, §9.1.3, §9.1.4, §9.20.3).

// tokenCall is what a handler saw of one request.
type tokenCall struct {
	id     uint64
	tokens []AuthToken
	params []wire.Token // the request's Params.AuthorizationTokens
}

// tokenHandler hands every request's tokens over, then answers it with
// answer, or rejects it with DOES_NOT_EXIST when answer is nil.
func tokenHandler(answer func(Request)) (Handler, <-chan tokenCall) {
	ch := make(chan tokenCall, 16)
	return HandlerFunc(func(r Request) {
		var params wire.Params
		switch r := r.(type) {
		case *SubscribeRequest:
			params = r.Params
		case *TrackStatusRequest:
			params = r.Params
		case *PublishRequest:
			params = r.Params
		}
		ch <- tokenCall{id: r.base().requestID(), tokens: r.AuthorizationTokens(), params: params.AuthorizationTokens}
		if answer != nil {
			answer(r)
			return
		}
		_ = r.Reject(wire.ReqDoesNotExist, "")
	}), ch
}

// authServer starts a library server with cfg and connects a fake client
// whose SETUP carries setupToks.
func authServer(t *testing.T, cfg *Config, setupToks []wire.Token) (*Session, *fakePeer) {
	t.Helper()
	ls := startLibServer(t, cfg, nil)
	fp := ls.dial("moqt")
	st := ls.clientSetup()
	st.AuthorizationTokens = setupToks
	fp.sendSetup(st)
	s := ls.accept()
	fp.readPeerSetup()
	return s, fp
}

// subscribeWith opens a SUBSCRIBE carrying toks.
func (fp *fakePeer) subscribeWith(id uint64, toks ...wire.Token) *fakeStream {
	return fp.open(subscribeMsg(id, trackA, wire.Params{AuthorizationTokens: toks}))
}

// A SUBSCRIBE written byte by byte: one AUTHORIZATION_TOKEN parameter
// (0x03), 2 bytes long, USE_ALIAS (02) of alias 5.
func TestAuthTokenUnknownAliasRawBytes(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		_, fp := authServer(t, &Config{MaxAuthTokenCacheSize: 100}, nil)
		fs := fp.openStream()
		fs.sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, 0, trackA, 0x01, 0x03, 0x02, 0x02, 0x05)))
		ce := fp.expectClose(wire.UnknownAuthTokenAlias)
		assert.Contains(t, ce.Reason, "alias 5")
	})
}

// Handlers see the tokens resolved: Type and Value, and the alias they
// came through; Params carry them as USE_VALUE, meaningful beyond this
// session.
func TestAuthTokenHandlerSeesResolvedTokens(t *testing.T) {
	// Two subscriptions to one track: not on 18 (18 §5.1).
	forDrafts(t, newerDrafts, func(t *testing.T) {
		// The SUBSCRIBE_OK the fake reads is the proof of acceptance; an
		// Accept still finishing as the test ends would see the session close.
		h, calls := tokenHandler(func(r Request) {
			_, _ = acceptLocal(r.(*SubscribeRequest), AcceptOptions{})
		})
		s, fp := authServer(t, &Config{Handler: h, MaxAuthTokenCacheSize: 100}, toks(tokReg(1, "setup-token"), tokVal("plain")))
		assert.Equal(t, []string{"setup-token@1", "plain"}, tokStrings(s.PeerAuthorizationTokens()))

		expect[*wire.SubscribeOK](fp.subscribeWith(0, tokReg(2, "sub-token")))
		c := recvOrFail(t, calls)
		assert.Equal(t, []string{"sub-token@2"}, tokStrings(c.tokens))

		expect[*wire.SubscribeOK](fp.subscribeWith(2, tokUse(2), tokUse(1), wire.UseToken(9, []byte("v"))))
		c = recvOrFail(t, calls)
		assert.Equal(t, []string{"sub-token@2", "setup-token@1", "v"}, tokStrings(c.tokens))
		assert.Equal(t, []uint64{1, 1, 9}, []uint64{c.tokens[0].Type, c.tokens[1].Type, c.tokens[2].Type})
		assert.Equal(t, []wire.Token{
			wire.UseToken(1, []byte("sub-token")),
			wire.UseToken(1, []byte("setup-token")),
			wire.UseToken(9, []byte("v")),
		}, c.params)
		assert.NoError(t, s.Context().Err())
	})
}

// A REGISTER stands even when its request fails, whatever the reason
// (§8.9): a later USE_ALIAS resolves.
func TestAuthTokenRejectedRequestStillRegisters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(fp *fakePeer) *fakeStream
		code  wire.RequestErrorCode
	}{
		{"rejected by the handler", func(fp *fakePeer) *fakeStream {
			return fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackB.Namespace, TrackName: trackB.Name,
				Parameters: wire.Params{AuthorizationTokens: toks(tokReg(1, "t"))}})
		}, wire.ReqUnauthorized},
		{"repeated token", func(fp *fakePeer) *fakeStream { return fp.subscribeWith(0, tokReg(1, "t"), tokVal("t")) }, wire.ReqMalformedAuthToken},
		{"refused namespace", func(fp *fakePeer) *fakeStream {
			return fp.open(&wire.PublishNamespace{RequestID: 0, TrackNamespace: trackA.Namespace,
				Parameters: wire.Params{AuthorizationTokens: toks(tokReg(1, "t"))}})
		}, wire.ReqUninterested},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h, calls := tokenHandler(func(r Request) {
					switch r.(type) {
					case *TrackStatusRequest:
						_ = r.Reject(wire.ReqUnauthorized, "no")
						return
					case *PublishNamespaceRequest:
						DefaultHandler.ServeMOQT(r)
						return
					}
					_, _ = acceptLocal(r.(*SubscribeRequest), AcceptOptions{}) // the fake reads SUBSCRIBE_OK
				})
				s, fp := authServer(t, &Config{Handler: h, MaxAuthTokenCacheSize: 100}, nil)
				assert.Equal(t, tc.code, expect[*wire.RequestError](tc.first(fp)).ErrorCode)
				expect[*wire.SubscribeOK](fp.subscribeWith(2, tokUse(1)))
				var c tokenCall
				for c.id != 2 {
					c = recvOrFail(t, calls)
				}
				assert.Equal(t, []string{"t@1"}, tokStrings(c.tokens))
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// A Token Type and Value may appear once per message, after resolution
// (§8.9): a repeat is MALFORMED_AUTH_TOKEN, and the handler never sees it.
func TestAuthTokenRepeatedIsMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		toks []wire.Token
	}{
		{"USE_VALUE twice", toks(tokVal("a"), tokVal("a"))},
		{"REGISTER and USE_VALUE", toks(tokReg(2, "a"), tokVal("a"))},
		{"USE_ALIAS twice", toks(tokUse(1), tokUse(1))},
		{"USE_ALIAS and USE_VALUE", toks(tokUse(1), tokVal("s"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h, calls := tokenHandler(nil)
				s, fp := authServer(t, &Config{Handler: h, MaxAuthTokenCacheSize: 100}, toks(tokReg(1, "s")))
				fs := fp.subscribeWith(0, tc.toks...)
				assert.Equal(t, wire.ReqMalformedAuthToken, expect[*wire.RequestError](fs).ErrorCode)
				fs.expectFIN()
				fp.alive(2)
				assert.Equal(t, uint64(2), recvOrFail(t, calls).id, "the handler saw only the TRACK_STATUS")
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// An error stored in place of a token (§8.9) answers later uses of its
// alias without the handler, until the alias is deleted.
func TestAuthTokenStoredError(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		var answered atomic.Bool
		h, calls := tokenHandler(func(r Request) {
			if !answered.Swap(true) {
				assert.True(t, r.Session().StoreTokenError(r.AuthorizationTokens()[0], wire.ReqExpiredAuthToken))
				_ = r.Reject(wire.ReqExpiredAuthToken, "expired")
				return
			}
			_ = r.Reject(wire.ReqDoesNotExist, "")
		})
		_, fp := authServer(t, &Config{Handler: h, MaxAuthTokenCacheSize: 100}, nil)
		assert.Equal(t, wire.ReqExpiredAuthToken, expect[*wire.RequestError](fp.subscribeWith(0, tokReg(1, "old"))).ErrorCode)
		recvOrFail(t, calls)
		assert.Equal(t, wire.ReqExpiredAuthToken, expect[*wire.RequestError](fp.subscribeWith(2, tokUse(1))).ErrorCode)
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fp.subscribeWith(4, tokDel(1), tokReg(1, "new"))).ErrorCode)
		c := recvOrFail(t, calls)
		assert.Equal(t, uint64(4), c.id, "the handler did not see request 2")
		assert.Equal(t, []string{"new@1"}, tokStrings(c.tokens))
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fp.subscribeWith(6, tokUse(1))).ErrorCode)
		assert.Equal(t, []string{"new@1"}, tokStrings(recvOrFail(t, calls).tokens))
	})
}

// REQUEST_UPDATE's tokens are resolved too (§9.20.3): OnUpdate sees them as
// USE_VALUE, and a refused update still registers.
func TestAuthTokenRequestUpdate(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		updates := make(chan []wire.Token, 4)
		h, served := servedCh(AcceptOptions{OnUpdate: func(_ *ServedSubscription, p *wire.Params) error {
			updates <- p.AuthorizationTokens
			return nil
		}})
		s, fp := authServer(t, &Config{Handler: h, MaxAuthTokenCacheSize: 100}, nil)
		fs := fp.subscribeWith(0, tokReg(1, "a"))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)

		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{AuthorizationTokens: toks(tokUse(1))}})
		expect[*wire.RequestOK](fs)
		assert.Equal(t, toks(tokVal("a")), recvOrFail(t, updates))
		assert.Equal(t, toks(tokVal("a")), ss.Params().AuthorizationTokens)

		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{AuthorizationTokens: toks(tokReg(2, "b"), tokVal("b"))}})
		assert.Equal(t, wire.ReqMalformedAuthToken, expect[*wire.RequestError](fs).ErrorCode)
		assert.Equal(t, wire.DoneUpdateFailed, expect[*wire.PublishDone](fs).StatusCode)

		fs2 := fp.subscribeWith(6, tokUse(2))
		expect[*wire.SubscribeOK](fs2)
		assert.Equal(t, toks(tokVal("b")), recvOrFail(t, served).Params().AuthorizationTokens)

		fs2.send(&wire.RequestUpdate{RequestID: 8, Parameters: wire.Params{AuthorizationTokens: toks(tokUse(3))}})
		fp.expectClose(wire.UnknownAuthTokenAlias)
		expectSessionError(t, s, wire.UnknownAuthTokenAlias)
	})
}

// ---- the library as the sender ----

// clientWithPeerCache lets the library Dial a fake server whose SETUP
// sets MAX_AUTH_TOKEN_CACHE_SIZE to limit (unset when 0).
func clientWithPeerCache(t *testing.T, cfg *Config, limit uint64) (*Session, *fakePeer, *wire.Setup) {
	t.Helper()
	fs := startFakeServer(t)
	fp, dial := fs.dialLib("moqt", cfg)
	own := fp.readPeerSetup()
	st := &wire.Setup{}
	if limit > 0 {
		st.MaxAuthTokenCacheSize = wire.Some(limit)
	}
	fp.sendSetup(st)
	s, err := dial.wait()
	require.NoError(t, err)
	return s, fp, own
}

// SETUP registrations that did not fit in the peer's cache are purged
// (§9.1.4), and a refused request uses no Request ID and sends nothing.
func TestAuthTokenSenderSetupPurge(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		ten := "0123456789" // 26 bytes in the cache
		cfg := &Config{AuthorizationTokens: toks(tokReg(1, ten), tokReg(2, ten+"x"), tokVal("v"))}
		s, fp, own := clientWithPeerCache(t, cfg, 30)
		assert.Equal(t, cfg.AuthorizationTokens, own.AuthorizationTokens, "SETUP goes before the peer's limit is known")
		ctx := fakeCtx(t)

		_, err := s.Subscribe(ctx, trackA, wire.Params{AuthorizationTokens: toks(tokUse(2))})
		require.ErrorIs(t, err, ErrAuthToken)
		_, err = s.Subscribe(ctx, trackA, wire.Params{AuthorizationTokens: toks(tokReg(3, ""))})
		require.ErrorIs(t, err, ErrAuthToken, "4 bytes are left of 30")

		res := startSubscribe(ctx, s, trackA, wire.Params{AuthorizationTokens: toks(tokUse(1))})
		fs, m := fp.acceptSubscribe()
		assert.Equal(t, uint64(0), m.RequestID)
		assert.Equal(t, toks(tokUse(1)), m.Parameters.AuthorizationTokens)
		fs.send(&wire.SubscribeOK{TrackAlias: 1})
		require.NoError(t, recvOrFail(t, res).err)
	})

	t.Run("no MAX_AUTH_TOKEN_CACHE_SIZE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, _, _ := clientWithPeerCache(t, &Config{AuthorizationTokens: toks(tokReg(1, "a"))}, 0)
			_, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{AuthorizationTokens: toks(tokUse(1))})
			assert.ErrorIs(t, err, ErrAuthToken)
			_, err = s.TrackStatus(fakeCtx(t), trackA, wire.Params{AuthorizationTokens: toks(tokReg(2, ""))})
			assert.ErrorIs(t, err, ErrAuthToken)
		})
	})
}

// startTrackStatus runs a TrackStatus carrying tok in the background.
func startTrackStatus(ctx context.Context, s *Session, tok wire.Token) <-chan error {
	return goErr(func() error {
		_, err := s.TrackStatus(ctx, trackB, wire.Params{AuthorizationTokens: toks(tok)})
		return err
	})
}

// The sender's ordering rules across request streams (§8.9): no USE_ALIAS
// (nor DELETE) of an alias until its REGISTER is answered, no DELETE while
// a USE_ALIAS of it awaits its answer.
func TestAuthTokenSenderOrdering(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp, _ := clientWithPeerCache(t, nil, 100)
		ctx := fakeCtx(t)
		trackStatus := func(tok wire.Token) error {
			_, err := s.TrackStatus(ctx, trackB, wire.Params{AuthorizationTokens: toks(tok)})
			return err
		}

		res := startSubscribe(ctx, s, trackA, wire.Params{AuthorizationTokens: toks(tokReg(5, "x"))})
		fs, m := fp.acceptSubscribe()
		assert.Equal(t, toks(tokReg(5, "x")), m.Parameters.AuthorizationTokens)
		require.ErrorIs(t, trackStatus(tokUse(5)), ErrAuthToken, "REGISTER not answered yet")
		require.ErrorIs(t, trackStatus(tokDel(5)), ErrAuthToken, "REGISTER not answered yet")
		require.ErrorIs(t, trackStatus(tokReg(5, "y")), ErrAuthToken, "already registered")
		fs.send(&wire.SubscribeOK{TrackAlias: 1})
		sub := recvOrFail(t, res).sub
		require.NotNil(t, sub)

		use := startTrackStatus(ctx, s, tokUse(5))
		ts := fp.accept()
		tsm := expect[*wire.TrackStatus](ts)
		assert.Equal(t, uint64(2), tsm.RequestID, "refused requests used no Request ID")
		assert.Equal(t, toks(tokUse(5)), tsm.Parameters.AuthorizationTokens)
		require.ErrorIs(t, trackStatus(tokDel(5)), ErrAuthToken, "USE_ALIAS not answered yet")
		ts.send(&wire.RequestError{ErrorCode: wire.ReqDoesNotExist})
		ts.fin()
		var re *RequestError
		require.ErrorAs(t, recvOrFail(t, use), &re)

		del := startTrackStatus(ctx, s, tokDel(5))
		ts = fp.accept()
		assert.Equal(t, toks(tokDel(5)), expect[*wire.TrackStatus](ts).Parameters.AuthorizationTokens)
		require.ErrorIs(t, sub.Update(ctx, wire.Params{AuthorizationTokens: toks(tokReg(5, "z"))}), ErrAuthToken, "DELETE not answered yet")
		ts.send(&wire.RequestOK{})
		ts.fin()
		require.NoError(t, recvOrFail(t, del))
		require.ErrorIs(t, trackStatus(tokUse(5)), ErrAuthToken, "deleted")

		// Re-registered by an update on the subscription's stream, and used on
		// that same stream before the answer.
		upd := goErr(func() error { return sub.Update(ctx, wire.Params{AuthorizationTokens: toks(tokReg(5, "z"))}) })
		u := expect[*wire.RequestUpdate](fs)
		assert.Equal(t, toks(tokReg(5, "z")), u.Parameters.AuthorizationTokens)
		upd2 := goErr(func() error { return sub.Update(ctx, wire.Params{AuthorizationTokens: toks(tokUse(5))}) })
		assert.Equal(t, toks(tokUse(5)), expect[*wire.RequestUpdate](fs).Parameters.AuthorizationTokens)
		fs.send(&wire.RequestOK{})
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, upd))
		require.NoError(t, recvOrFail(t, upd2))
		assert.NoError(t, s.Context().Err())
	})
}
