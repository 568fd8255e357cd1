package moqt

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestC027_RangeFiltersEndToEnd: a SUBSCRIBE with range filters receives
// only objects passing FORWARD, the Location filter and every range filter
// (§3.3.3), with the publisher allowing them through MAX_FILTER_RANGES.
func TestC027_RangeFiltersEndToEnd(t *testing.T) {
	eachDraft(t, newerDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			track, cfg, served := newServedTrack(t, testTrack, nil)
			cfg.MaxFilterRanges = 4
			p := connect(t, cfg, nil)
			ctx := testCtx(t, 10*time.Second)
			params := wire.Params{
				LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{Group: 1, Object: 0}, 2)),
				RangeFilters: []wire.RangeFilter{
					// Object IDs 1–2 and 5 onwards; subgroup 0 only.
					{Type: wire.ParamObjectIDFilter, Ranges: []wire.Range{{Start: 1, End: 2}, {Start: 5, Open: true}}},
					{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: 0, End: 0}}},
				},
			}
			sub, err := p.client.Subscribe(ctx, testTrack, params)
			require.NoError(t, err)
			<-served
			for g := uint64(0); g <= 3; g++ {
				for sg := uint64(0); sg <= 1; sg++ {
					w := track.OpenSubgroup(g, sg, SubgroupOptions{})
					for id := uint64(0); id <= 6; id++ {
						require.NoError(t, writeObject(w, id, nil, []byte{byte(g), byte(sg), byte(id)}))
					}
					require.NoError(t, w.Close())
				}
			}
			track.End(wire.DoneTrackEnded, "")
			got := collect(t, ctx, sub)
			var want []wire.Location
			for g := uint64(1); g <= 2; g++ {
				for _, id := range []uint64{1, 2, 5, 6} {
					want = append(want, wire.Location{Group: g, Object: id})
				}
			}
			assert.ElementsMatch(t, want, got)
		})
	})
}

// TestDataUpdateMovesFilter: REQUEST_UPDATE changes a live subscription's
// Location filter; objects then follow the new window (§9.5.1).
func TestDataUpdateMovesFilter(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, cfg, served := newServedTrack(t, testTrack, nil)
		p := connect(t, cfg, nil)
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{
			LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{Group: 0, Object: 0}, 0))})
		require.NoError(t, err)
		<-served
		publish := func(g uint64) {
			w := track.OpenSubgroup(g, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte{byte(g)}))
			require.NoError(t, w.Close())
		}
		publish(0)
		publish(1) // outside [0, 0]
		require.NoError(t, sub.Update(ctx, wire.Params{
			LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 3, Object: 0}))}))
		publish(2) // outside [3, …)
		publish(3)
		track.End(wire.DoneTrackEnded, "")
		got := collect(t, ctx, sub)
		assert.ElementsMatch(t, []wire.Location{{Group: 0, Object: 0}, {Group: 3, Object: 0}}, got)
	})
}

// TestC081_PublishDoneAfterStreamsClosed: PUBLISH_DONE goes out only after
// every stream of the subscription is closed; one still open is reset
// first (C078, C081), and the Stream Count includes it (C083 counts 0 when
// none: see the conformance tests).
func TestC081_PublishDoneAfterStreamsClosed(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
			track, sub, ctx := lt.track, lt.sub, lt.ctx
			ss := lt.ss
			w := track.OpenSubgroup(0, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte("open")))
			r, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err)
			_, err = r.Next()
			require.NoError(t, err)
			payload, err := io.ReadAll(r)
			require.NoError(t, err)
			assert.Equal(t, "open", string(payload))

			require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
			ss.mu.Lock()
			assert.Empty(t, ss.dataStreams, "no stream is open once PUBLISH_DONE is sent")
			ss.mu.Unlock()
			waitDone(t, ctx, sub.Done(), "subscription")
			var de *DoneError
			require.ErrorAs(t, sub.Err(), &de)
			assert.Equal(t, uint64(1), de.StreamCount)
			_, err = r.Next()
			var se *transport.StreamError
			require.ErrorAs(t, err, &se, "the unfinished subgroup was reset, not ended with a FIN")
			// Later writes go nowhere.
			require.NoError(t, writeObject(w, 1, nil, []byte("late")))
		})
	})
}

// TestC004_NoObjectsAfterRejectedPublish: objects sent before PUBLISH_OK
// stop when the subscriber answers with REQUEST_ERROR; nothing more is
// sent for the request (C004).
func TestC004_NoObjectsAfterRejectedPublish(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			track, err := NewLocalTrack(testTrack, nil)
			require.NoError(t, err)
			release := make(chan struct{})
			clientCfg := &Config{Handler: HandlerFunc(func(r Request) {
				<-release
				_ = r.Reject(wire.ReqUninterested, "no thanks")
			})}
			p := connect(t, nil, clientCfg)
			ctx := testCtx(t, 10*time.Second)
			published := make(chan error, 1)
			go func() {
				_, err := track.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
				published <- err
			}()
			settle(t, func() bool { return len(track.snapshot()) == 1 }, "the PUBLISH is out")
			ss := track.snapshot()[0]
			w := track.OpenSubgroup(0, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte("early")))
			ss.mu.Lock()
			assert.Len(t, ss.dataStreams, 1, "an early object opened a stream")
			ss.mu.Unlock()
			close(release)
			var re *RequestError
			require.ErrorAs(t, <-published, &re)
			assert.Equal(t, wire.ReqUninterested, re.Code)
			ss.mu.Lock()
			assert.Empty(t, ss.dataStreams, "the rejected request's stream was reset")
			ss.mu.Unlock()
			require.NoError(t, writeObject(w, 1, nil, []byte("after")))
			assert.Empty(t, track.snapshot(), "the rejected subscription no longer receives objects")
		})
	})
}
