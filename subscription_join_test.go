package moqt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// On 18/19 a Subscribe with FILL_PARAMETERS sends the SUBSCRIBE without
// them and, at once, a Joining FETCH naming it on its own request stream:
// 21's relative StartGroup N is Relative Joining Start N − 1, an absolute
// {G, 0} is Absolute Joining Start G (subscription_join.go). Its data
// stream feeds the fill: ReadObject yields the fill, then the
// subscription's objects, each once.
func TestDraft18FillSentAsJoiningFetch(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		for _, c := range []struct {
			fill  wire.LocationFilter
			typ   wire.FetchType
			start uint64
		}{
			{wire.RelativeFilter(1), wire.FetchRelativeJoining, 0},
			{wire.RelativeFilter(3), wire.FetchRelativeJoining, 2},
			{wire.StartFilter(pl(7, 0)), wire.FetchAbsoluteJoining, 7},
			{wire.NoLocationFilter(), wire.FetchAbsoluteJoining, 0},
		} {
			s, fp := pipeClientSession(t, pipeOn(v), draftCfg(v, &Config{}))
			params := wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
				FillParameters: &wire.Params{LocationFilter: wire.Some(c.fill)}}
			got, req, m := subscribeInBackground(t, s, fp, params)
			assert.Nil(t, m.Parameters.FillParameters)
			fs := fp.accept()
			jf := expect[*wire.Fetch](fs)
			assert.Equal(t, c.typ, jf.FetchType)
			assert.Equal(t, m.RequestID, jf.JoiningRequestID)
			assert.Equal(t, c.start, jf.JoiningStart)
			assert.Equal(t, wire.Some(wire.GroupOrderAscending), jf.Parameters.GroupOrder)
			req.send(&wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{LargestObject: wire.Some(pl(7, 2))}})
			sub := recvOrFail(t, got)
			require.NotNil(t, sub)
			live := fp.openObjects(1, 7, 3, "s73", "s74")
			require.NoError(t, live.Close())
			fs.send(&wire.FetchOK{EndLocation: pl(7, 3)})
			fill := fp.openFetch(jf.RequestID, fobj(7, 0, "f70"), fobj(7, 1, "f71"), fobj(7, 2, "f72"))
			require.NoError(t, fill.Close())
			assert.Equal(t, []string{"7/0:f70", "7/1:f71", "7/2:f72", "7/3:s73", "7/4:s74"}, readEntries(t, sub, 5))
			_ = sub.Close()
		}
	})
}

// A REQUEST_ERROR answering the Joining FETCH fails the fill as a reset
// fill fails on 21; the subscription goes on.
func TestDraft18JoiningFetchErrorFailsFill(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		s, fp := pipeClientSession(t, pipeOn(v), draftCfg(v, &Config{}))
		params := wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}}
		got, req, _ := subscribeInBackground(t, s, fp, params)
		fs := fp.accept()
		expect[*wire.Fetch](fs)
		fs.send(&wire.RequestError{ErrorCode: wire.ReqInternalError})
		fs.fin()
		req.send(&wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{LargestObject: wire.Some(pl(7, 2))}})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		live := fp.openObjects(1, 7, 3, "s73")
		require.NoError(t, live.Close())
		assert.Equal(t, []string{"incomplete", "7/3:s73"}, readEntries(t, sub, 2))
	})
}

// A fill no Joining FETCH can express is refused before anything is sent,
// with an error wrapping wire.ErrNotInDraft; so is a fill in
// REQUEST_UPDATE. An empty fill (Next Group) sends no FETCH at all.
func TestDraft18InexpressibleFillRefusedBeforeSending(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		s, fp := pipeClientSession(t, pipeOn(v), draftCfg(v, &Config{}))
		for i, fill := range []wire.LocationFilter{
			wire.StartFilter(pl(3, 1)),
			wire.RangeFilterTo(pl(3, 0), 5),
			wire.RangeFilterToObject(pl(3, 0), pl(5, 2)),
		} {
			next := s.ids.next.Load()
			_, err := s.Subscribe(context.Background(), testTrack, wire.Params{
				FillParameters: &wire.Params{LocationFilter: wire.Some(fill)}})
			require.ErrorIs(t, err, wire.ErrNotInDraft, "case %d", i)
			assert.Equal(t, next, s.ids.next.Load(), "case %d: nothing opened", i)
		}
		if v == wire.Draft18 {
			_, err := s.Subscribe(context.Background(), testTrack, wire.Params{
				FillParameters: &wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamObjectIDFilter, Ranges: []wire.Range{{Start: 0, End: 1}}}}}})
			require.ErrorIs(t, err, wire.ErrNotInDraft, "range filters")
		}
		// The Next Group: empty, so only the SUBSCRIBE goes.
		params := wire.Params{FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(0))}}
		next := s.ids.next.Load()
		sub, _, _ := subscribeAnswered(t, s, fp, params, pl(7, 2))
		assert.Equal(t, next+2, s.ids.next.Load(), "one request: the SUBSCRIBE")
		err := sub.Update(context.Background(), wire.Params{FillParameters: &wire.Params{}})
		require.ErrorIs(t, err, wire.ErrNotInDraft)
	})
}

// End to end on 18/19: a subscriber joining a track being written, with a
// Next Object subscription and a whole-track fill (an Absolute Joining
// FETCH from group 0), gets every object exactly once, the fill's first.
func TestDraft18FillLateJoinerExactlyOnce(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		connect := func(t *testing.T, sc, cc *Config) *pair {
			if cc == nil {
				cc = &Config{}
			}
			return newPipePair(t, pipeOn(v), draftCfg(v, sc), draftCfg(v, cc))
		}
		track, p := fetchTrack(t, connect, CacheLimits{Objects: 100_000})
		const perGroup, groups = 5, 20
		var wg sync.WaitGroup
		started := make(chan struct{})
		wg.Go(func() {
			for g := range uint64(groups) {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				for o := range uint64(perGroup) {
					l := wire.Location{Group: g, Object: o}
					_ = w.WriteObject(Object{Location: l, Payload: locPayload(l)})
					if g == 5 && o == 2 {
						close(started) // joined mid-group
						time.Sleep(time.Millisecond)
					}
				}
				_ = w.Close()
				time.Sleep(time.Millisecond)
			}
		})
		<-started
		ctx := testCtx(t, 30*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, nextObjectWithFill)
		require.NoError(t, err)
		seen := map[wire.Location]bool{}
		for len(seen) < perGroup*groups {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			require.Zero(t, o.EndOfRange)
			require.False(t, seen[o.Location], "object %v delivered twice", o.Location)
			assert.Equal(t, locPayload(o.Location), o.Payload)
			seen[o.Location] = true
		}
		wg.Wait()
		_ = sub.Close()
	})
}
