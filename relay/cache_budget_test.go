package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// genPub publishes many tracks, serving SUBSCRIBE from their LocalTracks
// (which keep no cache) and FETCH by making the objects again: it holds
// nothing, so the process's heap shows what the relay holds.
type genPub struct {
	tracks   map[string]*moqt.LocalTrack
	perGroup int
	size     int
	fetches  atomic.Int64
}

// genPayload is the payload of object o of group g: "g/o", then zeros up
// to size.
func genPayload(g, o uint64, size int) []byte {
	p := payload(g, o)
	return append(p, make([]byte, size-len(p))...)
}

func (p *genPub) ServeMOQT(req moqt.Request) {
	switch r := req.(type) {
	case *moqt.SubscribeRequest:
		if tr, ok := p.tracks[string(r.Track.Name)]; ok {
			_, _ = tr.Accept(r, moqt.AcceptOptions{})
			return
		}
		_ = r.Reject(wire.ReqDoesNotExist, "no such track")
	case *moqt.FetchRequest:
		p.fetches.Add(1)
		tr, ok := p.tracks[string(r.Track.Name)]
		if !ok {
			_ = r.Reject(wire.ReqDoesNotExist, "no such track")
			return
		}
		largest, known := tr.Largest()
		start, end, err := r.Window(wire.Opt[wire.Location]{Value: largest, Set: known})
		if err != nil {
			_ = r.Reject(wire.ReqInvalidRange, err.Error())
			return
		}
		if r.Accept(false, end, nil) != nil {
			return
		}
		for g := start.Group; g <= end.Group; g++ {
			for o := range uint64(p.perGroup) {
				l := wire.Location{Group: g, Object: o}
				if l.Less(start) || end.Less(l) {
					continue
				}
				if r.Objects().WriteObject(moqt.Object{Location: l, Payload: genPayload(g, o, p.size)}) != nil {
					return
				}
			}
		}
		_ = r.Objects().Close()
	default:
		moqt.DefaultHandler.ServeMOQT(req)
	}
}

// TestRelayCacheBudget: one subscriber opens 16 tracks whose publisher
// sends 1.5 MiB on each. Each track's cache may hold 2 MiB, so without a
// relay-wide bound the caches would keep all 24 MiB; the relay's cache
// budget (4 MiB here) holds them to it: its count, and the live heap the
// flood leaves behind. A FETCH of a track's start, evicted from the
// relay's cache, is FETCHed from the publisher again (Miss) and served
// whole. Once the tracks are dropped, the budget holds nothing.
func TestRelayCacheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			tracks   = 16
			groups   = 12
			perGroup = 8
			size     = 16 << 10 // 1.5 MiB per track
			limit    = 4 << 20
		)
		budget := moqt.NewCacheBudget(limit)
		n := startNode(t, "moqt", Config{Cache: moqt.CacheLimits{Bytes: 2 << 20, Budget: budget}, Linger: -1}, nil)
		ns := wire.NewNamespace("live")
		name := func(i int) wire.FullTrackName {
			return wire.FullTrackName{Namespace: ns, Name: []byte(fmt.Sprint("t", i))}
		}
		pub := &genPub{tracks: map[string]*moqt.LocalTrack{}, perGroup: perGroup, size: size}
		for i := range tracks {
			tr, err := moqt.NewLocalTrack(name(i), nil)
			require.NoError(t, err)
			pub.tracks[string(name(i).Name)] = tr
		}
		_, pubServer := n.dial("/pub", pub)
		n.relay.reg.addAnnouncer(pubServer, ns)

		c, _ := n.dial("/sub", nil)
		subs := make([]*moqt.Subscription, tracks)
		for i := range subs {
			var err error
			subs[i], err = subscribe(t, c, name(i), wire.Params{})
			require.NoError(t, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		base := liveHeap()
		var peak heapPeak
		var wg sync.WaitGroup
		got := make([]int, tracks)
		for i, sub := range subs {
			wg.Go(func() {
				for range groups {
					r, err := sub.AcceptSubgroup(ctx)
					if err != nil {
						t.Errorf("track %d: %d objects, then %v", i, got[i], err)
						return
					}
					for {
						_, err := r.ReadObject(nil)
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Errorf("track %d: %d objects, then %v", i, got[i], err)
							return
						}
						got[i]++
					}
				}
			})
		}
		most := int64(0)
		for g := range uint64(groups) {
			for i := range tracks {
				w := pub.tracks[string(name(i).Name)].OpenSubgroup(g, 0, moqt.SubgroupOptions{})
				for o := range uint64(perGroup) {
					require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: genPayload(g, o, size)}))
				}
				require.NoError(t, w.Close())
				most = max(most, budget.Held())
				peak.sample()
			}
		}
		wg.Wait()
		grown := int64(peak.max) - int64(base)
		held := budget.Held()
		kept := int64(liveHeap()) - int64(base)
		t.Logf("cache budget: %.2f MiB held at the end, %.2f MiB at most; live heap %.1f MiB before, %.1f MiB more at its peak, %.1f MiB more after",
			float64(held)/(1<<20), float64(most)/(1<<20), float64(base)/(1<<20), float64(grown)/(1<<20), float64(kept)/(1<<20))
		for i := range tracks {
			require.Equal(t, groups*perGroup, got[i], "the subscriber got every object of track %d", i)
		}
		// Past the limit only by the objects being added, one per track's
		// forwarding goroutine.
		assert.LessOrEqual(t, most, int64(limit+tracks*(size+1024)), "the budget's count at its largest")
		assert.LessOrEqual(t, held, int64(limit))
		assert.Greater(t, held, int64(limit/2), "the caches keep what the budget allows")
		// What the flood left on the heap is the caches' (about 1.1 heap
		// bytes a counted byte, payload blocks included) and a little more:
		// without the budget it was the 24 MiB the tracks carried, and more.
		assert.Less(t, kept, int64(limit*13/10+2<<20), "the heap the caches hold after the flood")
		// At its peak the heap also holds what is in flight (10 to 13 MiB
		// more measured); without the budget it passed what the tracks
		// carried (30 MiB measured).
		assert.Less(t, grown, int64(tracks*groups*perGroup*size), "the heap at the flood's peak")

		// Track 0's first groups were evicted: the relay asks the publisher
		// for them and serves the whole range.
		before := pub.fetches.Load()
		f, err := c.Fetch(ctx, name(0), wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(
			wire.Location{}, wire.Location{Group: groups - 1, Object: perGroup - 1}))})
		require.NoError(t, err)
		objs, err := readFetch(ctx, f)
		require.NoError(t, err)
		require.Len(t, objs, groups*perGroup, "every object, none reported unknown")
		for i, o := range objs {
			want := wire.Location{Group: uint64(i / perGroup), Object: uint64(i % perGroup)}
			assert.Equal(t, want, o.Location)
			assert.Zero(t, o.EndOfRange, "at %v", o.Location)
			assert.True(t, bytes.Equal(genPayload(want.Group, want.Object, size), o.Payload), "payload of %v", want)
		}
		assert.Greater(t, pub.fetches.Load(), before, "the evicted range was FETCHed from the publisher")
		assert.LessOrEqual(t, budget.Held(), int64(limit))

		// The tracks leave the relay with their subscriber: so do their
		// caches, from the budget.
		for _, sub := range subs {
			require.NoError(t, sub.Close())
		}
		settled(t, "the dropped tracks' caches leave the budget", func() bool { return budget.Held() == 0 })
	})
}
