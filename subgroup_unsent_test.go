package moqt

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Header-only streams (§11.3.2: "If a sender will not deliver any objects
// from a Subgroup, it MAY send a SUBGROUP_HEADER on a new stream, with no
// objects, and then send RESET_STREAM_AT with a reliable_size equal to the
// length of the stream header"): SubgroupWriter.CloseIncomplete on a
// writer that wrote no object.

// unsentTrack serves testTrack over a raw-QUIC Pipe, with RESET_STREAM_AT
// when reliable, and subscribes to it with params.
func unsentTrack(t *testing.T, reliable bool, params wire.Params) *liveTrack {
	t.Helper()
	track, cfg, served := newServedTrack(t, testTrack, nil)
	cfg.MaxFilterRanges = 4
	p := newPipePair(t, transport.PipeConfig{ReliableReset: reliable}, cfg, nil)
	ctx := testCtx(t, time.Minute)
	sub, err := p.client.Subscribe(ctx, testTrack, params)
	require.NoError(t, err)
	return &liveTrack{track: track, p: p, sub: sub, ss: <-served, ctx: ctx}
}

// readUntilDone returns the entries ReadObject yields until the
// subscription's end, and its DoneError.
func readUntilDone(t *testing.T, lt *liveTrack) ([]Object, *DoneError) {
	t.Helper()
	var got []Object
	for {
		o, err := lt.sub.ReadObject(lt.ctx)
		if err != nil {
			var de *DoneError
			require.ErrorAs(t, err, &de)
			return got, de
		}
		if o.Incomplete == nil {
			o.Payload = append([]byte(nil), o.Payload...)
		}
		got = append(got, o)
	}
}

// TestUnsentSubgroupHeaderOnly: a subgroup closed incomplete before any
// object reaches the subscriber as a stream with the SUBGROUP_HEADER
// alone, reset with the writer's code: ReadObject yields an Incomplete
// entry naming its group and subgroup, PUBLISH_DONE counts its stream,
// and the track goes on around it. SUBGROUP_ID_MODE 1 cannot name a
// subgroup without its first object: the header carries the ID.
func TestUnsentSubgroupHeaderOnly(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := unsentTrack(t, true, wire.Params{})
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("g0")))
		require.NoError(t, w.Close())
		lt.track.OpenSubgroup(1, 5, SubgroupOptions{SubgroupIDIsFirstObject: true, Priority: wire.Some[uint8](9)}).
			CloseIncomplete(wire.ResetInternalError)
		w = lt.track.OpenSubgroup(2, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("g2")))
		require.NoError(t, w.Close())
		lt.track.End(wire.DoneTrackEnded, "")

		got, de := readUntilDone(t, lt)
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
		assert.Equal(t, uint64(3), de.StreamCount, "the header-only stream is one of the subscription's")
		var objects []string
		var incomplete []Object
		for _, o := range got {
			if o.Incomplete != nil {
				incomplete = append(incomplete, o)
				continue
			}
			objects = append(objects, string(o.Payload))
		}
		assert.ElementsMatch(t, []string{"g0", "g2"}, objects)
		require.Len(t, incomplete, 1, "the unsent subgroup is told of")
		assert.Equal(t, uint64(1), incomplete[0].Location.Group)
		assert.Equal(t, uint64(5), incomplete[0].SubgroupID)
		requireReset(t, incomplete[0].Incomplete, wire.ResetInternalError)
	})
}

// TestUnsentSubgroupAcceptSubgroup: an AcceptSubgroup user gets the
// header-only stream, its header naming the subgroup, and the reset from
// its first read, not a protocol error.
func TestUnsentSubgroupAcceptSubgroup(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := unsentTrack(t, true, wire.Params{})
		w := lt.track.OpenSubgroup(3, 1, SubgroupOptions{EndOfGroup: true})
		w.CloseIncomplete(wire.ResetCancelled)
		w.CloseIncomplete(wire.ResetCancelled) // once only
		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)
		h := r.Header()
		assert.Equal(t, uint64(3), h.GroupID)
		assert.Equal(t, uint64(1), h.SubgroupID)
		assert.False(t, h.FirstObject, "no object, so not the subgroup's first")
		_, err = r.Next()
		requireReset(t, err, wire.ResetCancelled)
		lt.track.End(wire.DoneTrackEnded, "")
		waitDone(t, lt.ctx, lt.sub.Done(), "subscription")
		var de *DoneError
		require.ErrorAs(t, lt.sub.Err(), &de)
		assert.Equal(t, uint64(1), de.StreamCount)
		assert.NoError(t, lt.p.client.Context().Err(), "no protocol error")
	})
}

