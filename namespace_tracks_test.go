package moqt

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// offered is a PUBLISH a tracksSubscriber accepted, with its subscription.
type offered struct {
	req *PublishRequest
	sub *Subscription
}

// tracksSubscriber is a client Handler that accepts every PUBLISH.
type tracksSubscriber struct{ got chan offered }

func (h *tracksSubscriber) ServeMOQT(r Request) {
	pr, ok := r.(*PublishRequest)
	if !ok {
		DefaultHandler.ServeMOQT(r)
		return
	}
	if sub, err := pr.Accept(wire.Params{}); err == nil {
		h.got <- offered{req: pr, sub: sub}
	}
}

// objectIDs reads sub to its end and returns the Object IDs it carried
// and how it ended.
func objectIDs(t *testing.T, sub *Subscription) ([]uint64, error) {
	t.Helper()
	ctx := testCtx(t, 10*time.Second)
	var ids []uint64
	for {
		o, err := sub.ReadObject(ctx)
		if err != nil {
			return ids, err
		}
		ids = append(ids, o.Location.Object)
	}
}

// publishObjects writes objects 0 to 4 of group 0 on one subgroup of lt
// and ends ss, a subscription to it, with TRACK_ENDED.
func publishObjects(t *testing.T, lt *LocalTrack, ss *ServedSubscription) {
	t.Helper()
	w := lt.OpenSubgroup(0, 0, SubgroupOptions{})
	for o := range uint64(5) {
		require.NoError(t, w.WriteObject(Object{Location: wire.Location{Object: o}, Payload: []byte{byte(o)}}))
	}
	require.NoError(t, w.Close())
	require.NoError(t, ss.End(wire.DoneTrackEnded, "over"))
}

// TestPublishTracksParams: a SUBSCRIBE_TRACKS's parameters are the initial
// parameters of each subscription its PUBLISHes start (§9.18.1). Those
// PUBLISH carries go in it, never the request's AUTHORIZATION_TOKENs
// (§9.20.3); INCLUDE_PROPERTIES 0 empties its Track Properties
// (§9.20.22); the object Range filters, which PUBLISH cannot carry, are
// the subscription's on both ends: the publisher sends only the objects
// that pass them (§3.3.3), and the subscriber's end holds them. A PUBLISH
// outside the request's prefix is none of its results; one under a prefix
// its update asked for is. An update's FORWARD is in the writer's Params
// for the PUBLISHes after it (§9.20.19).
func TestPublishTracksParams(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		cam := wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}
		other := wire.FullTrackName{Namespace: wire.NewNamespace("other"), Name: []byte("x")}
		vod := wire.FullTrackName{Namespace: wire.NewNamespace("vod", "a"), Name: []byte("y")}
		props := wire.KVList{{Type: 0x40, Value: 7}}
		filters := []wire.RangeFilter{{Type: wire.ParamObjectIDFilter, Ranges: []wire.Range{{Start: 1, End: 2}}}}
		h := newNSServer()
		client := &tracksSubscriber{got: make(chan offered, 4)}
		p := connect(t, &Config{Handler: h, MaxFilterRanges: 4}, &Config{Handler: client})
		ctx := testCtx(t, 10*time.Second)

		req := wire.Params{
			SubscriberPriority:  wire.Some[uint8](9),
			IncludeProperties:   wire.Some(false),
			RangeFilters:        filters,
			AuthorizationTokens: []wire.Token{tokVal("secret")},
		}
		nsub, err := p.client.SubscribeTracks(ctx, wire.NewNamespace("live"), req)
		require.NoError(t, err)
		w := recvOrFail(t, h.writers)
		wp := w.Params()
		assert.Empty(t, wp.AuthorizationTokens, "the request's tokens authorized it, and go nowhere else")
		assert.Equal(t, filters, wp.RangeFilters)

		lt, err := NewLocalTrack(cam, props)
		require.NoError(t, err)
		ss, err := lt.PublishTracks(ctx, p.server, wp, AcceptOptions{})
		require.NoError(t, err)
		got := recvOrFail(t, client.got)
		assert.Equal(t, wire.Some[uint8](9), got.req.Params.SubscriberPriority)
		assert.Empty(t, got.req.Params.AuthorizationTokens)
		assert.Empty(t, got.req.Properties, "INCLUDE_PROPERTIES 0")
		assert.Equal(t, filters, ss.Params().RangeFilters, "the publisher applies the filters")
		assert.Equal(t, filters, got.sub.Params().RangeFilters, "the subscriber holds them")
		publishObjects(t, lt, ss)
		ids, err := objectIDs(t, got.sub)
		var done *DoneError
		require.True(t, errors.As(err, &done), "ended by PUBLISH_DONE, got %v", err)
		assert.Equal(t, []uint64{1, 2}, ids, "the objects inside the OBJECTID_FILTER, and only those")

		// A PUBLISH outside the prefix is none of the request's.
		olt, err := NewLocalTrack(other, props)
		require.NoError(t, err)
		oss, err := olt.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
		require.NoError(t, err)
		got = recvOrFail(t, client.got)
		assert.Empty(t, got.sub.Params().RangeFilters)
		assert.Equal(t, props, got.req.Properties)
		publishObjects(t, olt, oss)
		ids, _ = objectIDs(t, got.sub)
		assert.Equal(t, []uint64{0, 1, 2, 3, 4}, ids)

		// After a prefix update, a PUBLISH under the new prefix is one of
		// the request's; the update's FORWARD is the new PUBLISHes'.
		require.NoError(t, nsub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("vod")),
			Forward: wire.Some(false)}))
		wp = w.Params()
		assert.Equal(t, wire.Some(false), wp.Forward)
		assert.False(t, wp.TrackNamespacePrefix.Set, "the prefix is the writer's Prefix")
		vlt, err := NewLocalTrack(vod, nil)
		require.NoError(t, err)
		_, err = vlt.PublishTracks(ctx, p.server, wp, AcceptOptions{})
		require.NoError(t, err)
		got = recvOrFail(t, client.got)
		assert.Equal(t, wire.Some(false), got.req.Params.Forward)
		assert.Equal(t, filters, got.sub.Params().RangeFilters)

		_, err = vlt.PublishTracks(ctx, p.server, wire.Params{FillParameters: &wire.Params{}}, AcceptOptions{})
		assert.ErrorIs(t, err, ErrFillOnTracks)
		require.NoError(t, nsub.Close())
	})
}

