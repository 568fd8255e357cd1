package relay

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// draftPairs are the publisher's and the subscribers' drafts that
// TestAcrossDrafts makes meet in one relay.
var draftPairs = [][2]wire.Version{
	{wire.Draft18, wire.Draft21},
	{wire.Draft21, wire.Draft18},
	{wire.Draft19, wire.Draft20},
	{wire.Draft20, wire.Draft19},
	{wire.Draft18, wire.Draft18},
}

// onDraft is a client Config changer holding the session to draft v.
func onDraft(v wire.Version) func(*moqt.Config) {
	return func(c *moqt.Config) { c.Versions = []wire.Version{v} }
}

// TestAcrossDrafts: sessions of different drafts meet in one relay, each
// spoken to in its own. A publisher's track reaches subscribers of another
// draft unmodified (payloads and Object Properties): a live subscriber
// from its Next Object, and a late joiner with a fill of the current group
// (a fill stream on 20 and 21, a joining FETCH on 18 and 19), each object
// once; a FETCH of the past groups; and the publisher's end.
func TestAcrossDrafts(t *testing.T) {
	for _, p := range draftPairs {
		t.Run(fmt.Sprintf("pub%d-sub%d", p[0], p[1]), func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) { testAcrossDrafts(t, scheme, p[0], p[1]) })
		})
	}
}

func testAcrossDrafts(t *testing.T, scheme string, pubV, subV wire.Version) {
	n := startNode(t, scheme, Config{}, &moqt.Config{Versions: wire.Versions})
	pub := n.newPublisherConfig("/pub", testTrack, wire.KVList{{Type: 0x1234, Value: 7}}, onDraft(pubV))
	pub.track.SetCache(moqt.CacheLimits{Objects: 1000})
	n.announce(pub, wire.NewNamespace("live"))
	require.Equal(t, pubV, pub.client.Version())
	require.Equal(t, pubV, pub.server.Version(), "the relay speaks the publisher's draft to it")

	ctx := fetchCtx(t)
	live, liveSrv := n.dialConfig("/live", n.clientConfigOn(subV))
	require.Equal(t, subV, live.Version())
	require.Equal(t, subV, liveSrv.Version(), "the relay speaks the subscriber's draft to it")
	sub, err := live.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
	require.NoError(t, err)
	assert.Equal(t, wire.KVList{{Type: 0x1234, Value: 7}}, sub.Properties(), "Track Properties across drafts")

	// Group 0 whole, then group 1 begun: the late joiner comes mid-group.
	w := func(g, o uint64, last bool) moqt.Object {
		return moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: payload(g, o),
			Properties: props(t, wire.KeyValue{Type: 0x22, Value: g*10 + o}), EndOfGroup: last}
	}
	g0 := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{Properties: true})
	for o := range uint64(3) {
		require.NoError(t, g0.WriteObject(w(0, o, false)))
	}
	require.NoError(t, g0.Close())
	g1 := pub.track.OpenSubgroup(1, 0, moqt.SubgroupOptions{Properties: true})
	require.NoError(t, g1.WriteObject(w(1, 0, false)))
	require.NoError(t, g1.WriteObject(w(1, 1, false)))
	for range 5 {
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		want := w(o.Location.Group, o.Location.Object, false)
		assert.Equal(t, want.Payload, o.Payload)
		assert.Equal(t, want.Properties, o.Properties, "Object Properties unmodified at %v", o.Location)
	}

	late, _ := n.dialConfig("/late", n.clientConfigOn(subV))
	lsub, err := late.Subscribe(ctx, testTrack, wire.Params{
		LocationFilter: wire.Some(wire.NextObjectFilter()),
		// The current group from its start (§3.4: one group back from the
		// Next Group).
		FillParameters: &wire.Params{LocationFilter: wire.Some(wire.LocationFilter{Fields: 1, StartGroup: 1})},
	})
	require.NoError(t, err)
	require.NoError(t, g1.WriteObject(w(1, 2, false)))
	require.NoError(t, g1.Close())
	var got []wire.Location
	for range 3 {
		o, err := lsub.ReadObject(ctx)
		require.NoError(t, err)
		require.Zero(t, o.EndOfRange, "at %v", o.Location)
		assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
		assert.Equal(t, w(o.Location.Group, o.Location.Object, false).Properties, o.Properties, "Object Properties at %v", o.Location)
		got = append(got, o.Location)
	}
	assert.Equal(t, groupsWant(1, 2, 3, false), got, "the late joiner: group 1 from its start, each object once")
	o, err := sub.ReadObject(ctx)
	require.NoError(t, err)
	assert.Equal(t, wire.Location{Group: 1, Object: 2}, o.Location)

	f, err := late.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.LocationFilter{Fields: 3, StartGroup: 0, EndGroup: 0})})
	require.NoError(t, err)
	objs, err := readFetch(ctx, f)
	require.NoError(t, err)
	var fetched []moqt.Object
	for _, o := range objs {
		if o.EndOfRange == 0 { // the rest of group 0 may be reported unknown: nothing said it ended
			fetched = append(fetched, o)
		}
	}
	assert.Equal(t, groupsWant(0, 1, 3, false), locs(fetched), "FETCH of group 0 across drafts")

	pub.track.End(wire.DoneTrackEnded, "done")
	for _, s := range []*moqt.Subscription{sub, lsub} {
		assert.Equal(t, wire.DoneTrackEnded, doneCode(t, s), "the publisher's end across drafts")
	}
}

