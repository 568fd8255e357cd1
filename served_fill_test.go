package moqt

import (
	"bufio"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/priority"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// wholeTrack is FILL_PARAMETERS asking for the whole track up to the
// Largest Object: a zero-length LOCATION_FILTER (§3.4).
func wholeTrack() *wire.Params {
	return &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())}
}

// fillServer serves trackA, Largest {2, 3}, with fills from the cursors
// mk returns; windows reports the window of each.
func fillServer(t *testing.T, cfg *Config, mk func() fetchCursor) (*Session, *fakePeer, <-chan filter.Window, <-chan *ServedSubscription) {
	t.Helper()
	return fillServerWith(t, func(t *testing.T, cfg *Config) (*Session, *fakePeer) {
		t.Helper()
		return serverSessionOver(t, "moqt", cfg)
	}, cfg, mk)
}

// fillServerWith is fillServer with the session connect makes.
func fillServerWith(t *testing.T, connect fakeConnector, cfg *Config, mk func() fetchCursor) (*Session, *fakePeer, <-chan filter.Window, <-chan *ServedSubscription) {
	t.Helper()
	lt := pubTrack(t, wire.Some(pl(2, 3)))
	served := make(chan *ServedSubscription, 4)
	h, _ := fetchHandler(lt)
	cfg.Handler = HandlerFunc(func(r Request) {
		if sr, ok := r.(*SubscribeRequest); ok {
			if ss, err := lt.Accept(sr, AcceptOptions{}); err == nil {
				served <- ss
			}
			return
		}
		h.ServeMOQT(r)
	})
	s, fp := connect(t, cfg)
	windows := make(chan filter.Window, 16)
	pubUseCursor(s, func(w filter.Window, _ bool) fetchCursor {
		windows <- w
		return mk()
	})
	return s, fp, windows, served
}

// A SUBSCRIBE with FILL_PARAMETERS gets a fill fetch stream tagged with
// its Request ID, from the start of the track up to the Largest Object
// its SUBSCRIBE_OK reports, then FIN (§3.4, §3.5).
func TestFillWithSubscribe(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		_, fp, windows, _ := fillServer(t, &Config{}, func() fetchCursor {
			return &pubSliceCursor{entries: []Object{pobj(1, 0, "a"), pobj(2, 3, "b")}}
		})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: wholeTrack()}))
		ok := expect[*wire.SubscribeOK](fs)
		assert.Equal(t, wire.Some(pl(2, 3)), ok.Parameters.LargestObject)
		d := fp.acceptPubFetch(false)
		assert.Equal(t, uint64(0), d.id)
		assert.Equal(t, []wire.Location{pl(1, 0), pl(2, 3)}, pubLocs(d.all()))
		w := recvOrFail(t, windows)
		assert.Equal(t, pl(0, 0), w.Start)
		assert.Equal(t, pl(2, 3), w.End)
	})
}

// Fill only while Forward is 1 (§3.4.1): FILL_PARAMETERS under Forward 0
// opens nothing, nor does moving to Forward 1 without them; a
// REQUEST_UPDATE with them under Forward 1 opens one tagged with its
// Request ID. A fill range starting past the Largest Object opens none.
func TestFillOnlyWhileForward(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		_, fp, _, _ := fillServer(t, &Config{}, func() fetchCursor { return &pubSliceCursor{} })
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{Forward: wire.Some(false), FillParameters: wholeTrack()}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{Forward: wire.Some(true)}})
		expect[*wire.RequestOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.StartFilter(pl(2, 4)))}}})
		expect[*wire.RequestOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 6, Parameters: wire.Params{Forward: wire.Some(false), FillParameters: wholeTrack()}})
		expect[*wire.RequestOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 8, Parameters: wire.Params{Forward: wire.Some(true), FillParameters: wholeTrack()}})
		expect[*wire.RequestOK](fs)
		// Streams are accepted in the order they opened: the first is the
		// only one that should exist.
		d := fp.acceptPubFetch(false)
		assert.Equal(t, uint64(8), d.id)
		assert.Empty(t, d.all())
	})
}

