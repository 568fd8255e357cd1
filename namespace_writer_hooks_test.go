package moqt

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// propFilter is a TRACK_PROPERTY_FILTER on property type 0x40 for values
// lo to hi.
func propFilter(set uint8, lo, hi uint64) wire.RangeFilter {
	return wire.RangeFilter{Type: wire.ParamTrackPropertyFilter, SetID: set, PropertyType: 0x40,
		Ranges: []wire.Range{{Start: lo, End: hi}}}
}

// withProp is Track Properties with property 0x40 = v.
func withProp(v uint64) wire.KVList { return wire.KVList{{Type: 0x40, Value: v}} }

// assertNotClosed checks that ch is still open.
func assertNotClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		assert.Fail(t, what+": closed")
	default:
	}
}

// TestNamespaceWriterWantsAndChanged: Wants applies the SUBSCRIBE_TRACKS's
// TRACK_PROPERTY_FILTERs as REQUEST_UPDATEs replace and remove them
// (§3.3.2), and Changed tells of each accepted update that changes the
// prefix or the filters, by the time its REQUEST_OK is read.
func TestNamespaceWriterWantsAndChanged(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newNSServer()
		p := connect(t, &Config{Handler: h, MaxFilterRanges: 4}, nil)
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.SubscribeTracks(ctx, wire.NewNamespace("a"),
			wire.Params{RangeFilters: []wire.RangeFilter{propFilter(0, 5, 5)}})
		require.NoError(t, err)
		w := recvOrFail(t, h.writers)
		assert.True(t, w.Wants(withProp(5)))
		assert.False(t, w.Wants(withProp(6)))
		assert.False(t, w.Wants(nil), "a track without the property fails")

		changed := w.Changed()
		require.NoError(t, sub.Update(ctx, wire.Params{}))
		assertNotClosed(t, changed, "an update that changes nothing")

		require.NoError(t, sub.Update(ctx, wire.Params{RangeFilters: []wire.RangeFilter{propFilter(0, 6, 7)}}))
		closedOrFail(t, changed, "Changed after a filter update")
		assert.True(t, w.Wants(withProp(6)), "the filter replaced")
		assert.False(t, w.Wants(withProp(5)), "the old filter is gone")

		changed = w.Changed()
		assertNotClosed(t, changed, "a fresh Changed")
		require.NoError(t, sub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("b"))}))
		closedOrFail(t, changed, "Changed after a prefix update")
		assert.Equal(t, wire.NewNamespace("b"), w.Prefix())
		assert.True(t, w.Wants(withProp(7)), "the filters outlive a prefix update")

		changed = w.Changed()
		require.NoError(t, sub.Update(ctx, wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamTrackPropertyFilter, Clear: true}}}))
		closedOrFail(t, changed, "Changed after the filter is removed")
		assert.True(t, w.Wants(withProp(1)), "no filter: every track passes")
		assert.True(t, w.Wants(nil))

		// A refused update changes nothing.
		changed = w.Changed()
		err = sub.Update(ctx, wire.Params{RangeFilters: []wire.RangeFilter{
			{Type: wire.ParamTrackPropertyFilter, PropertyType: 0x40, Ranges: []wire.Range{{Start: 0, End: 0}, {Start: 2, End: 2}, {Start: 4, End: 4}, {Start: 6, End: 6}, {Start: 8, End: 8}}}}})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqInvalidFilter, re.Code, "5 Ranges over MAX_FILTER_RANGES 4")
		assertNotClosed(t, changed, "a refused update")
		assert.True(t, w.Wants(nil))
	})
}

// TestSubscribeTracksMaxFilterRanges: this end's MAX_FILTER_RANGES bounds a
// SUBSCRIBE_TRACKS's Range filters as a SUBSCRIBE's (§3.3.2): with 0, none
// is allowed, and the request is refused with INVALID_FILTER before the
// Handler sees it. In a bubble: the Handler hands the request over after
// its answer is sent, which the peer may read first.
func TestSubscribeTracksMaxFilterRanges(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newNSServer()
		_, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{Handler: h})
		fs := fp.open(&wire.SubscribeTracks{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a"),
			Parameters: wire.Params{RangeFilters: []wire.RangeFilter{propFilter(0, 5, 5)}}})
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		fs2 := fp.open(&wire.SubscribeTracks{RequestID: 2, TrackNamespacePrefix: wire.NewNamespace("a")})
		expect[*wire.RequestOK](fs2)
		synctest.Wait()
		assert.Len(t, h.reqs, 1, "only the second reached the Handler")
	})
}