// clientConfigOn is clientConfig holding the session to draft v.
func (n *node) clientConfigOn(v wire.Version) *moqt.Config {
	cfg := n.clientConfig(nil)
	onDraft(v)(cfg)
	return cfg
}

// TestFetchForwardedAcrossDrafts: a FETCH of a track the relay does not
// carry goes whole to the publisher, in the publisher's draft. A draft 21
// FETCH whose LOCATION_FILTER starts relative to the Largest Object
// (§9.20.10), which the Standalone FETCH of 18 and 19 cannot carry (18
// §10.12.1), is resolved against the publisher's Largest Object first, and
// one that starts past it (the Next Object) is INVALID_RANGE (§9.11), as
// from a draft 21 publisher. INCLUDE_PROPERTIES 0, which 18 and 19 lack,
// is the relay's to honour (§9.20.22).
func TestFetchForwardedAcrossDrafts(t *testing.T) {
	props := wire.KVList{{Type: 0x1234, Value: 7}}
	for _, v := range []wire.Version{wire.Draft18, wire.Draft19, wire.Draft21} {
		t.Run(fmt.Sprintf("pub%d", v), func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, &moqt.Config{Versions: wire.Versions})
				pub := newFetchPubConfig(n, "/pub", props, onDraft(v), nil)
				require.Equal(t, v, pub.client.Version())
				for g := range uint64(3) {
					writeGroup(t, pub.track, g, 3)
				}
				c, _ := n.dial("/sub", nil)
				require.Equal(t, wire.Draft21, c.Version())
				ctx := fetchCtx(t)
				for _, include := range []bool{true, false} {
					f, err := c.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(2)),
						IncludeProperties: wire.Some(include)})
					require.NoError(t, err, "relative start, INCLUDE_PROPERTIES %v", include)
					if include {
						assert.Equal(t, props, f.Properties)
					} else {
						assert.Empty(t, f.Properties)
					}
					assert.Equal(t, wire.Location{Group: 2, Object: 2}, f.End)
					got, err := readFetch(ctx, f)
					require.NoError(t, err)
					assert.Equal(t, groupsWant(1, 3, 3, false), locs(got), "one group back from the Next Group")
				}
				_, err := c.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
				require.Error(t, err)
				assert.Equal(t, wire.ReqInvalidRange, requestCode(t, err))
			})
		})
	}
}

