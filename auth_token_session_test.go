package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Token aliases end to end between two library sessions, in both
// directions, over both Pipes in synctest bubbles
// (§8.9): registered in SETUP and in requests, used by alias from other
// streams once answered, deleted; the sender's checks refuse what the
// receiver would punish.
func TestAuthTokensEndToEnd(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		// The handlers report their answers, which the test checks in
		// turn: an answer still being made when the test ends would
		// see the sessions close.
		answers := make(chan error, 16)
		serverH, serverCalls := tokenHandler(func(r Request) {
			if sr, ok := r.(*SubscribeRequest); ok {
				_, err := acceptLocal(sr, AcceptOptions{})
				answers <- err
				return
			}
			answers <- r.Reject(wire.ReqDoesNotExist, "")
		})
		clientH, clientCalls := tokenHandler(func(r Request) {
			_, err := r.(*PublishRequest).Accept(wire.Params{})
			answers <- err
		})
		answered := func() {
			t.Helper()
			require.NoError(t, recvOrFail(t, answers))
		}
		p := connect(t,
			&Config{Handler: serverH, MaxAuthTokenCacheSize: 64},
			&Config{Handler: clientH, MaxAuthTokenCacheSize: 64, AuthorizationTokens: toks(tokReg(1, "session"))})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.Equal(t, []string{"session@1"}, tokStrings(p.server.PeerAuthorizationTokens()))

		_, err := p.client.Subscribe(ctx, testTrack, wire.Params{AuthorizationTokens: toks(tokReg(2, "sub"))})
		require.NoError(t, err)
		assert.Equal(t, []string{"sub@2"}, tokStrings(recvOrFail(t, serverCalls).tokens))
		answered()

		// The REGISTER was answered, so another stream may use it.
		sub, err := p.client.Subscribe(ctx, trackB, wire.Params{AuthorizationTokens: toks(tokUse(2), tokUse(1))})
		require.NoError(t, err)
		assert.Equal(t, []string{"sub@2", "session@1"}, tokStrings(recvOrFail(t, serverCalls).tokens))
		answered()
		require.NoError(t, sub.Update(ctx, wire.Params{AuthorizationTokens: toks(tokUse(2))}))

		// 23 + 19 of the server's 64 bytes are taken.
		for _, bad := range [][]wire.Token{{tokReg(2, "again")}, {tokUse(9)}, {tokReg(3, "0123456789")}, {tokVal("x"), tokVal("x")}} {
			_, err = p.client.Subscribe(ctx, trackA, wire.Params{AuthorizationTokens: bad})
			assert.ErrorIs(t, err, ErrAuthToken, "%v", bad)
		}

		_, err = p.client.TrackStatus(ctx, trackB, wire.Params{AuthorizationTokens: toks(tokDel(2))})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Empty(t, recvOrFail(t, serverCalls).tokens, "DELETE carries no token")
		answered()
		_, err = p.client.Subscribe(ctx, trackA, wire.Params{AuthorizationTokens: toks(tokUse(2))})
		assert.ErrorIs(t, err, ErrAuthToken)
		_, err = p.client.Subscribe(ctx, trackA, wire.Params{AuthorizationTokens: toks(tokReg(3, "0123456789"))})
		require.NoError(t, err, "the DELETE freed its bytes")
		recvOrFail(t, serverCalls)
		answered()

		// The server's aliases are its own: its alias 1 is not the
		// client's.
		_, err = publishLocal(ctx, p.server, trackA, wire.Params{AuthorizationTokens: toks(tokReg(1, "server"))}, nil)
		require.NoError(t, err)
		c := recvOrFail(t, clientCalls)
		answered()
		assert.Equal(t, []string{"server@1"}, tokStrings(c.tokens))
		assert.Equal(t, toks(tokVal("server")), c.params)

		assert.NoError(t, p.client.Context().Err())
		assert.NoError(t, p.server.Context().Err())
	})
}
