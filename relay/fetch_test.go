package relay

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// fetchPub is a publisher of testTrack that serves SUBSCRIBE from its
// LocalTrack and FETCH from its cache, or with serve when set; it announced
// "live" to the relay.
type fetchPub struct {
	track          *moqt.LocalTrack
	client, server *moqt.Session
	fetches        atomic.Int64 // FETCHes received
	ranges         chan wire.LocationFilter
	serve          func(r *moqt.FetchRequest)
}

func (p *fetchPub) ServeMOQT(req moqt.Request) {
	switch r := req.(type) {
	case *moqt.SubscribeRequest:
		_, _ = p.track.Accept(r, moqt.AcceptOptions{})
	case *moqt.TrackStatusRequest:
		_ = p.track.Status(r)
	case *moqt.FetchRequest:
		p.fetches.Add(1)
		select {
		case p.ranges <- r.Params.LocationFilter.Value:
		default:
		}
		if p.serve != nil {
			p.serve(r)
			return
		}
		_ = p.track.Fetch(r)
	default:
		moqt.DefaultHandler.ServeMOQT(req)
	}
}

func newFetchPub(n *node, path string, serve func(*moqt.FetchRequest)) *fetchPub {
	n.t.Helper()
	return newFetchPubConfig(n, path, nil, func(*moqt.Config) {}, serve)
}

// newFetchPubConfig is newFetchPub with Track Properties props and the
// client's Config changed by set.
func newFetchPubConfig(n *node, path string, props wire.KVList, set func(*moqt.Config), serve func(*moqt.FetchRequest)) *fetchPub {
	n.t.Helper()
	tr, err := moqt.NewLocalTrack(testTrack, props)
	require.NoError(n.t, err)
	tr.SetCache(moqt.CacheLimits{Objects: 1000})
	p := &fetchPub{track: tr, serve: serve, ranges: make(chan wire.LocationFilter, 16)}
	cfg := n.clientConfig(p)
	set(cfg)
	p.client, p.server = n.dialConfig(path, cfg)
	n.relay.reg.addAnnouncer(p.server, wire.NewNamespace("live"))
	return p
}

func fetchCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readFetch reads f to its end: the entries, and the error that ended it
// (nil for a FIN).
func readFetch(ctx context.Context, f *moqt.Fetch) ([]moqt.Object, error) {
	var out []moqt.Object
	for {
		o, err := f.ReadObject(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, o)
	}
}

func locs(objs []moqt.Object) []wire.Location {
	var out []wire.Location
	for _, o := range objs {
		out = append(out, o.Location)
	}
	return out
}

// groupsWant lists the Locations of groups [from, to) of per objects, in
// ascending or descending group order.
func groupsWant(from, to uint64, per int, desc bool) []wire.Location {
	var out []wire.Location
	for i := range to - from {
		g := from + i
		if desc {
			g = to - 1 - i
		}
		for o := range per {
			out = append(out, wire.Location{Group: g, Object: uint64(o)})
		}
	}
	return out
}

var mandatoryProp = wire.KVList{{Type: 0x4000, Value: 1}} // a Mandatory Track Property nobody knows (§3.6)

