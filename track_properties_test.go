package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// immutable wraps props in an IMMUTABLE_PROPERTIES Track Property (§10.7).
func immutable(t *testing.T, props wire.KVList) wire.KVList {
	t.Helper()
	b, err := props.Append(nil)
	require.NoError(t, err)
	return wire.KVList{{Type: wire.PropImmutableProperties, Bytes: b}}
}

// TestTrackPropertyValues: DEFAULT_PUBLISHER_GROUP_ORDER must be Ascending
// or Descending (§10.5) and DYNAMIC_GROUPS at most 1 (§10.6), wherever they
// sit (§10.7); anything else is a PROTOCOL_VIOLATION.
func TestTrackPropertyValues(t *testing.T) {
	cases := []struct {
		name  string
		props wire.KVList
		ok    bool
	}{
		{"none", nil, true},
		{"ascending", wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 1}}, true},
		{"descending", wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 2}}, true},
		{"group order 0", wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 0}}, false},
		{"group order 3", wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 3}}, false},
		{"dynamic groups 0", wire.KVList{{Type: wire.PropDynamicGroups, Value: 0}}, true},
		{"dynamic groups 1", wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}}, true},
		{"dynamic groups 2", wire.KVList{{Type: wire.PropDynamicGroups, Value: 2}}, false},
		{"dynamic groups max", wire.KVList{{Type: wire.PropDynamicGroups, Value: 1<<64 - 1}}, false},
		{"immutable group order 7", immutable(t, wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 7}}), false},
		{"immutable dynamic groups 1", immutable(t, wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}}), true},
	}
	for _, c := range cases {
		err := checkTrackProperties(c.props)
		if c.ok {
			assert.NoError(t, err, c.name)
			continue
		}
		var se *SessionError
		if assert.ErrorAs(t, err, &se, c.name) {
			assert.Equal(t, wire.ProtocolViolation, se.Code, c.name)
		}
	}
}

// TestTrackPropertyValuesOnTheWire: a bad value in PUBLISH, SUBSCRIBE_OK or
// the REQUEST_OK answering TRACK_STATUS closes the session with
// PROTOCOL_VIOLATION (§10.5, §10.6).
func TestTrackPropertyValuesOnTheWire(t *testing.T) {
	bad := wire.KVList{{Type: wire.PropDynamicGroups, Value: 2}}
	t.Run("PUBLISH", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := clientSession(t, &Config{Handler: HandlerFunc(func(r Request) {
				_, _ = r.(*PublishRequest).Accept(wire.Params{})
			})})
			fp.open(publishMsg(1, trackA, 7, wire.Params{}, bad))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("SUBSCRIBE_OK", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
			fs, _ := fp.acceptSubscribe()
			fs.send(&wire.SubscribeOK{TrackAlias: 1, TrackProperties: wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 3}}})
			require.Error(t, recvOrFail(t, res).err)
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("TRACK_STATUS", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			res := goErr(func() error {
				_, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{})
				return err
			})
			fs := fp.accept()
			_ = fs.read()
			fs.send(&wire.RequestOK{TrackProperties: bad})
			fs.fin()
			require.Error(t, recvOrFail(t, res))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
}