// Several fills may be open at once, each tagged with the Request ID that
// asked for it; a new one does not cancel the others (§3.4).
func TestSeveralFills(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		release := make(chan struct{})
		_, fp, _, _ := fillServer(t, &Config{}, func() fetchCursor {
			return &pubBlockedCursor{first: []Object{pobj(2, 0, "x")}, release: release}
		})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{FillParameters: wholeTrack()}})
		expect[*wire.RequestOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{FillParameters: wholeTrack()}})
		expect[*wire.RequestOK](fs)
		var fills []*pubFetchStream
		for range 3 {
			d := fp.acceptPubFetch(false)
			e, err := d.next()
			require.NoError(t, err)
			assert.Equal(t, pl(2, 0), e.Location())
			fills = append(fills, d)
		}
		// Each fill's stream opens on a goroutine of its own: any order.
		assert.ElementsMatch(t, []uint64{0, 2, 4}, []uint64{fills[0].id, fills[1].id, fills[2].id})
		close(release)
		for _, d := range fills {
			assert.Empty(t, d.all())
		}
	})
}

// C088: when the subscription ends, its open fill fetch streams are reset,
// before the PUBLISH_DONE that counts them (§9.9); the subscriber's
// cancellation resets them too.
func TestC088_SubscriptionEndResetsFills(t *testing.T) {
	blocked := func() fetchCursor { return &pubBlockedCursor{first: []Object{pobj(2, 0, "x")}} }
	t.Run("PUBLISH_DONE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp, _, served := fillServer(t, &Config{}, blocked)
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
			expect[*wire.SubscribeOK](fs)
			d := fp.acceptPubFetch(false)
			_, err := d.next()
			require.NoError(t, err)
			ss := recvOrFail(t, served)
			require.NoError(t, ss.End(wire.DoneGoingAway, "bye"))
			d.expectReset(wire.ResetGoingAway)
			done := expect[*wire.PublishDone](fs)
			assert.Equal(t, uint64(1), done.StreamCount, "the fill stream counts")
		})
	})
	t.Run("cancelled", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp, _, _ := fillServer(t, &Config{}, blocked)
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
			expect[*wire.SubscribeOK](fs)
			d := fp.acceptPubFetch(false)
			_, err := d.next()
			require.NoError(t, err)
			fs.cancel()
			d.expectReset(wire.ResetCancelled)
		})
	})
}

// failingCursor fails at once.
type failingCursor struct{}

func (failingCursor) next(ctx context.Context) (Object, error) {
	return Object{}, errors.New("storage failed")
}

// C089: a fill that cannot be served is a fill fetch stream reset right
// after its FETCH_HEADER: past the cap on fetches served, or when reading
// what the track keeps fails.
func TestC089_FillFailureResetsAfterHeader(t *testing.T) {
	t.Run("cap", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			s, fp, _, _ := fillServer(t, &Config{MaxServedFetches: 1}, func() fetchCursor {
				return &pubBlockedCursor{first: []Object{pobj(2, 0, "x")}, release: release}
			})
			fetch := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			expect[*wire.FetchOK](fetch)
			fetchData := fp.acceptPubFetch(false)
			assert.Equal(t, uint64(0), fetchData.id)
			require.Equal(t, int64(1), s.serving.n.Load())
			fs := fp.open(subscribeMsg(2, trackA, wire.Params{FillParameters: wholeTrack()}))
			expect[*wire.SubscribeOK](fs)
			d := fp.acceptPubFetch(false)
			assert.Equal(t, uint64(2), d.id)
			d.expectReset(wire.ResetExcessiveLoad)
		})
	})
	t.Run("cursor error", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp, _, _ := fillServer(t, &Config{}, func() fetchCursor { return failingCursor{} })
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
			expect[*wire.SubscribeOK](fs)
			d := fp.acceptPubFetch(false)
			assert.Equal(t, uint64(0), d.id)
			d.expectReset(wire.ResetInternalError)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{}})
			expect[*wire.RequestOK](fs) // the subscription goes on
		})
	})
}

