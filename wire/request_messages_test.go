package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every message that may open a request stream is a Request, and no other
// is: what decodes from the wire answers for its own fields.
func TestRequestMessages(t *testing.T) {
	ns := NewNamespace("live", "cam")
	name := []byte("video")
	params := Params{Forward: Some(false)}
	for _, tc := range []struct {
		m     Request
		track bool
	}{
		{&Subscribe{RequestID: 4, TrackNamespace: ns, TrackName: name, Parameters: params}, true},
		{&Publish{RequestID: 4, TrackNamespace: ns, TrackName: name, TrackAlias: 9, Parameters: params}, true},
		{&Fetch{RequestID: 4, TrackNamespace: ns, TrackName: name}, true},
		{&TrackStatus{RequestID: 4, TrackNamespace: ns, TrackName: name}, true},
		{&PublishNamespace{RequestID: 4, TrackNamespace: ns}, false},
		{&SubscribeNamespace{RequestID: 4, TrackNamespacePrefix: ns}, false},
		{&SubscribeTracks{RequestID: 4, TrackNamespacePrefix: ns}, false},
	} {
		t.Run(tc.m.Type().String(), func(t *testing.T) {
			require.True(t, tc.m.Type().IsRequest())
			body, err := tc.m.AppendBody(Draft21, nil)
			require.NoError(t, err)
			parsed, err := ParseMessage(Draft21, tc.m.Type(), body)
			require.NoError(t, err)
			r, ok := parsed.(Request)
			require.True(t, ok, "%T is not a Request", parsed)
			assert.Equal(t, uint64(4), r.ID())
			assert.True(t, r.Namespace().Equal(ns))
			track, ok := r.Track()
			assert.Equal(t, tc.track, ok)
			if tc.track {
				assert.True(t, track.Equal(FullTrackName{Namespace: ns, Name: name}))
			} else {
				assert.Equal(t, FullTrackName{}, track)
			}
			// Params is the message's own: a change shows in what is sent.
			tok := Token{AliasType: TokenUseValue, Type: 1, Value: []byte("t")}
			r.Params().AuthorizationTokens = []Token{tok}
			b2, err := r.AppendBody(Draft21, nil)
			require.NoError(t, err)
			again, err := ParseMessage(Draft21, r.Type(), b2)
			require.NoError(t, err)
			assert.Equal(t, []Token{tok}, again.(Request).Params().AuthorizationTokens)
		})
	}
}

// The message types that are not requests decode to no Request.
func TestNonRequestMessages(t *testing.T) {
	for t0 := range messageNames {
		m, err := NewMessage(t0)
		require.NoError(t, err, "%s", t0)
		_, ok := m.(Request)
		assert.Equal(t, t0.IsRequest(), ok, "%s", t0)
	}
}