// TestRefusalAcrossDrafts: a publisher's REQUEST_ERROR reaches a requester
// of another draft with its code when that draft has it, and as
// INTERNAL_ERROR naming it when not (§13: what that draft reads an unknown
// code as), SUBSCRIBE and forwarded FETCH alike. Before, the relay's
// answer failed to encode and the requester got INTERNAL_ERROR "request not
// answered", the publisher's reason lost.
func TestRefusalAcrossDrafts(t *testing.T) {
	for _, c := range []struct {
		pub, sub   wire.Version
		code, want wire.RequestErrorCode
	}{
		{wire.Draft18, wire.Draft21, wire.ReqDuplicateSubscription, wire.ReqInternalError},
		{wire.Draft18, wire.Draft18, wire.ReqDuplicateSubscription, wire.ReqDuplicateSubscription},
		{wire.Draft21, wire.Draft18, wire.ReqInvalidFilter, wire.ReqInternalError},
		{wire.Draft21, wire.Draft19, wire.ReqInvalidFilter, wire.ReqInvalidFilter},
		{wire.Draft19, wire.Draft21, wire.ReqInvalidJoiningRequestID, wire.ReqInternalError},
	} {
		t.Run(fmt.Sprintf("pub%d-sub%d-%s", c.pub, c.sub, c.code), func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, &moqt.Config{Versions: wire.Versions})
				const reason = "refused by test publisher"
				pub := newFetchPubConfig(n, "/pub", nil, onDraft(c.pub), func(r *moqt.FetchRequest) { _ = r.Reject(c.code, reason) })
				writeGroup(t, pub.track, 0, 1)
				sub := n.newPublisherConfig("/subpub", wire.FullTrackName{Namespace: wire.NewNamespace("other"), Name: []byte("t")}, nil, onDraft(c.pub))
				sub.setRefuse(c.code)
				n.announce(sub, wire.NewNamespace("other"))
				cl, _ := n.dialConfig("/sub", n.clientConfigOn(c.sub))
				ctx := fetchCtx(t)
				check := func(what string, err error) {
					var re *moqt.RequestError
					require.ErrorAs(t, err, &re, what)
					assert.Equal(t, c.want, re.Code, what)
					assert.Contains(t, re.Reason, reason, what)
					if c.want != c.code {
						assert.Contains(t, re.Reason, c.code.String(), what)
					}
				}
				_, err := cl.Fetch(ctx, testTrack, wire.Params{})
				check("FETCH", err)
				_, err = cl.Subscribe(ctx, sub.track.Name(), wire.Params{})
				check("SUBSCRIBE", err)
			})
		})
	}
}

// TestFetchRangeFiltersForwarded: a FETCH with Range filters (§3.3.2),
// forwarded whole to a publisher that cannot take them (draft 18 has none;
// a draft 21 publisher's MAX_FILTER_RANGES is 0 by default), is sent
// without them, and the relay leaves out what they do not pass: the
// requester gets what it asked for, not INTERNAL_ERROR.
func TestFetchRangeFiltersForwarded(t *testing.T) {
	for _, v := range []wire.Version{wire.Draft18, wire.Draft21} {
		t.Run(fmt.Sprintf("pub%d", v), func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, &moqt.Config{Versions: wire.Versions, MaxFilterRanges: 4})
				pub := newFetchPubConfig(n, "/pub", nil, onDraft(v), nil)
				for g := range uint64(3) {
					writeGroup(t, pub.track, g, 3)
				}
				c, _ := n.dial("/sub", nil)
				ctx := fetchCtx(t)
				f, err := c.Fetch(ctx, testTrack, wire.Params{RangeFilters: []wire.RangeFilter{
					{Type: wire.ParamObjectIDFilter, Ranges: []wire.Range{{Start: 1, End: 1}}}}})
				require.NoError(t, err)
				got, err := readFetch(ctx, f)
				require.NoError(t, err)
				var objs []wire.Location
				for _, o := range got {
					if o.EndOfRange == 0 {
						objs = append(objs, o.Location)
					}
				}
				assert.Equal(t, []wire.Location{{Group: 0, Object: 1}, {Group: 1, Object: 1}, {Group: 2, Object: 1}}, objs)
			})
		})
	}
}
