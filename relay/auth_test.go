package relay

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

func token(v string) []wire.Token {
	return []wire.Token{wire.UseToken(1, []byte(v))}
}

func hasToken(r moqt.Request, v string) bool {
	for _, tok := range r.AuthorizationTokens() {
		if bytes.Equal(tok.Value, []byte(v)) {
			return true
		}
	}
	return false
}

func TestC045_SubscribersAuthorized(t *testing.T) {
	t.Run("nil refuses all", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			n := startNodeAuth(t, "moqt", Config{}, nil)
			pub := n.newPublisher("/pub", testTrack, nil)
			n.announce(pub, wire.NewNamespace("live"))
			c, _ := n.dial("/sub", nil)
			_, err := subscribe(t, c, testTrack, wire.Params{})
			assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err))
			assert.Empty(t, pub.subscribes(), "nothing went upstream")
		})
	})
	forSchemes(t, func(t *testing.T, scheme string) {
		auth := func(r moqt.Request, _ *wire.Params) error {
			sr, ok := r.(*moqt.SubscribeRequest)
			if !ok {
				return nil
			}
			switch {
			case r.Session().Path() != "/viewer":
				return errors.New("wrong path")
			case hasToken(r, "old"):
				return &moqt.RequestError{Code: wire.ReqExpiredAuthToken, Reason: "expired"}
			case !hasToken(r, "good") || !sr.Track.Namespace.HasPrefix(wire.NewNamespace("live")):
				return errors.New("no")
			}
			return nil
		}
		n := startNode(t, scheme, Config{Authorize: auth}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		other, _ := n.dial("/other", nil)
		_, err := subscribe(t, other, testTrack, wire.Params{AuthorizationTokens: token("good")})
		assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err), "the session's path is checked")
		viewer, _ := n.dial("/viewer", nil)
		_, err = subscribe(t, viewer, testTrack, wire.Params{AuthorizationTokens: token("bad")})
		assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err))
		_, err = subscribe(t, viewer, testTrack, wire.Params{AuthorizationTokens: token("old")})
		assert.Equal(t, wire.ReqExpiredAuthToken, requestCode(t, err), "a *RequestError's code")
		assert.Empty(t, pub.subscribes(), "nothing went upstream")
		_, err = subscribe(t, viewer, testTrack, wire.Params{AuthorizationTokens: token("good")})
		require.NoError(t, err)
	})
}

// TestAuthorizeRefusalReason: a refusal by Config.Authorize reaches the
// requester as its REQUEST_ERROR says it: a *moqt.RequestError, wrapped
// or not, with its own Code and Reason, any other error as UNAUTHORIZED
// with its text, each once (§9.4, §12.3); a REDIRECT with its Redirect and
// Retry Interval, and one the session cannot send as UNAUTHORIZED.
func TestAuthorizeRefusalReason(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		auth := func(r moqt.Request, _ *wire.Params) error {
			switch {
			case hasToken(r, "old"):
				return &moqt.RequestError{Code: wire.ReqExpiredAuthToken, Reason: "token expired at noon"}
			case hasToken(r, "wrapped"):
				return fmt.Errorf("checking the token: %w", &moqt.RequestError{Code: wire.ReqUnauthorized, Reason: "not for this track"})
			case hasToken(r, "moved"):
				return &moqt.RequestError{Code: wire.ReqRedirect, Reason: "moved", RetryInterval: 1,
					Redirect: &wire.Redirect{ConnectURI: "moqt://other.example/", TrackNamespace: testTrack.Namespace, TrackName: []byte("new")}}
			case hasToken(r, "bad"):
				// A REDIRECT without its Redirect cannot be sent.
				return &moqt.RequestError{Code: wire.ReqRedirect, Reason: "nowhere"}
			}
			return errors.New("no token")
		}
		n := startNode(t, scheme, Config{Authorize: auth}, nil)
		c, _ := n.dial("/sub", nil)
		for _, tc := range []struct {
			token  string
			code   wire.RequestErrorCode
			reason string
		}{
			{"old", wire.ReqExpiredAuthToken, "token expired at noon"},
			{"wrapped", wire.ReqUnauthorized, "not for this track"},
			{"none", wire.ReqUnauthorized, "no token"},
			{"moved", wire.ReqRedirect, "moved"},
			{"bad", wire.ReqUnauthorized, "nowhere"},
		} {
			_, err := subscribe(t, c, testTrack, wire.Params{AuthorizationTokens: token(tc.token)})
			var re *moqt.RequestError
			require.True(t, errors.As(err, &re), "want a *RequestError, got %v", err)
			assert.Equal(t, tc.code, re.Code, tc.token)
			assert.Equal(t, tc.reason, re.Reason, tc.token)
			if tc.code == wire.ReqRedirect {
				assert.Equal(t, uint64(1), re.RetryInterval)
				require.NotNil(t, re.Redirect)
				assert.Equal(t, "moqt://other.example/", re.Redirect.ConnectURI)
				assert.Equal(t, []byte("new"), re.Redirect.TrackName)
			}
		}
	})
}

func TestC050_C051_PublishersAuthorizedPerTrack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		allowed := wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}
		auth := func(r moqt.Request, _ *wire.Params) error {
			if pr, ok := r.(*moqt.PublishRequest); ok && !pr.Track.Equal(allowed) {
				return errors.New("not this track")
			}
			return nil
		}
		n := startNode(t, "moqt", Config{Authorize: auth}, nil)
		pc, _ := n.dial("/pub", nil)
		tr, err := moqt.NewLocalTrack(allowed, nil)
		require.NoError(t, err)
		_, err = publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		// Publishing one track does not authorize a sibling.
		sibling := allowed
		sibling.Name = []byte("audio")
		tr2, err := moqt.NewLocalTrack(sibling, nil)
		require.NoError(t, err)
		_, err = publishTo(t, pc, tr2, wire.Params{})
		assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err))
		assert.Nil(t, n.relay.reg.lookup(sibling))
	})
}