// TestC047_C066_FetchForwardedAfterUpstreamOK: a FETCH for a track the
// relay has no entry for goes to the publisher, and FETCH_OK goes
// downstream only once the publisher's came (§7.4), with its End, End Of
// Track and every Track Property (§7.6); then the publisher's objects and
// End of Range markers, in order, payloads intact.
func TestC047_C066_FetchForwardedAfterUpstreamOK(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		release := make(chan struct{})
		props := wire.KVList{{Type: wire.PropMaxCacheDuration, Value: 60_000}, {Type: 0x1234, Value: 42}, {Type: 0x1235, Bytes: []byte("opaque")}}
		entries := []moqt.Object{
			{Location: wire.Location{Group: 0}, Payload: payload(0, 0)},
			{Location: wire.Location{Group: 0, Object: 2}, Payload: payload(0, 2)},
			{Location: wire.Location{Group: 1, Object: 5}, EndOfRange: wire.EndOfUnknownRange},
			{Location: wire.Location{Group: 2, Object: 1}, Payload: payload(2, 1), Properties: []byte{0x02, 0x07}},
		}
		newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			if r.Accept(true, wire.Location{Group: 2, Object: 1}, props) != nil {
				return
			}
			for _, o := range entries {
				if r.Objects().WriteObject(o) != nil {
					return
				}
			}
			_ = r.Objects().Close()
		})
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		type result struct {
			f   *moqt.Fetch
			err error
		}
		res := make(chan result, 1)
		go func() {
			f, err := c.Fetch(ctx, testTrack, wire.Params{})
			res <- result{f, err}
		}()
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("FETCH answered before the publisher's FETCH_OK: %v", r.err)
		default:
		}
		close(release)
		r := <-res
		require.NoError(t, r.err)
		assert.True(t, r.f.EndOfTrack)
		assert.Equal(t, wire.Location{Group: 2, Object: 1}, r.f.End)
		assert.Equal(t, props, r.f.Properties)
		got, err := readFetch(ctx, r.f)
		require.NoError(t, err)
		require.Len(t, got, len(entries))
		for i, o := range got {
			assert.Equal(t, entries[i].Location, o.Location)
			assert.Equal(t, entries[i].EndOfRange, o.EndOfRange)
			assert.Equal(t, entries[i].Payload, o.Payload)
			assert.Equal(t, entries[i].Properties, o.Properties)
		}
		settled(t, "no fetch left", n.relay.fetch.empty)
	})
}

// TestC055_FetchSentToAPublisher: with two publishers of the track, the
// FETCH goes to at least one (§7.5); one refusing it does not fail the
// FETCH while the other can answer, whichever the relay asks first.
// The other publisher of the namespace refuses, or never answers: the FETCH
// is served by the one that can, held up by fetchStagger at most. Asked in
// turn, a silent publisher took the whole UpstreamTimeout and the FETCH
// failed with TIMEOUT.
func TestC055_FetchSentToAPublisher(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other func(r *moqt.FetchRequest)
	}{
		{"other refuses", func(r *moqt.FetchRequest) { _ = r.Reject(wire.ReqInternalError, "not now") }},
		{"other never answers", func(r *moqt.FetchRequest) { <-r.Context().Done() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, nil)
				other := newFetchPub(n, "/pub1", tc.other)
				serving := newFetchPub(n, "/pub2", nil)
				writeGroup(t, serving.track, 0, 3)
				c, _ := n.dial("/sub", nil)
				ctx := fetchCtx(t)
				// Several times, as which publisher comes first is not fixed.
				const rounds = 8
				for range rounds {
					start := time.Now()
					f, err := c.Fetch(ctx, testTrack, wire.Params{})
					require.NoError(t, err)
					assert.LessOrEqual(t, time.Since(start), fetchStagger, "FETCH_OK within the stagger")
					got, err := readFetch(ctx, f)
					require.NoError(t, err)
					assert.Equal(t, groupsWant(0, 1, 3, false), locs(got))
				}
				assert.Equal(t, int64(rounds), serving.fetches.Load())
				assert.LessOrEqual(t, other.fetches.Load(), int64(rounds))
			})
		})
	}
}

