package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// The parameters of a SUBSCRIBE_TRACKS that PUBLISH cannot carry are the
// initial parameters of every subscription its PUBLISHes start (§9.18.1):
// the relay applies them per track, or refuses the request; it never
// drops them.

// rangeObject is an object of the tracks the range filter tests publish:
// in each group, Object ID o is on subgroup o%3, whose Publisher
// Priority is rangePriorities[o%3].
type rangeObject struct {
	Group, Object, Subgroup uint64
	Priority                uint8
	Payload                 string
}

var rangePriorities = [3]uint8{10, 100, 200}

// publishRangeGroups writes groups 0 and 1 of tr, twelve objects each on
// three subgroups (rangeObject), every subgroup closed with a FIN.
func publishRangeGroups(t *testing.T, tr *moqt.LocalTrack) []rangeObject {
	t.Helper()
	var all []rangeObject
	for g := range uint64(2) {
		var ws [3]*moqt.SubgroupWriter
		for s := range ws {
			ws[s] = tr.OpenSubgroup(g, uint64(s), moqt.SubgroupOptions{Priority: wire.Some(rangePriorities[s])})
		}
		for o := range uint64(12) {
			s := o % 3
			require.NoError(t, ws[s].WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, SubgroupID: s, Payload: payload(g, o)}))
			all = append(all, rangeObject{Group: g, Object: o, Subgroup: s, Priority: rangePriorities[s], Payload: string(payload(g, o))})
		}
		for _, w := range ws {
			require.NoError(t, w.Close())
		}
	}
	return all
}

// readToEnd reads every object of sub until it ends, and returns them with
// the subscription's end.
func readToEnd(t *testing.T, sub *moqt.Subscription) ([]rangeObject, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []rangeObject
	for {
		o, err := sub.ReadObject(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, rangeObject{Group: o.Location.Group, Object: o.Location.Object, Subgroup: o.SubgroupID,
			Priority: o.Priority.Value, Payload: string(o.Payload)})
	}
}

// TestSubscribeTracksRangeFilters: the object Range filters of a
// SUBSCRIBE_TRACKS (§3.3.2) apply to each subscription its PUBLISHes
// start, though PUBLISH cannot carry them (§9.8, §9.18.1): the relay, the
// publisher of those subscriptions, sends every object inside them and
// none outside (§3.3.3), and the subscriber's end of each subscription
// holds them (Params).
func TestSubscribeTracksRangeFilters(t *testing.T) {
	cases := []struct {
		name   string
		filter wire.RangeFilter
		pass   func(o rangeObject) bool
	}{
		{"OBJECTID_FILTER", wire.RangeFilter{Type: wire.ParamObjectIDFilter, Ranges: []wire.Range{{Start: 4, End: 8}}},
			func(o rangeObject) bool { return o.Object >= 4 && o.Object <= 8 }},
		{"SUBGROUP_FILTER", wire.RangeFilter{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: 1, End: 1}}},
			func(o rangeObject) bool { return o.Subgroup == 1 }},
		{"PRIORITY_FILTER", wire.RangeFilter{Type: wire.ParamPriorityFilter, Ranges: []wire.Range{{Start: 0, End: 100}}},
			func(o rangeObject) bool { return o.Priority <= 100 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, &moqt.Config{MaxFilterRanges: 4})
				pc, _ := n.dial("/pub", nil)
				tr := newTrack(t, testTrack)
				pss, err := publishTo(t, pc, tr, wire.Params{})
				require.NoError(t, err)

				sh := &tracksClient{}
				sc, _ := n.dial("/sub", sh)
				_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{RangeFilters: []wire.RangeFilter{tc.filter}})
				require.NoError(t, err)
				settled(t, "the PUBLISHed subscription", func() bool { return sh.subscription(0) != nil })
				sub := sh.subscription(0)
				assert.Equal(t, []wire.RangeFilter{tc.filter}, sub.Params().RangeFilters,
					"the subscriber's end holds the SUBSCRIBE_TRACKS's filters")
				settled(t, "Forward=1 upstream", func() bool { return n.relay.upstreamForwarding(testTrack) && pss.Forward() })

				var want []rangeObject
				for _, o := range publishRangeGroups(t, tr) {
					if tc.pass(o) {
						want = append(want, o)
					}
				}
				require.NotEmpty(t, want)
				require.NoError(t, pss.End(wire.DoneTrackEnded, "over"))
				got, err := readToEnd(t, sub)
				var done *moqt.DoneError
				require.True(t, errors.As(err, &done), "the subscription ends with the track, got %v", err)
				assert.Equal(t, wire.DoneTrackEnded, done.Code)
				assert.ElementsMatch(t, want, got, "every object inside the filter, none outside")
			})
		})
	}
}