// The subscriber's STOP_SENDING on a fill fetch stream ends that fill
// only: the subscription goes on, and the fill's place is free.
func TestFillStopSending(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp, _, _ := fillServer(t, &Config{}, func() fetchCursor {
			return &pubBlockedCursor{first: []Object{pobj(2, 0, "x")}}
		})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
		expect[*wire.SubscribeOK](fs)
		d := fp.acceptPubFetch(false)
		_, err := d.next()
		require.NoError(t, err)
		d.str.CancelRead(uint64(wire.ResetCancelled))
		require.Eventually(t, func() bool { return s.serving.n.Load() == 0 }, fakeGuard, time.Millisecond)
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{}})
		expect[*wire.RequestOK](fs)
	})
}

// A fill inherits the subscription's parameters; those inside
// FILL_PARAMETERS take their place (§3.4, §9.20.16).
func TestFillParams(t *testing.T) {
	sg := func(n uint64) wire.RangeFilter {
		return wire.RangeFilter{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: n, End: n}}}
	}
	oid := wire.RangeFilter{Type: wire.ParamObjectIDFilter, Ranges: []wire.Range{{Start: 1, End: 1}}}
	sub := wire.Params{SubscriberPriority: wire.Some[uint8](10), LocationFilter: wire.Some(wire.NextObjectFilter()),
		RangeFilters: []wire.RangeFilter{sg(1), oid}, Forward: wire.Some(true)}
	t.Run("inherited", func(t *testing.T) {
		fp := fillParams(&sub, &wire.Params{}, wire.GroupOrderDescending)
		assert.Equal(t, wire.Some[uint8](10), fp.SubscriberPriority)
		assert.Equal(t, sub.LocationFilter, fp.LocationFilter)
		assert.Equal(t, sub.RangeFilters, fp.RangeFilters)
		assert.Equal(t, wire.Some(wire.GroupOrderDescending), fp.GroupOrder, "the track's default order")
		assert.False(t, fp.FillTimeout.Set)
	})
	t.Run("overridden", func(t *testing.T) {
		fill := &wire.Params{SubscriberPriority: wire.Some[uint8](3), LocationFilter: wire.Some(wire.NoLocationFilter()),
			GroupOrder: wire.Some(wire.GroupOrderAscending), RangeFilters: []wire.RangeFilter{sg(2)},
			FillTimeout: wire.Some[uint64](5)}
		fp := fillParams(&sub, fill, wire.GroupOrderDescending)
		assert.Equal(t, wire.Some[uint8](3), fp.SubscriberPriority)
		assert.False(t, fp.LocationFilter.Set, "a zero-length filter: the whole track")
		assert.Equal(t, []wire.RangeFilter{oid, sg(2)}, fp.RangeFilters)
		assert.Equal(t, wire.Some(wire.GroupOrderAscending), fp.GroupOrder)
		assert.Equal(t, wire.Some[uint64](5), fp.FillTimeout)
	})
}

// The subscriber of this end's PUBLISH asks for a fill with REQUEST_UPDATE
// (§9.20.16): the fill is tagged with the update's Request ID.
func TestFillOnPublish(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := serverSession(t, &Config{})
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			return &pubSliceCursor{entries: []Object{pobj(1, 0, "past")}}
		})
		res := startPublish(fakeCtx(t), s, trackA, wire.Params{LargestObject: wire.Some(pl(1, 0))}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, res).err)
		fs.send(&wire.RequestUpdate{RequestID: 0, Parameters: wire.Params{FillParameters: wholeTrack()}})
		assert.Equal(t, wire.Some(pl(1, 0)), expect[*wire.RequestOK](fs).Parameters.LargestObject)
		d := fp.acceptPubFetch(false)
		assert.Equal(t, uint64(0), d.id)
		assert.Equal(t, []wire.Location{pl(1, 0)}, pubLocs(d.all()))
	})
}

// The Ranges inside a REQUEST_UPDATE's FILL_PARAMETERS count against
// MAX_FILTER_RANGES as a SUBSCRIBE's do (§3.3.2): past it the update is
// refused with INVALID_FILTER, and no fill opens.
func TestFillUpdateRangesLimited(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		_, fp, windows, _ := fillServer(t, &Config{MaxFilterRanges: 1}, func() fetchCursor { return &pubSliceCursor{} })
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		two := wire.RangeFilter{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: 0, End: 0}, {Start: 2, End: 2}}}
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{
			FillParameters: &wire.Params{RangeFilters: []wire.RangeFilter{two}}}})
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		assert.Empty(t, windows, "no fill opened")
	})
}