// cachedRelay sets up a relay whose track entry has an Established
// upstream subscription to pub: pub published groups 0-2 (3 objects each)
// before, which the relay never carried, then groups 3 and 4, which it
// did. sub is the subscription that made the entry.
func cachedRelay(t *testing.T, n *node, pub *fetchPub) *moqt.Subscription {
	t.Helper()
	for g := range uint64(3) {
		writeGroup(t, pub.track, g, 3)
	}
	c, _ := n.dial("/live", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
	require.NoError(t, err)
	for g := uint64(3); g < 5; g++ {
		writeGroup(t, pub.track, g, 3)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		require.Len(t, objs, 3)
	}
	return sub
}

// TestC055_MissFetchedFromThePublisher: a FETCH of a track the relay
// carries is served from its cache, and what the cache never saw is
// FETCHed from the publisher, paused for, and served in place (§9.11,
// §7.5), in either group order: the groups before the relay came, and the
// rest of group 3, which nothing told the relay was over (§2.1: a gap in
// the objects it received says nothing).
func TestC055_MissFetchedFromThePublisher(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := newFetchPub(n, "/pub", nil)
		cachedRelay(t, n, pub)
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		for _, desc := range []bool{false, true} {
			params := wire.Params{}
			if desc {
				params.GroupOrder = wire.Some(wire.GroupOrderDescending)
			}
			f, err := c.Fetch(ctx, testTrack, params)
			require.NoError(t, err)
			got, err := readFetch(ctx, f)
			require.NoError(t, err)
			assert.Equal(t, groupsWant(0, 5, 3, desc), locs(got), "descending %v", desc)
			for _, o := range got {
				assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
			}
		}
		// The first FETCH asked for the ranges the relay lacked, and
		// the relay kept what came: the second asked nothing.
		require.Equal(t, int64(2), pub.fetches.Load())
		all := ^uint64(0)
		assert.Equal(t, wire.RangeFilterToObject(wire.Location{}, wire.Location{Group: 2, Object: all}), <-pub.ranges)
		assert.Equal(t, wire.RangeFilterToObject(wire.Location{Group: 3, Object: 3}, wire.Location{Group: 3, Object: all}), <-pub.ranges)
	})
}

// TestC039_UpstreamMandatoryPropertyRefused: a publisher's FETCH_OK with
// a Mandatory Track Property the relay does not understand makes the
// relay answer the downstream FETCH, not answered yet, with REQUEST_ERROR
// UNSUPPORTED_EXTENSION (§3.6).
func TestC039_UpstreamMandatoryPropertyRefused(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			if r.Accept(false, wire.Location{Group: 0, Object: 1}, mandatoryProp) == nil {
				_ = r.Objects().WriteObject(moqt.Object{Location: wire.Location{}, Payload: payload(0, 0)})
				<-r.Context().Done()
			}
		})
		c, _ := n.dial("/sub", nil)
		_, err := c.Fetch(fetchCtx(t), testTrack, wire.Params{})
		require.Error(t, err)
		assert.Equal(t, wire.ReqUnsupportedExtension, requestCode(t, err))
		settled(t, "no fetch left", n.relay.fetch.empty)
	})
}

// TestC039_MandatoryPropertySeenWithoutProperties: a FETCH that asks for
// no Track Properties (INCLUDE_PROPERTIES 0, §9.20.22) is still refused
// with UNSUPPORTED_EXTENSION when the publisher's track has a Mandatory
// Track Property the relay does not understand: the relay asks the
// publisher for the properties, which it must see (§3.6).
func TestC039_MandatoryPropertySeenWithoutProperties(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := newFetchPubConfig(n, "/pub", mandatoryProp, func(*moqt.Config) {}, nil)
		writeGroup(t, pub.track, 0, 3)
		c, _ := n.dial("/sub", nil)
		_, err := c.Fetch(fetchCtx(t), testTrack, wire.Params{IncludeProperties: wire.Some(false)})
		require.Error(t, err)
		assert.Equal(t, wire.ReqUnsupportedExtension, requestCode(t, err))
		settled(t, "no fetch left", n.relay.fetch.empty)
	})
}

// TestC040_MissMandatoryPropertyResets: when the relay has already sent
// FETCH_OK and objects from its cache, an upstream FETCH_OK with a
// Mandatory Track Property it does not understand resets the downstream
// fetch stream (§3.6).
func TestC040_MissMandatoryPropertyResets(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			lf := r.Params.LocationFilter.Value
			if r.Accept(false, wire.Location{Group: lf.EndGroup, Object: lf.EndObject}, mandatoryProp) == nil {
				<-r.Context().Done()
			}
		})
		cachedRelay(t, n, pub)
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		f, err := c.Fetch(ctx, testTrack, wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)})
		var got []moqt.Object
		if err == nil { // the reset may overtake FETCH_OK, failing Fetch itself
			got, err = readFetch(ctx, f)
		}
		var se *moqt.StreamError
		require.ErrorAs(t, err, &se, "the stream is reset, not ended")
		if len(got) > 0 {
			assert.Equal(t, groupsWant(3, 5, 3, true), locs(got), "the cached groups came first")
		}
	})
}