// TestSubscribeTracksFillRefused: a SUBSCRIBE_TRACKS with FILL_PARAMETERS
// is refused with NOT_SUPPORTED and a reason that says why and what to do
// instead: no fill fetch stream is defined for a subscription a PUBLISH
// starts (§3.4, §3.4.1, §9.20.16), and serving the request without its
// fills would drop them. Sent raw, as this library refuses to send one.
func TestSubscribeTracksFillRefused(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		_, err := publishTo(t, pc, newTrack(t, testTrack), wire.Params{})
		require.NoError(t, err)
		h := dialHostile(t, n, "/raw")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		str, err := h.conn.OpenStreamSync(ctx)
		require.NoError(t, err)
		b, err := wire.AppendMessage(wire.Versions[0], nil, &wire.SubscribeTracks{RequestID: 0,
			TrackNamespacePrefix: wire.NewNamespace("live"),
			Parameters:           wire.Params{FillParameters: &wire.Params{LocationFilter: wire.Some(wire.LocationFilter{Fields: 1, StartGroup: 1})}}})
		require.NoError(t, err)
		_, err = str.Write(b)
		require.NoError(t, err)
		m, err := wire.NewMessageReader(str).ReadMessage(wire.Versions[0])
		require.NoError(t, err)
		re, ok := m.(*wire.RequestError)
		require.True(t, ok, "got %s, want REQUEST_ERROR", m.Type())
		assert.Equal(t, wire.ReqNotSupported, re.ErrorCode)
		assert.Equal(t, moqt.ErrFillOnTracks.Error(), "moqt: "+re.ErrorReason)
		assert.Zero(t, n.relay.tracksSubs(), "nothing served")
	})
}

// TestSubscribeTracksPublishParams: INCLUDE_PROPERTIES 0 in a
// SUBSCRIBE_TRACKS sends its PUBLISHes with no Track Properties
// (§9.20.22), while another subscriber's carry them; a REQUEST_UPDATE's
// FORWARD applies to the PUBLISHes after it (§9.20.19).
func TestSubscribeTracksPublishParams(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		_, err := publishTo(t, pc, levelTrack(t, "a", 1), wire.Params{})
		require.NoError(t, err)

		bare, full := &tracksClient{}, &tracksClient{}
		bc, _ := n.dial("/bare", bare)
		fc, _ := n.dial("/full", full)
		breq, err := subscribeNS(t, bc, wire.NewNamespace("live"), true, wire.Params{IncludeProperties: wire.Some(false)})
		require.NoError(t, err)
		_, err = subscribeNS(t, fc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "both PUBLISHes", func() bool { return len(bare.published()) == 1 && len(full.published()) == 1 })
		bare.mu.Lock()
		full.mu.Lock()
		assert.Empty(t, bare.pubs[0].Properties, "INCLUDE_PROPERTIES 0")
		assert.Equal(t, wire.KVList{{Type: 0x40, Value: 1}}, full.pubs[0].Properties)
		assert.False(t, bare.pubs[0].Params.Forward.Set, "no FORWARD asked for")
		bare.mu.Unlock()
		full.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, breq.Update(ctx, wire.Params{Forward: wire.Some(false)}))
		_, err = publishTo(t, pc, levelTrack(t, "b", 1), wire.Params{})
		require.NoError(t, err)
		settled(t, "the later PUBLISH", func() bool { return len(bare.published()) == 2 })
		bare.mu.Lock()
		defer bare.mu.Unlock()
		assert.Equal(t, wire.Some(false), bare.pubs[1].Params.Forward, "the update's FORWARD")
		assert.Empty(t, bare.pubs[1].Properties)
	})
}

