package moqt

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// End-to-end FETCH and fill between two library sessions, over both Pipes
// in synctest bubbles: the publisher's LocalTrack answers from its cache,
// the subscriber reads with Session.Fetch and Subscription.ReadObject.

// fetchTrack serves testTrack, with a cache of limits, to SUBSCRIBE and
// FETCH alike, over connect.
func fetchTrack(t *testing.T, connect connector, limits CacheLimits) (*LocalTrack, *pair) {
	t.Helper()
	track, err := NewLocalTrack(testTrack, nil)
	require.NoError(t, err)
	track.SetCache(limits)
	cfg := &Config{Handler: HandlerFunc(func(r Request) {
		switch r := r.(type) {
		case *SubscribeRequest:
			_, _ = track.Accept(r, AcceptOptions{})
		case *FetchRequest:
			_ = track.Fetch(r)
		default:
			DefaultHandler.ServeMOQT(r)
		}
	})}
	return track, connect(t, cfg, nil)
}

// publishGroups writes groups [from, to) on the track, one subgroup of
// perGroup objects each, skipping the Locations in skip; the payload names
// the Location.
func publishGroups(t *testing.T, track *LocalTrack, from, to uint64, perGroup uint64, skip map[wire.Location]bool) {
	t.Helper()
	publishGroupsWith(t, track, from, to, perGroup, skip, SubgroupOptions{})
}

// publishGroupsWith is publishGroups on subgroups opened with opts.
func publishGroupsWith(t *testing.T, track *LocalTrack, from, to uint64, perGroup uint64, skip map[wire.Location]bool, opts SubgroupOptions) {
	t.Helper()
	for g := from; g < to; g++ {
		w := track.OpenSubgroup(g, 0, opts)
		for o := range perGroup {
			l := wire.Location{Group: g, Object: o}
			if skip[l] {
				continue
			}
			require.NoError(t, w.WriteObject(Object{Location: l, Payload: locPayload(l)}))
		}
		require.NoError(t, w.Close())
	}
}

func locPayload(l wire.Location) []byte { return []byte(l.String()) }

// readFetchAll reads every entry of f up to its FIN.
func readFetchAll(t *testing.T, ctx context.Context, f *Fetch) []Object {
	t.Helper()
	var got []Object
	for {
		o, err := f.ReadObject(ctx)
		if err == io.EOF {
			return got
		}
		require.NoError(t, err)
		got = append(got, o)
	}
}

func locations(objs []Object) []wire.Location {
	var ls []wire.Location
	for _, o := range objs {
		ls = append(ls, o.Location)
	}
	return ls
}

// TestFetchEndToEnd fetches a cached track whole and in part, ascending
// and descending (C094): every published object once, in the requested
// group order and by Object ID within a group, payloads intact, the
// objects never published absent (gaps mean they do not exist, §9.11).
func TestFetchEndToEnd(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, p := fetchTrack(t, connect, CacheLimits{Objects: 1000})
		skip := map[wire.Location]bool{{Group: 1, Object: 2}: true}
		publishGroups(t, track, 0, 4, 4, skip)
		ctx := testCtx(t, 30*time.Second)

		var asc []wire.Location
		for g := range uint64(4) {
			for o := range uint64(4) {
				if l := (wire.Location{Group: g, Object: o}); !skip[l] {
					asc = append(asc, l)
				}
			}
		}
		f, err := p.client.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 3, Object: 3}, f.End, "no filter: up to Largest Object (§3.3.1)")
		assert.False(t, f.EndOfTrack)
		got := readFetchAll(t, ctx, f)
		assert.Equal(t, asc, locations(got))
		for _, o := range got {
			assert.Equal(t, locPayload(o.Location), o.Payload)
		}

		f, err = p.client.Fetch(ctx, testTrack, wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)})
		require.NoError(t, err)
		var desc []wire.Location
		for g := 3; g >= 0; g-- {
			for _, l := range asc {
				if l.Group == uint64(g) {
					desc = append(desc, l)
				}
			}
		}
		assert.Equal(t, desc, locations(readFetchAll(t, ctx, f)), "descending: groups high to low, objects ascending")

		rng := wire.RangeFilterToObject(wire.Location{Group: 1, Object: 1}, wire.Location{Group: 2, Object: 1})
		f, err = p.client.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(rng)})
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 2, Object: 1}, f.End)
		assert.Equal(t, []wire.Location{{Group: 1, Object: 1}, {Group: 1, Object: 3}, {Group: 2, Object: 0}, {Group: 2, Object: 1}},
			locations(readFetchAll(t, ctx, f)))

		_, err = p.client.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 9}))})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqInvalidRange, re.Code, "start after Largest Object (C093)")
	})
}

