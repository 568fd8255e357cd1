package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestC018_NewGroupRequestNeedsDynamicGroups: a subscriber must not send
// NEW_GROUP_REQUEST in REQUEST_UPDATE unless the track's properties include
// DYNAMIC_GROUPS = 1 (§9.20.20, §10.6). Update refuses it locally and sends
// nothing; with DYNAMIC_GROUPS = 1, directly or inside
// IMMUTABLE_PROPERTIES (§10.7), it goes out. In SUBSCRIBE it is allowed
// without foreknowledge of support (§9.20.20).
func TestC018_NewGroupRequestNeedsDynamicGroups(t *testing.T) {
	immutable, err := wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}}.Append(nil)
	require.NoError(t, err)
	immutable0, err := wire.KVList{{Type: wire.PropDynamicGroups, Value: 0}}.Append(nil)
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		props   wire.KVList
		allowed bool
	}{
		{"no DYNAMIC_GROUPS", nil, false},
		{"DYNAMIC_GROUPS 0", wire.KVList{{Type: wire.PropDynamicGroups, Value: 0}}, false},
		{"DYNAMIC_GROUPS 1", wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}}, true},
		{"DYNAMIC_GROUPS 1 immutable", wire.KVList{{Type: wire.PropImmutableProperties, Bytes: immutable}}, true},
		// Both: the immutable value is taken (wire.KVList.Lookup).
		{"DYNAMIC_GROUPS 0 immutable, 1 mutable", wire.KVList{{Type: wire.PropImmutableProperties, Bytes: immutable0},
			{Type: wire.PropDynamicGroups, Value: 1}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				// The SUBSCRIBE itself may carry it whatever the track says.
				p := newFakePub(t, wire.Params{NewGroupRequest: wire.Some[uint64](0)}, c.props)
				ngr := wire.Params{NewGroupRequest: wire.Some[uint64](4)}
				if !c.allowed {
					require.ErrorIs(t, p.sub.Update(p.ctx, ngr), ErrNoDynamicGroups)
					// Nothing went out: the next REQUEST_UPDATE the publisher
					// sees is the next one sent, without the parameter.
					ngr = wire.Params{SubscriberPriority: wire.Some[uint8](3)}
				}
				done := goErr(func() error { return p.sub.Update(p.ctx, ngr) })
				u := expect[*wire.RequestUpdate](p.req)
				assert.Equal(t, ngr.NewGroupRequest, u.Parameters.NewGroupRequest)
				assert.Equal(t, ngr.SubscriberPriority, u.Parameters.SubscriberPriority)
				p.req.send(&wire.RequestOK{})
				require.NoError(t, recvOrFail(t, done))
			})
		})
	}
}

// TestC018_PublishedTrackWithoutDynamicGroups: the same rule on a
// subscription a PUBLISH started, whose Track Properties came in the
// PUBLISH.
func TestC018_PublishedTrackWithoutDynamicGroups(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		subs := make(chan *Subscription, 1)
		okErr := make(chan error, 1)
		h := HandlerFunc(func(r Request) {
			pr := r.(*PublishRequest)
			if rulesOf(draftOf(t)).publishOKParams {
				// 18 and 19 name PUBLISH_OK too ({#new-group-request}).
				_, err := pr.Accept(wire.Params{NewGroupRequest: wire.Some[uint64](0)})
				okErr <- err
			}
			if sub, err := pr.Accept(wire.Params{}); err == nil {
				subs <- sub
			}
		})
		_, fp := clientSession(t, &Config{Handler: h})
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, wire.KVList{{Type: wire.PropDynamicGroups, Value: 0}}))
		expect[*wire.RequestOK](fs)
		sub := recvOrFail(t, subs)
		if rulesOf(draftOf(t)).publishOKParams {
			assert.ErrorIs(t, recvOrFail(t, okErr), ErrNoDynamicGroups, "NEW_GROUP_REQUEST in PUBLISH_OK")
		}
		assert.ErrorIs(t, sub.Update(fakeCtx(t), wire.Params{NewGroupRequest: wire.Some[uint64](0)}), ErrNoDynamicGroups)
	})
}