// TestUnsentSubgroupOnlyCovered: only a subscription an object of the
// subgroup could reach is told, over RESET_STREAM_AT or, without it, by a
// stream reset after cutLinger, whose header a reader at pace has taken;
// Reset tells nothing.
func TestUnsentSubgroupOnlyCovered(t *testing.T) {
	const group, subgroup, prio = 4, 2, 3
	cases := []struct {
		name     string
		reliable bool
		params   wire.Params
		reset    bool // Reset instead of CloseIncomplete
		told     bool
	}{
		{name: "unfiltered", reliable: true, told: true},
		{name: "no RESET_STREAM_AT", reliable: false, told: true},
		{name: "Reset", reliable: true, reset: true},
		{name: "Forward 0", reliable: true, params: wire.Params{Forward: wire.Some(false)}},
		{name: "window ends before the group", reliable: true,
			params: wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, group-1))}},
		{name: "window starts after the group", reliable: true,
			params: wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: group + 1}))}},
		{name: "window starts inside the group", reliable: true, told: true,
			params: wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: group, Object: 7}))}},
		{name: "subgroup filter leaves it out", reliable: true,
			params: wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter,
				Ranges: []wire.Range{{Start: subgroup + 1, Open: true}}}}}},
		{name: "subgroup filter takes it", reliable: true, told: true,
			params: wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter,
				Ranges: []wire.Range{{Start: subgroup, End: subgroup}}}}}},
		{name: "priority filter leaves it out", reliable: true,
			params: wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamPriorityFilter,
				Ranges: []wire.Range{{Start: prio + 1, Open: true}}}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				lt := unsentTrack(t, c.reliable, c.params)
				w := lt.track.OpenSubgroup(group, subgroup, SubgroupOptions{Priority: wire.Some[uint8](prio)})
				if c.reset {
					w.Reset(wire.ResetInternalError)
				} else {
					w.CloseIncomplete(wire.ResetInternalError)
				}
				lt.track.End(wire.DoneTrackEnded, "")
				got, de := readUntilDone(t, lt)
				if !c.told {
					assert.Empty(t, got)
					assert.Zero(t, de.StreamCount)
					return
				}
				require.Len(t, got, 1)
				assert.Equal(t, uint64(group), got[0].Location.Group)
				assert.Equal(t, uint64(subgroup), got[0].SubgroupID)
				var se *transport.StreamError
				require.True(t, errors.As(got[0].Incomplete, &se))
				assert.Equal(t, uint64(wire.ResetInternalError), se.Code)
				assert.Equal(t, uint64(1), de.StreamCount)
			})
		})
	}
}

// TestUnsentSubgroupsLingerBounded: without RESET_STREAM_AT each
// header-only stream waits out cutLinger, holding one of the subscriber's
// stream credits, which a stream read to its FIN would give back at once.
// A publisher closing a subgroup incomplete every millisecond, to a
// subscriber that reads everything, had them all linger, and the streams
// waiting for credit past maxPendingOpens cut the subscription off
// TOO_FAR_BEHIND. Past maxLingering they are reset at once: the
// subscription goes on to the track's end, its Stream Count counting
// every stream.
func TestUnsentSubgroupsLingerBounded(t *testing.T) {
	const unsent = 400 // in 400 ms, past the credit (100) and maxPendingOpens (256) together
	inBubble(t, func(t *testing.T) {
		lt := unsentTrack(t, false, wire.Params{})
		type result struct {
			got []Object
			de  *DoneError
		}
		read := make(chan result, 1)
		go func() {
			var r result
			defer func() { read <- r }() // also when readUntilDone fails
			r.got, r.de = readUntilDone(t, lt)
		}()
		for g := range uint64(unsent) {
			lt.track.OpenSubgroup(g, 0, SubgroupOptions{}).CloseIncomplete(wire.ResetCancelled)
			advance(time.Millisecond) // the subscriber takes what came
		}
		w := lt.track.OpenSubgroup(unsent, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("last")))
		require.NoError(t, w.Close())
		lt.track.End(wire.DoneTrackEnded, "")

		r := <-read
		require.NotNil(t, r.de, "the subscription's end")
		got, de := r.got, r.de
		assert.Equal(t, wire.DoneTrackEnded, de.Code, "%s", de.Reason)
		assert.Equal(t, uint64(unsent+1), de.StreamCount)
		var objects []string
		incomplete := 0
		for _, o := range got {
			if o.Incomplete != nil {
				incomplete++
				continue
			}
			objects = append(objects, string(o.Payload))
		}
		assert.Equal(t, []string{"last"}, objects)
		// The lingering ones are told of by their headers; those reset
		// at once lost them, and are told of as missing.
		assert.GreaterOrEqual(t, incomplete, maxLingering)
		assert.GreaterOrEqual(t, uint64(incomplete)+de.Missing, uint64(unsent), "every unsent subgroup told of, one way or the other")
		t.Logf("%d of %d unsent subgroups told of by their headers, %d streams missing", incomplete, unsent, de.Missing)
	})
}