// TestFetchEvictedRangeIsUnknown fetches a track whose cache has evicted
// its oldest objects: the evicted range comes first as an End of Unknown
// Range, never as silence, then the objects still cached.
func TestFetchEvictedRangeIsUnknown(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, p := fetchTrack(t, connect, CacheLimits{Objects: 4})
		publishGroups(t, track, 0, 3, 4, nil) // 12 objects; groups 0 and 1 evicted
		ctx := testCtx(t, 30*time.Second)
		f, err := p.client.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		got := readFetchAll(t, ctx, f)
		require.NotEmpty(t, got)
		assert.Equal(t, wire.EndOfUnknownRange, got[0].EndOfRange)
		assert.True(t, got[0].Location.Less(wire.Location{Group: 2}), "the gap ends before the cached group: %v", got[0].Location)
		var objs []wire.Location
		for _, o := range got[1:] {
			require.Zero(t, o.EndOfRange, "one gap, then objects")
			objs = append(objs, o.Location)
		}
		assert.Equal(t, []wire.Location{{Group: 2}, {Group: 2, Object: 1}, {Group: 2, Object: 2}, {Group: 2, Object: 3}}, objs)
	})
}

// TestFetchCancelledMidStream closes a Fetch after its first objects: the
// publisher's answer ends (C087) rather than waiting on the unread stream,
// and the session goes on serving.
func TestFetchCancelledMidStream(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		track.SetCache(CacheLimits{Objects: 10_000, Bytes: 64 << 20})
		served := make(chan error, 4)
		cfg := &Config{Handler: HandlerFunc(func(r Request) {
			if fr, ok := r.(*FetchRequest); ok {
				served <- track.Fetch(fr)
				return
			}
			DefaultHandler.ServeMOQT(r)
		})}
		p := connect(t, cfg, nil)
		big := make([]byte, 4<<10)
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		for o := range uint64(2000) {
			require.NoError(t, w.WriteObject(Object{Location: wire.Location{Object: o}, Payload: big}))
		}
		require.NoError(t, w.Close())

		ctx := testCtx(t, 30*time.Second)
		f, err := p.client.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		for o := range uint64(3) {
			got, err := f.ReadObject(ctx)
			require.NoError(t, err)
			require.Equal(t, wire.Location{Object: o}, got.Location)
		}
		require.NoError(t, f.Close())
		select {
		case <-served:
		case <-ctx.Done():
			t.Fatal("the publisher's answer to a cancelled FETCH did not end")
		}

		rng := wire.RangeFilterToObject(wire.Location{Object: 5}, wire.Location{Object: 6})
		f, err = p.client.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(rng)})
		require.NoError(t, err)
		assert.Equal(t, []wire.Location{{Object: 5}, {Object: 6}}, locations(readFetchAll(t, ctx, f)))
	})
}