// TestFillOwnSubscriberPriority: a fill whose FILL_PARAMETERS set
// SUBSCRIBER_PRIORITY is ranked by it, even after a REQUEST_UPDATE changes
// the subscription's; a fill without one is ranked by the subscription's
// and moves with it (§3.4, §5.1.2). Raw QUIC, where streams are ranked.
func TestFillOwnSubscriberPriority(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		var calls atomic.Int32
		s, fp, _, _ := fillServer(t, &Config{}, func() fetchCursor {
			// The first fill starts at a later group than the second: ranked
			// as one subscription's streams, the first would go behind.
			first := pobj(1, 0, "a")
			if calls.Add(1) > 1 {
				first = pobj(0, 0, "b")
			}
			return &pubBlockedCursor{first: []Object{first}, release: release}
		})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{SubscriberPriority: wire.Some[uint8](100),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter()), SubscriberPriority: wire.Some[uint8](200)}}))
		expect[*wire.SubscribeOK](fs)
		own := fp.acceptPubFetch(false)
		_, err := own.next()
		require.NoError(t, err)
		levels := s.priorities().Levels()
		require.Len(t, levels, 1)
		var ownStr priority.Stream
		for str := range levels {
			ownStr = str
		}

		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](250),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())}}})
		expect[*wire.RequestOK](fs)
		inherits := fp.acceptPubFetch(false)
		_, err = inherits.next()
		require.NoError(t, err)
		rank := func() (own, inherits int8) {
			levels := s.priorities().Levels()
			require.Len(t, levels, 2)
			for str, l := range levels {
				if str == ownStr {
					own = l[0]
				} else {
					inherits = l[0]
				}
			}
			return own, inherits
		}
		o, i := rank()
		assert.Less(t, o, i, "the fill's own priority 200 before the subscription's 250")

		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](10)}})
		expect[*wire.RequestOK](fs)
		settle(t, func() bool { o, i := rank(); return i < o }, "the inheriting fill moves with the subscription's priority 10")
	})
}

// TestRefusedFillsDoNotPileUp: fills refused over Config.MaxServedFetches
// are opened and reset (C089), and no more of them linger at once, keeping
// their FETCH_HEADER, than that bound: the rest are reset at once, so a
// peer's REQUEST_UPDATEs cannot make streams, goroutines and timers pile
// up. WebTransport, where a reset cannot keep what was written and a cut
// stream lingers; in a bubble, so that every refusal has been made when
// the streams are counted, and the linger has not run out.
func TestRefusedFillsDoNotPileUp(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		_, fp, _, served := fillServerWith(t, func(t *testing.T, cfg *Config) (*Session, *fakePeer) {
			t.Helper()
			return pipeServerSession(t, transport.PipeConfig{WebTransport: true}, cfg)
		}, &Config{MaxServedFetches: 1}, func() fetchCursor {
			return &pubBlockedCursor{first: []Object{pobj(1, 0, "a")}, release: release}
		})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		holder := fp.acceptPubFetch(false)
		_, err := holder.next()
		require.NoError(t, err)
		const refused = 40
		for i := range refused {
			fs.send(&wire.RequestUpdate{RequestID: uint64(2 + 2*i), Parameters: wire.Params{FillParameters: wholeTrack()}})
			expect[*wire.RequestOK](fs)
		}
		headers := 0
		for range refused {
			str, err := fp.conn.AcceptUniStream(fakeCtx(t))
			require.NoError(t, err)
			h, err := wire.ReadFetchHeader(bufio.NewReader(str))
			if err == nil {
				headers++
				assert.NotZero(t, h.RequestID, "a refused fill is tagged with its REQUEST_UPDATE")
			}
		}
		synctest.Wait()
		assert.Positive(t, headers, "a refused fill lingers with its FETCH_HEADER")
		ss.mu.Lock()
		open := len(ss.dataStreams)
		ss.mu.Unlock()
		assert.Equal(t, 2, open, "the fill being served and one refused fill lingering")
	})
}