// TestC077_FetchMalformedUpstreamResets: a publisher's fetch stream that
// turns out a Malformed Track (an object past its FETCH_OK's End) resets
// the downstream fetch stream with MALFORMED_TRACK (§12.1).
func TestC077_FetchMalformedUpstreamResets(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			if r.Accept(false, wire.Location{Group: 0, Object: 5}, nil) == nil &&
				r.Objects().WriteObject(moqt.Object{Location: wire.Location{}, Payload: payload(0, 0)}) == nil {
				_ = r.Objects().WriteObject(moqt.Object{Location: wire.Location{Group: 3}, Payload: payload(3, 0)})
				<-r.Context().Done()
			}
		})
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		f, err := c.Fetch(ctx, testTrack, wire.Params{})
		if err == nil {
			_, err = readFetch(ctx, f)
		}
		var se *moqt.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.ResetMalformedTrack, se.Code)
		settled(t, "no fetch left", n.relay.fetch.empty)
	})
}

// TestFetchDownstreamCancelCancelsUpstream: a downstream FETCH cancelled
// mid-stream cancels the FETCH the relay forwarded, and leaves nothing.
func TestFetchDownstreamCancelCancelsUpstream(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		ended := make(chan struct{})
		newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			defer close(ended)
			if r.Accept(false, wire.Location{Group: 5}, nil) == nil &&
				r.Objects().WriteObject(moqt.Object{Location: wire.Location{}, Payload: payload(0, 0)}) == nil {
				<-r.Context().Done()
			}
		})
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		f, err := c.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		o, err := f.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, wire.Location{}, o.Location)
		require.NoError(t, f.Close())
		select {
		case <-ended:
		case <-ctx.Done():
			t.Fatal("the upstream FETCH was not cancelled")
		}
		settled(t, "no fetch left", n.relay.fetch.empty)
	})
}

// TestFillThroughRelay: a downstream SUBSCRIBE with FILL_PARAMETERS gets
// its fill from the relay: the groups the relay never carried FETCHed
// from the publisher, then the cached ones, then the live objects.
func TestFillThroughRelay(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pub := newFetchPub(n, "/pub", nil)
		cachedRelay(t, n, pub)
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		sub, err := c.Subscribe(ctx, testTrack, wire.Params{
			LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())},
		})
		require.NoError(t, err)
		want := groupsWant(0, 5, 3, false)
		var got []wire.Location
		for range want {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			require.Zero(t, o.EndOfRange, "at %v", o.Location)
			assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
			got = append(got, o.Location)
		}
		assert.Equal(t, want, got)
		assert.Equal(t, int64(2), pub.fetches.Load(), "FETCHes upstream for groups 0-2 and the rest of group 3")
		writeGroup(t, pub.track, 5, 1)
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 5}, o.Location, "then the live objects")
	})
}

// TestFetchThroughChain: a FETCH at an edge relay reaches the publisher
// behind the origin relay: forwarded whole while neither relay carries the
// track, and, once a subscription made both carry it, served from the
// edge's cache with what neither relay saw FETCHed through the origin.
func TestFetchThroughChain(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin := startNode(t, scheme, Config{}, nil)
		edge := edgeOf(t, origin, "edge")
		pub := newFetchPub(origin, "/pub", nil)
		for g := range uint64(3) {
			writeGroup(t, pub.track, g, 3)
		}
		c, _ := edge.dial("/viewer", nil)
		ctx := fetchCtx(t)
		f, err := c.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		got, err := readFetch(ctx, f)
		require.NoError(t, err)
		assert.Equal(t, groupsWant(0, 3, 3, false), locs(got), "forwarded by both relays")
		assert.Equal(t, wire.Location{Group: 2, Object: 2}, f.End)

		sub, err := subscribe(t, c, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
		require.NoError(t, err)
		writeGroup(t, pub.track, 3, 3)
		objs, err := readSubgroup(t, sub)
		require.NoError(t, err)
		require.Len(t, objs, 3)
		f, err = c.Fetch(ctx, testTrack, wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)})
		require.NoError(t, err)
		got, err = readFetch(ctx, f)
		require.NoError(t, err)
		assert.Equal(t, groupsWant(0, 4, 3, true), locs(got), "the edge's cache, and the rest through the origin")
		for _, o := range got {
			assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
		}
		for _, n := range []*node{origin, edge} {
			settled(t, "no fetch left", n.relay.fetch.empty)
		}
	})
}