// TestFillLateJoinerExactlyOnce joins a track the publisher writes
// without pause with the §3.4 recipe (a Next Object subscription and an
// open-ended fill): Subscription.ReadObject yields every object from the
// track's start exactly once, the fill's before the subscription's.
func TestFillLateJoinerExactlyOnce(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, p := fetchTrack(t, connect, CacheLimits{Objects: 100_000})
		const perGroup, groups = 5, 40
		var (
			wg      sync.WaitGroup
			started = make(chan struct{})
			pubErr  error
		)
		wg.Go(func() {
			for g := range uint64(groups) {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				for o := range uint64(perGroup) {
					l := wire.Location{Group: g, Object: o}
					if err := w.WriteObject(Object{Location: l, Payload: locPayload(l)}); err != nil && pubErr == nil {
						pubErr = err
					}
				}
				if err := w.Close(); err != nil && pubErr == nil {
					pubErr = err
				}
				if g == 5 {
					close(started)
				}
				time.Sleep(time.Millisecond)
			}
		})
		<-started
		ctx := testCtx(t, 30*time.Second)
		params := wire.Params{
			LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())},
		}
		sub, err := p.client.Subscribe(ctx, testTrack, params)
		require.NoError(t, err)
		joinedAt, ok := sub.Largest()
		require.True(t, ok)

		seen := map[wire.Location]bool{}
		var order []wire.Location
		for len(seen) < perGroup*groups {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			require.Zero(t, o.EndOfRange, "nothing is unknown: the cache holds the whole track")
			require.False(t, seen[o.Location], "object %v delivered twice", o.Location)
			assert.Equal(t, locPayload(o.Location), o.Payload)
			seen[o.Location] = true
			order = append(order, o.Location)
		}
		wg.Wait()
		require.NoError(t, pubErr)
		// The fill's objects, up to the Largest Object SUBSCRIBE_OK
		// reported, all come first, in order.
		n := 0
		for n < len(order) && !joinedAt.Less(order[n]) {
			if n > 0 {
				assert.True(t, order[n-1].Less(order[n]), "fill out of order at %v", order[n])
			}
			n++
		}
		assert.Equal(t, int(joinedAt.Group*perGroup+joinedAt.Object+1), n, "the fill covers the track up to %v", joinedAt)
		for _, l := range order[n:] {
			assert.True(t, joinedAt.Less(l), "subscription object %v at or before the join point %v", l, joinedAt)
		}
		track.End(wire.DoneTrackEnded, "done")
		_, err = sub.ReadObject(ctx)
		var de *DoneError
		if !errors.As(err, &de) {
			t.Fatalf("after the last object: %v, want the subscription's end", err)
		}
	})
}

// TestFillCurrentGroupJoin joins mid-group at the current group's start
// (§3.5): a Next Object subscription with a fill of StartGroup=1.
func TestFillCurrentGroupJoin(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, p := fetchTrack(t, connect, CacheLimits{Objects: 1000})
		publishGroups(t, track, 0, 2, 3, nil)
		w := track.OpenSubgroup(2, 0, SubgroupOptions{})
		for o := range uint64(2) {
			l := wire.Location{Group: 2, Object: o}
			require.NoError(t, w.WriteObject(Object{Location: l, Payload: locPayload(l)}))
		}
		ctx := testCtx(t, 30*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{
			LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))},
		})
		require.NoError(t, err)
		for o := uint64(2); o < 4; o++ {
			l := wire.Location{Group: 2, Object: o}
			require.NoError(t, w.WriteObject(Object{Location: l, Payload: locPayload(l)}))
		}
		require.NoError(t, w.Close())
		var got []wire.Location
		for range 4 {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			got = append(got, o.Location)
		}
		assert.Equal(t, []wire.Location{{Group: 2}, {Group: 2, Object: 1}, {Group: 2, Object: 2}, {Group: 2, Object: 3}}, got)
	})
}

// TestFillCountedInStreamCount ends a subscription whose fill has been
// read: PUBLISH_DONE's Stream Count includes the fill stream (§9.9), so the
// subscriber, having seen every counted stream, ends at once rather than
// lingering for a stream that never comes. Bubble time shows the wait.
func TestFillCountedInStreamCount(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				track, p := fetchTrack(t, overPipe(tr.wt), CacheLimits{Objects: 100})
				publishGroups(t, track, 0, 2, 3, nil)
				ctx := testCtx(t, 30*time.Second)
				sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{
					LocationFilter: wire.Some(wire.NextObjectFilter()),
					FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())},
				})
				require.NoError(t, err)
				for range 6 {
					_, err := sub.ReadObject(ctx)
					require.NoError(t, err)
				}
				// The fill's FIN goes out after its last object: the
				// fill is over once the bubble is idle.
				synctest.Wait()
				start := time.Now()
				track.End(wire.DoneTrackEnded, "done")
				_, err = sub.ReadObject(ctx)
				var de *DoneError
				require.ErrorAs(t, err, &de)
				assert.Equal(t, uint64(1), de.StreamCount, "the fill stream is the subscription's one stream")
				assert.Less(t, time.Since(start), p.client.cfg.DoneLinger, "the subscription lingered for a stream it had")
			})
		})
	}
}