// TestSubscribeTracksNewGroupRequest: a NEW_GROUP_REQUEST in a
// SUBSCRIBE_TRACKS is each resulting subscription's (§9.18.1); the relay
// passes it on to the publisher of a track with DYNAMIC_GROUPS = 1 as it
// does a SUBSCRIBE's on an Established track (§9.20.20).
func TestSubscribeTracksNewGroupRequest(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		tr, err := moqt.NewLocalTrack(testTrack, wire.KVList{{Type: wire.PropDynamicGroups, Value: 1}})
		require.NoError(t, err)
		asked := make(chan uint64, 4)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = tr.Publish(ctx, pc, wire.Params{}, moqt.AcceptOptions{OnUpdate: func(_ *moqt.ServedSubscription, p *wire.Params) error {
			if p.NewGroupRequest.Set {
				asked <- p.NewGroupRequest.Value
			}
			return nil
		}})
		require.NoError(t, err)
		sh := &tracksClient{}
		sc, _ := n.dial("/sub", sh)
		_, err = subscribeNS(t, sc, wire.NewNamespace("live"), true, wire.Params{NewGroupRequest: wire.Some[uint64](0)})
		require.NoError(t, err)
		select {
		case v := <-asked:
			assert.Equal(t, uint64(0), v)
		case <-ctx.Done():
			t.Fatal("no NEW_GROUP_REQUEST reached the publisher")
		}
	})
}

// TestSubscribeTracksFillByUpdate: what FILL_PARAMETERS in SUBSCRIBE_TRACKS
// cannot do, a REQUEST_UPDATE with FILL_PARAMETERS on the subscription a
// PUBLISH started does (§9.5.1, §3.4): its fill fetch stream carries the
// update's Request ID. A subscriber that joins after group 0 fills the
// current group from its start (§3.5) out of the relay's cache.
func TestSubscribeTracksFillByUpdate(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		tr := newTrack(t, testTrack)
		pss, err := publishTo(t, pc, tr, wire.Params{})
		require.NoError(t, err)
		first := &tracksClient{}
		fc, _ := n.dial("/first", first)
		_, err = subscribeNS(t, fc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "the first subscriber's subscription", func() bool { return first.subscription(0) != nil })
		settled(t, "Forward=1 upstream", func() bool { return n.relay.upstreamForwarding(testTrack) && pss.Forward() })
		writeGroup(t, tr, 0, 3)
		objs, err := readSubgroup(t, first.subscription(0))
		require.NoError(t, err)
		require.Len(t, objs, 3, "the relay has group 0")

		late := &tracksClient{}
		lc, _ := n.dial("/late", late)
		_, err = subscribeNS(t, lc, wire.NewNamespace("live"), true, wire.Params{})
		require.NoError(t, err)
		settled(t, "the late subscriber's subscription", func() bool { return late.subscription(0) != nil })
		sub := late.subscription(0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, sub.Update(ctx, wire.Params{FillParameters: &wire.Params{
			LocationFilter: wire.Some(wire.LocationFilter{Fields: 1, StartGroup: 1})}}))
		var got []string
		for range 3 {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			got = append(got, string(o.Payload))
		}
		assert.Equal(t, []string{"0/0", "0/1", "0/2"}, got, "group 0 from its start, by the fill")
	})
}
