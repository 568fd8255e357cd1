package relay

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// floodTracks is a publisher of many tracks, each accepted from the
// relay's SUBSCRIBE.
type floodTracks map[string]*moqt.LocalTrack

func (f floodTracks) ServeMOQT(r moqt.Request) {
	sr, ok := r.(*moqt.SubscribeRequest)
	if !ok {
		moqt.DefaultHandler.ServeMOQT(r)
		return
	}
	tr, ok := f[string(sr.Track.Name)]
	if !ok {
		_ = r.Reject(wire.ReqDoesNotExist, "no such track")
		return
	}
	_, _ = tr.Accept(sr, moqt.AcceptOptions{})
}

// heapPeak keeps the largest live heap (after a GC) of its samples.
type heapPeak struct{ max uint64 }

// sample waits for every goroutine of the test's bubble to block, the
// objects written so far having gone as far as they can, and samples the
// live heap then: at the same points of the flood on any machine, where a
// ticker on the bubble's clock would only fire once the flood had drained.
func (h *heapPeak) sample() {
	synctest.Wait()
	h.max = max(h.max, liveHeap())
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSubscribeFloodHeapBound: one downstream session subscribes to every
// track a publisher has and reads nothing, with a grace long enough that
// it is never cut off for stalling; another subscribes to the same tracks
// and reads everything. What the relay queues for the hostile session is
// bounded by its session budget (moqt.Config.MaxSessionBacklog): the
// process's live heap (after a GC, sampled once each subgroup written has
// gone as far as it can) grows during the flood by at most twice the
// budget (a backlog's storage grows by append, up to about twice what it
// holds) and 14 MiB (what the flood cost over QUIC with no hostile session
// at all: the streams' buffers, the relay's duplicate tables, the objects
// in flight; 9 to 10 MiB measured under -race), whatever the number of
// tracks. Over pipes, under -race: 6.8 MiB measured; without the budget,
// 23.4 MiB (it grows by tracks × MaxSubscriberBacklog and more). The
// hostile subscriptions past the budget end with EXCESSIVE_LOAD, counted
// as slow subscribers; the good subscriber gets every object. Caches are
// off: they are bounded per track (Config.Cache), not by who subscribes.
func TestSubscribeFloodHeapBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			tracks     = 32
			perSub     = 512 << 10 // MaxSubscriberBacklog
			perSession = 1 << 20   // MaxSessionBacklog
			groups     = 5
			perGroup   = 16
			size       = 8 << 10 // 640 KiB per track: past perSub
			slack      = 14 << 20
		)
		met := &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
		n := startNode(t, "moqt", Config{NoCache: true, Metrics: met}, &moqt.Config{
			MaxSubscriberBacklog: perSub,
			MaxSessionBacklog:    perSession,
			SubscriberGrace:      time.Minute, // a hostile that is never cut off for stalling
			// Fixed windows: quic-go's auto-tuned ones would let what is in
			// flight grow with the machine's load.
			StreamReceiveWindow: 256 << 10, ConnectionReceiveWindow: 2 << 20,
		})
		ns := wire.NewNamespace("live")
		name := func(i int) wire.FullTrackName {
			return wire.FullTrackName{Namespace: ns, Name: []byte(fmt.Sprint("t", i))}
		}
		pubTracks := floodTracks{}
		for i := range tracks {
			tr, err := moqt.NewLocalTrack(name(i), nil)
			require.NoError(t, err)
			pubTracks[string(name(i).Name)] = tr
		}
		_, pubServer := n.dial("/pub", pubTracks)
		n.relay.reg.addAnnouncer(pubServer, ns)

		gcfg := n.clientConfig(nil)
		gcfg.StreamReceiveWindow, gcfg.ConnectionReceiveWindow = 256<<10, 2<<20
		good, _ := n.dialConfig("/good", gcfg)
		goodSubs := make([]*moqt.Subscription, tracks)
		for i := range tracks {
			var err error
			goodSubs[i], err = subscribe(t, good, name(i), wire.Params{})
			require.NoError(t, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		hcfg := n.clientConfig(nil)
		hcfg.StreamReceiveWindow, hcfg.ConnectionReceiveWindow = 4<<10, 64<<10
		hcfg.ReadStallTimeout = -1
		hcfg.DataStreamTimeout = time.Hour // its full window holds back the headers of new streams
		hostile, _ := n.dialConfig("/hostile", hcfg)
		hostileSubs := make([]*moqt.Subscription, tracks)
		for i := range tracks {
			var err error
			hostileSubs[i], err = subscribe(t, hostile, name(i), wire.Params{})
			require.NoError(t, err)
		}

		base := liveHeap()
		var peak heapPeak
		var wg sync.WaitGroup
		got := make([]int, tracks)
		for i, sub := range goodSubs {
			wg.Go(func() {
				buf := make([]byte, size)
				for range groups {
					r, err := sub.AcceptSubgroup(ctx)
					if err != nil {
						t.Errorf("good subscriber, track %d: %d objects, then %v", i, got[i], err)
						return
					}
					for {
						o, err := r.ReadObject(buf)
						if err == io.EOF {
							break
						}
						if err != nil {
							t.Errorf("good subscriber, track %d: %d objects, then %v", i, got[i], err)
							return
						}
						assert.Len(t, o.Payload, size)
						got[i]++
					}
				}
			})
		}
		body := make([]byte, size)
		for g := range uint64(groups) {
			for i := range tracks {
				w := pubTracks[string(name(i).Name)].OpenSubgroup(g, 0, moqt.SubgroupOptions{})
				for o := range uint64(perGroup) {
					require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: body}))
				}
				require.NoError(t, w.Close())
				peak.sample()
			}
		}
		wg.Wait()
		grown := int64(peak.max) - int64(base)
		t.Logf("live heap %.1f MiB before the flood, at most %.1f MiB more during it", float64(base)/(1<<20), float64(grown)/(1<<20))
		for i := range tracks {
			assert.Equal(t, groups*perGroup, got[i], "the good subscriber gets every object of track %d", i)
		}
		assert.LessOrEqual(t, grown, int64(2*perSession+slack), "the flood's heap is bounded by the session budget")
		// Ended, each hostile subscription is past the session's budget
		// (EXCESSIVE_LOAD) or, holding half a MiB alone, past its own bound
		// (TOO_FAR_BEHIND).
		ended := func() (excessive, behind int) {
			for i, sub := range hostileSubs {
				select {
				case <-sub.Done():
				default:
					continue
				}
				var de *moqt.DoneError
				if assert.ErrorAs(t, sub.Err(), &de, "hostile subscription %d", i) {
					switch de.Code {
					case wire.DoneExcessiveLoad:
						excessive++
					case wire.DoneTooFarBehind:
						behind++
					default:
						t.Errorf("hostile subscription %d ended with %v", i, de.Code)
					}
				}
			}
			return excessive, behind
		}
		settled(t, "hostile subscriptions past the budget end with EXCESSIVE_LOAD", func() bool {
			excessive, _ := ended()
			return excessive > 0
		})
		settled(t, "and are counted", func() bool {
			excessive, behind := ended()
			met.mu.Lock()
			defer met.mu.Unlock()
			return met.drops[DropSlowSubscriber] >= excessive+behind
		})
		for _, sub := range goodSubs {
			assert.NoError(t, sub.Err(), "the good subscriptions go on")
		}
	})
}