// TestSubscribeTracksFillRefused: no fill is defined for a subscription a
// PUBLISH starts (§3.4, namespace_tracks.go), so a SUBSCRIBE_TRACKS with
// FILL_PARAMETERS is refused with NOT_SUPPORTED before the Handler, which
// would otherwise serve it without its fills, and lets go of its prefix;
// this end does not send one.
func TestSubscribeTracksFillRefused(t *testing.T) {
	forServerSessions(t, "refused", func(t *testing.T, connect fakeConnector) {
		h := newNSServer()
		_, fp := connect(t, &Config{Handler: h})
		fs := fp.open(&wire.SubscribeTracks{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("live"),
			Parameters: wire.Params{FillParameters: &wire.Params{}}})
		e := expect[*wire.RequestError](fs)
		assert.Equal(t, wire.ReqNotSupported, e.ErrorCode)
		assert.Equal(t, fillOnTracksReason, e.ErrorReason)
		fs.expectFIN()
		again := fp.open(&wire.SubscribeTracks{RequestID: 2, TrackNamespacePrefix: wire.NewNamespace("live")})
		expect[*wire.RequestOK](again)
		r := recvOrFail(t, h.reqs)
		assert.Nil(t, r.Params.FillParameters, "the Handler saw only the second request")
	})
	forClientSessions(t, "not sent", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{})
		_, err := s.SubscribeTracks(fakeCtx(t), wire.NewNamespace("live"), wire.Params{FillParameters: &wire.Params{}})
		assert.ErrorIs(t, err, ErrFillOnTracks)
		// The next request is the first the fake peer sees, with the
		// first Request ID: the refused one sent nothing.
		ctx := fakeCtx(t)
		go func() { _, _ = s.SubscribeTracks(ctx, wire.NewNamespace("live"), wire.Params{}) }()
		m := expect[*wire.SubscribeTracks](fp.accept())
		assert.Equal(t, uint64(0), m.RequestID)
		assert.Nil(t, m.Parameters.FillParameters)
	})
}

// TestPublishTracksParamsUnsentOn19: draft 19's PUBLISH carries FORWARD
// alone of a SUBSCRIBE_TRACKS's parameters (19 §10.19.1; GROUP_ORDER,
// SUBSCRIBER_PRIORITY, LOCATION_FILTER and the delivery timeouts may not
// appear in it, §10.2), so PublishTracks sends FORWARD and holds the rest
// as the subscription's until the subscriber's PUBLISH_OK gives its own.
// Before, the PUBLISH failed to encode and was never sent: a relay
// answered such a SUBSCRIBE_TRACKS with PUBLISH_SKIPPED for every track.
func TestPublishTracksParamsUnsentOn19(t *testing.T) {
	eachDraft(t, []wire.Version{wire.Draft19}, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			cam := wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}
			h := newNSServer()
			client := &tracksSubscriber{got: make(chan offered, 1)}
			p := connect(t, &Config{Handler: h}, &Config{Handler: client})
			ctx := testCtx(t, 10*time.Second)
			req := wire.Params{
				Forward:                 wire.Some(true),
				SubscriberPriority:      wire.Some[uint8](9),
				GroupOrder:              wire.Some(wire.GroupOrderDescending),
				LocationFilter:          wire.Some(wire.StartFilter(wire.Location{Object: 2})),
				ObjectDeliveryTimeout:   wire.Some[uint64](5000),
				SubgroupDeliveryTimeout: wire.Some[uint64](6000),
			}
			nsub, err := p.client.SubscribeTracks(ctx, wire.NewNamespace("live"), req)
			require.NoError(t, err)
			w := recvOrFail(t, h.writers)
			lt, err := NewLocalTrack(cam, nil)
			require.NoError(t, err)
			ss, err := lt.PublishTracks(ctx, p.server, w.Params(), AcceptOptions{})
			require.NoError(t, err, "the PUBLISH goes")
			got := recvOrFail(t, client.got)
			assert.Equal(t, wire.Params{Forward: wire.Some(true)}, got.req.Params, "FORWARD alone is sent")
			// The subscriber's PUBLISH_OK, empty, gives the defaults (19
			// §10.2: "If omitted from ... PUBLISH_OK, the subscription is
			// unfiltered", priority 128).
			assert.False(t, ss.Params().LocationFilter.Set)
			assert.False(t, ss.Params().SubscriberPriority.Set)
			publishObjects(t, lt, ss)
			ids, err := objectIDs(t, got.sub)
			var done *DoneError
			require.True(t, errors.As(err, &done), "ended by PUBLISH_DONE, got %v", err)
			assert.Equal(t, []uint64{0, 1, 2, 3, 4}, ids)
			require.NoError(t, nsub.Close())
		})
	})
}
