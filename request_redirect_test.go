package moqt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// REQUEST_ERROR with REDIRECT (§9.4): the Connect URI and the track reach
// the requester, on either side.

// redirectError is a REQUEST_ERROR REDIRECT to uri and track.
func redirectError(uri string, track wire.FullTrackName) *wire.RequestError {
	return &wire.RequestError{ErrorCode: wire.ReqRedirect, ErrorReason: "moved",
		Redirect: wire.Some(wire.Redirect{ConnectURI: uri, TrackNamespace: track.Namespace, TrackName: track.Name})}
}

// A server that receives a Redirect with a Connect URI closes the session
// with PROTOCOL_VIOLATION, whichever request it answers; an empty Connect
// URI is a Redirect like any other.
func TestServerReceivesRedirectWithConnectURI(t *testing.T) {
	requests := map[string]func(s *Session) error{
		"TRACK_STATUS": func(s *Session) error {
			_, err := s.TrackStatus(context.Background(), trackA, wire.Params{})
			return err
		},
		"SUBSCRIBE": func(s *Session) error {
			_, err := s.Subscribe(context.Background(), trackA, wire.Params{})
			return err
		},
	}
	for name, request := range requests {
		for _, scheme := range schemes {
			t.Run(pipeName(scheme)+"/"+name, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					s, fp := serverSessionOver(t, scheme, nil)
					done := goErr(func() error { return request(s) })
					fs := fp.accept()
					fs.read()
					fs.send(redirectError("moqt://elsewhere.example/live", trackB))
					fp.expectClose(wire.ProtocolViolation)
					assert.Error(t, recvOrFail(t, done))
				})
			})
		}
		t.Run("empty Connect URI/"+name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := serverSession(t, nil)
				done := goErr(func() error { return request(s) })
				fs := fp.accept()
				fs.read()
				fs.send(redirectError("", trackB))
				fs.fin()
				var re *RequestError
				require.ErrorAs(t, recvOrFail(t, done), &re)
				require.NotNil(t, re.Redirect)
				assert.Equal(t, trackB.Name, re.Redirect.TrackName)
				fp.alive(0)
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// A client may be redirected to another server.
func TestClientReceivesRedirectWithConnectURI(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		done := goErr(func() error {
			_, err := s.TrackStatus(context.Background(), trackA, wire.Params{})
			return err
		})
		fs := fp.accept()
		expect[*wire.TrackStatus](fs)
		fs.send(redirectError("moqt://elsewhere.example/live", trackB))
		fs.fin()
		var re *RequestError
		require.ErrorAs(t, recvOrFail(t, done), &re)
		require.NotNil(t, re.Redirect)
		assert.Equal(t, "moqt://elsewhere.example/live", re.Redirect.ConnectURI)
		assert.NoError(t, s.Context().Err())
	})
}

// The rule for namespace-scoped requests is applied by the same read: the
// library sends no such request yet, so the stream is built by hand.
func TestRedirectForNamespaceRequestHasNoTrackName(t *testing.T) {
	for _, tc := range []struct {
		request wire.MessageType
		name    string
		ok      bool
	}{
		{wire.MsgSubscribeNamespace, "video", false},
		{wire.MsgPublishNamespace, "video", false},
		{wire.MsgSubscribeTracks, "video", false},
		{wire.MsgSubscribeNamespace, "", true},
		{wire.MsgSubscribe, "video", true},
	} {
		t.Run(tc.request.String()+"/"+tc.name, func(t *testing.T) {
			rs := pipedRequestStream(t, tc.request, redirectError("", wire.FullTrackName{Namespace: trackA.Namespace, Name: []byte(tc.name)}))
			m, err := rs.readMessage()
			if tc.ok {
				require.NoError(t, err)
				assert.IsType(t, &wire.RequestError{}, m)
				return
			}
			se, ok := asSessionError(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, wire.ProtocolViolation, se.Code)
		})
	}
}

// RejectWith sends a REDIRECT with its Redirect and a Retry Interval; Reject
// cannot send REDIRECT, which needs one, and says so without answering, so
// the request can still be answered.
func TestRejectWithRedirect(t *testing.T) {
	forDrafts(t, newerDrafts, func(t *testing.T) {
		type result struct{ redirect, plain, again error }
		got := make(chan result, 1)
		redirect := &wire.Redirect{ConnectURI: "moqt://elsewhere.example/live", TrackNamespace: trackB.Namespace, TrackName: trackB.Name}
		h := HandlerFunc(func(r Request) {
			var res result
			res.plain = r.Reject(wire.ReqRedirect, "moved")
			res.redirect = r.RejectWith(&RequestError{Code: wire.ReqRedirect, Reason: "moved", RetryInterval: 1, Redirect: redirect})
			res.again = r.Reject(wire.ReqDoesNotExist, "twice")
			got <- res
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		res := recvOrFail(t, got)
		assert.Error(t, res.plain, "REDIRECT without a Redirect")
		assert.NoError(t, res.redirect)
		assert.ErrorIs(t, res.again, errAlreadyAnswered)
		m := expect[*wire.RequestError](fs)
		assert.Equal(t, wire.ReqRedirect, m.ErrorCode)
		assert.Equal(t, uint64(1), m.RetryInterval)
		require.True(t, m.Redirect.Set)
		assert.Equal(t, *redirect, m.Redirect.Value)
		fs.expectFIN()
	})
}

// RejectWith refuses, before anything is sent, what §9.4.1 forbids the
// receiver to accept: a Redirect with a Connect URI from a client, a Track
// Name in one answering a namespace request, a Redirect with another code.
func TestRejectWithRefusesBadRedirect(t *testing.T) {
	fine := &RequestError{Code: wire.ReqRedirect, Redirect: &wire.Redirect{TrackNamespace: trackB.Namespace, TrackName: []byte{}}}
	cases := []struct {
		name    string
		session func(*testing.T, *Config) (*Session, *fakePeer)
		request wire.Message
		bad     *RequestError
		good    *RequestError // sent after bad was refused
	}{
		{"namespace request", serverSession, &wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a")},
			&RequestError{Code: wire.ReqRedirect, Redirect: &wire.Redirect{TrackNamespace: trackB.Namespace, TrackName: trackB.Name}}, fine},
		{"other code", serverSession, subscribeMsg(0, trackA, wire.Params{}),
			&RequestError{Code: wire.ReqDoesNotExist, Redirect: fine.Redirect}, &RequestError{Code: wire.ReqDoesNotExist}},
		{"client with a Connect URI", clientSession, subscribeMsg(1, trackA, wire.Params{}),
			&RequestError{Code: wire.ReqRedirect, Redirect: &wire.Redirect{ConnectURI: "moqt://elsewhere.example/", TrackNamespace: trackB.Namespace}}, fine},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forDrafts(t, newerDrafts, func(t *testing.T) {
				got := make(chan [2]error, 1)
				h := HandlerFunc(func(r Request) {
					bad := r.RejectWith(tc.bad)
					got <- [2]error{bad, r.RejectWith(tc.good)}
				})
				_, fp := tc.session(t, &Config{Handler: h})
				fs := fp.open(tc.request)
				res := recvOrFail(t, got)
				assert.Error(t, res[0], "refused before anything is sent")
				assert.NoError(t, res[1])
				m := expect[*wire.RequestError](fs)
				assert.Equal(t, tc.good.Code, m.ErrorCode)
				if assert.Equal(t, tc.good.Redirect != nil, m.Redirect.Set) && m.Redirect.Set {
					assert.Equal(t, *tc.good.Redirect, m.Redirect.Value)
				}
			})
		})
	}
}
