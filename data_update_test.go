package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestC027_RangeFiltersEndToEnd: a SUBSCRIBE with range filters receives
// only objects passing FORWARD, the Location filter and every range filter
// (§3.3.3), with the publisher allowing them through MAX_FILTER_RANGES.
func TestC027_RangeFiltersEndToEnd(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			track, err := NewLocalTrack(testTrack, nil)
			require.NoError(t, err)
			cfg, served := trackServer(t, track)
			cfg.MaxFilterRanges = 4
			p := newPair(t, tr.scheme, cfg, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
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
						require.NoError(t, w.WriteObject(id, nil, []byte{byte(g), byte(sg), byte(id)}))
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
	}
}

// TestDataUpdateMovesFilter: REQUEST_UPDATE changes a live subscription's
// Location filter; objects then follow the new window (§9.5.1).
func TestDataUpdateMovesFilter(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			track, err := NewLocalTrack(testTrack, nil)
			require.NoError(t, err)
			cfg, served := trackServer(t, track)
			p := newPair(t, tr.scheme, cfg, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{
				LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{Group: 0, Object: 0}, 0))})
			require.NoError(t, err)
			<-served
			publish := func(g uint64) {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				require.NoError(t, w.WriteObject(0, nil, []byte{byte(g)}))
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
}
