package moqt

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// collect reads every subgroup stream of sub until ctx ends or the
// subscription's data plane ends, returning the Locations received.
func collect(t *testing.T, ctx context.Context, sub *Subscription) []wire.Location {
	t.Helper()
	var got []wire.Location
	for {
		r, err := sub.AcceptSubgroup(ctx)
		if err != nil {
			return got
		}
		for {
			h, err := r.Next()
			if err != nil {
				break
			}
			got = append(got, h.Location)
		}
	}
}

// liveFilterCase is a subscription of TestC024_LiveFilterForms: its
// filter, what it receives, and whether only 21's field-count format has
// the filter's form.
type liveFilterCase struct {
	name       string
	filter     wire.Opt[wire.LocationFilter]
	want       []wire.Location
	fieldCount bool
}

// TestC024_LiveFilterForms subscribes with each LOCATION_FILTER form while
// the track's Largest Object is {5, 3}, publishes around it, and checks
// that exactly the objects inside each filter arrive (§3.3.1, §9.20.10).
// On 18 and 19 the forms their Filter Types lack (a relative start before
// the Next Group, an end at an Object: 18/19 §5.1.2) are left out.
func TestC024_LiveFilterForms(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		loc := func(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }
		cases := []liveFilterCase{
			{"unfiltered", wire.Opt[wire.LocationFilter]{}, []wire.Location{loc(5, 4), loc(6, 0), loc(7, 0), loc(8, 0)}, false},
			{"relative 0: next group", wire.Some(wire.RelativeFilter(0)), []wire.Location{loc(6, 0), loc(7, 0), loc(8, 0)}, false},
			{"relative 1: current group", wire.Some(wire.RelativeFilter(1)), []wire.Location{loc(5, 4), loc(6, 0), loc(7, 0), loc(8, 0)}, true},
			{"next object", wire.Some(wire.NextObjectFilter()), []wire.Location{loc(5, 4), loc(6, 0), loc(7, 0), loc(8, 0)}, false},
			{"absolute start", wire.Some(wire.StartFilter(loc(7, 0))), []wire.Location{loc(7, 0), loc(8, 0)}, false},
			{"start and end group", wire.Some(wire.RangeFilterTo(loc(6, 0), 7)), []wire.Location{loc(6, 0), loc(7, 0)}, false},
			{"start and end object", wire.Some(wire.RangeFilterToObject(loc(5, 4), loc(6, 0))), []wire.Location{loc(5, 4), loc(6, 0)}, true},
			{"entirely in the past", wire.Some(wire.RangeFilterTo(loc(1, 0), 2)), nil, false},
		}
		if draftOf(t).Profile().LocationFilter != wire.FilterFieldCount {
			cases = slices.DeleteFunc(cases, func(c liveFilterCase) bool { return c.fieldCount })
		}
		// One track per case: subscriptions sharing an alias with overlapping
		// filters could not be told apart by the subscriber (§3.1).
		tracks := make([]*LocalTrack, len(cases))
		byName := map[string]*LocalTrack{}
		for i := range cases {
			name := wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte{'t', byte('a' + i)}}
			track, err := NewLocalTrack(name, nil)
			require.NoError(t, err)
			// Objects published before anyone subscribes set Largest Object only.
			w := track.OpenSubgroup(5, 0, SubgroupOptions{})
			for id := uint64(0); id <= 3; id++ {
				require.NoError(t, writeObject(w, id, nil, []byte("old")))
			}
			tracks[i] = track
			byName[string(name.Name)] = track
			t.Cleanup(func() { _ = w.Close() })
		}
		served := make(chan *ServedSubscription, len(cases))
		cfg := &Config{Handler: HandlerFunc(func(r Request) {
			sr, ok := r.(*SubscribeRequest)
			if !ok || byName[string(sr.Track.Name)] == nil {
				DefaultHandler.ServeMOQT(r)
				return
			}
			if ss, err := byName[string(sr.Track.Name)].Accept(sr, AcceptOptions{}); err == nil {
				served <- ss
			}
		})}
		p := newPipePair(t, transport.PipeConfig{}, cfg, nil)
		ctx := testCtx(t, 10*time.Second)
		subs := make([]*Subscription, len(cases))
		for i, c := range cases {
			sub, err := p.client.Subscribe(ctx, tracks[i].Name(), wire.Params{LocationFilter: c.filter})
			require.NoError(t, err, c.name)
			largest, ok := sub.Largest()
			require.True(t, ok)
			assert.Equal(t, loc(5, 3), largest, "SUBSCRIBE_OK carries LARGEST_OBJECT (C016)")
			subs[i] = sub
			<-served
		}
		for _, track := range tracks {
			w := track.OpenSubgroup(5, 1, SubgroupOptions{})
			require.NoError(t, writeObject(w, 4, nil, []byte("new")))
			require.NoError(t, w.Close())
			for g := uint64(6); g <= 8; g++ {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, []byte("new")))
				require.NoError(t, w.Close())
			}
			track.End(wire.DoneTrackEnded, "")
		}
		for i, c := range cases {
			got := collect(t, ctx, subs[i])
			assert.ElementsMatch(t, c.want, got, c.name)
		}
	})
}

// TestDataPublishDoneCountsLateStreams: streams that arrive after
// PUBLISH_DONE are still delivered until the Stream Count is reached
// (§9.9), and the count is exact.
func TestDataPublishDoneCountsLateStreams(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, cfg, served := newServedTrack(t, testTrack, nil)
		p := connect(t, cfg, &Config{DoneLinger: 10 * time.Second})
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		ss := <-served
		for g := uint64(0); g < 3; g++ {
			w := track.OpenSubgroup(g, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte{byte(g)}))
			require.NoError(t, w.Close())
		}
		require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
		waitDone(t, ctx, sub.Done(), "subscription")
		var de *DoneError
		require.ErrorAs(t, sub.Err(), &de)
		assert.Equal(t, uint64(3), de.StreamCount)
		got := collect(t, ctx, sub)
		assert.Len(t, got, 3, "every counted stream is delivered, even after PUBLISH_DONE")
		assert.NoError(t, ctx.Err(), "the data plane ended when the count was reached, not by timeout")
	})
}

// TestDataPublishSendsBeforePublishOK: a PUBLISH-initiated subscription
// sends objects before PUBLISH_OK (§3.1), and they reach the subscriber
// once it accepts.
func TestDataPublishSendsBeforePublishOK(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		release := make(chan struct{})
		subs := make(chan *Subscription, 1)
		clientCfg := &Config{Handler: HandlerFunc(func(r Request) {
			pr, ok := r.(*PublishRequest)
			if !ok {
				DefaultHandler.ServeMOQT(r)
				return
			}
			<-release // answer only once the publisher has sent objects
			if sub, err := pr.Accept(wire.Params{}); err == nil {
				subs <- sub
			}
		})}
		p := connect(t, nil, clientCfg)
		ctx := testCtx(t, 10*time.Second)
		published := make(chan error, 1)
		go func() {
			_, err := track.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
			published <- err
		}()
		// Wait until the PUBLISH is out and the subscription attached.
		settle(t, func() bool { return len(track.snapshot()) == 1 }, "the PUBLISH is out")
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("early")))
		require.NoError(t, w.Close())
		close(release)
		require.NoError(t, <-published)
		sub := <-subs
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("early")}, payloads)
	})
}