// TestC045_FetchAuthorized: a FETCH is authorized like a SUBSCRIBE
// (§7.4): refused with UNAUTHORIZED without anything sent upstream, and
// once allowed, forwarded without the requester's tokens, which were
// for this relay.
func TestC045_FetchAuthorized(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		auth := func(r moqt.Request, _ *wire.Params) error {
			if _, ok := r.(*moqt.FetchRequest); ok && !hasToken(r, "good") {
				return errors.New("no")
			}
			return nil
		}
		n := startNode(t, scheme, Config{Authorize: auth}, nil)
		var upstreamTokens atomic.Int64
		pub := newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			upstreamTokens.Add(int64(len(r.AuthorizationTokens())))
			if r.Accept(false, wire.Location{}, nil) == nil &&
				r.Objects().WriteObject(moqt.Object{Location: wire.Location{}, Payload: payload(0, 0)}) == nil {
				_ = r.Objects().Close()
			}
		})
		c, _ := n.dial("/sub", nil)
		ctx := fetchCtx(t)
		_, err := c.Fetch(ctx, testTrack, wire.Params{AuthorizationTokens: token("bad")})
		assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err))
		assert.Zero(t, pub.fetches.Load(), "nothing went upstream")
		f, err := c.Fetch(ctx, testTrack, wire.Params{AuthorizationTokens: token("good")})
		require.NoError(t, err)
		got, err := readFetch(ctx, f)
		require.NoError(t, err)
		assert.Equal(t, []wire.Location{{}}, locs(got))
		assert.Zero(t, upstreamTokens.Load(), "the requester's tokens stay at the relay")
	})
}

// TestC077_CacheFetchResetWhenTrackMalformed: a FETCH the relay serves
// from its cache, still waiting on an open subgroup, is reset with
// MALFORMED_TRACK when the track turns out Malformed (§12.1: "reset any
// fetch streams with Status Code MALFORMED_TRACK"), not ended with a FIN.
func TestC077_CacheFetchResetWhenTrackMalformed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, pub, c, sub := liveSubscription(t, "moqt")
		open := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
		require.NoError(t, open.WriteObject(moqt.Object{Location: wire.Location{}, Payload: []byte("a")}))
		w := pub.track.OpenSubgroup(1, 0, moqt.SubgroupOptions{})
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 1}, Payload: []byte("b")}))
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 1, Object: 1}, Status: wire.ObjectEndOfGroup}))
		require.NoError(t, w.Close())
		synctest.Wait()
		ctx := fetchCtx(t)
		f, err := c.Fetch(ctx, testTrack, wire.Params{FillTimeout: wire.Some[uint64](30_000)})
		require.NoError(t, err)
		read := make(chan error, 1)
		go func() {
			_, err := readFetch(ctx, f)
			read <- err
		}()
		synctest.Wait()
		select {
		case err := <-read:
			t.Fatalf("the fetch ended before the track did: %v", err)
		default: // waiting on the open subgroup 0
		}
		// An object past group 1's End of Group: Malformed (§12.1).
		past := pub.track.OpenSubgroup(1, 1, moqt.SubgroupOptions{})
		require.NoError(t, past.WriteObject(moqt.Object{Location: wire.Location{Group: 1, Object: 5}, SubgroupID: 1, Payload: []byte("past")}))
		require.Equal(t, wire.DoneMalformedTrack, doneCode(t, sub))
		var se *moqt.StreamError
		err = <-read
		require.ErrorAs(t, err, &se, "reset, not a FIN")
		assert.Equal(t, wire.ResetMalformedTrack, se.Code)
		_ = past.Close()
		_ = open.Close()
	})
}
