package moqt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// REQUEST_UPDATE: one answer each, MAX_REQUEST_UPDATES, a failed update
// ending its subscription, MAX_FILTER_RANGES, and who may send one (§9.5,
// §9.1.6).

// C010: every successful REQUEST_UPDATE gets its own REQUEST_OK (§9.5.1).
func TestC010_EachUpdateAnswered(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedChAt(wire.Some(wire.Location{Group: 3, Object: 1}), AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		for i, prio := range []uint8{10, 20, 30} {
			fs.send(&wire.RequestUpdate{RequestID: uint64(2 + 2*i), Parameters: wire.Params{SubscriberPriority: wire.Some(prio)}})
		}
		for range 3 {
			ok := expect[*wire.RequestOK](fs)
			// C016: REQUEST_UPDATE_OK carries LARGEST_OBJECT when known.
			assert.Equal(t, wire.Some(wire.Location{Group: 3, Object: 1}), ok.Parameters.LargestObject)
		}
		assert.Equal(t, wire.Some[uint8](30), ss.Params().SubscriberPriority)
		require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
		expect[*wire.PublishDone](fs) // and no extra REQUEST_OK
	})
}

// MAX_REQUEST_UPDATES (§9.1.7): updates pile up behind a blocked OnUpdate;
// one more than the limit closes with TOO_MANY_REQUEST_UPDATES.
func TestMaxRequestUpdatesEnforced(t *testing.T) {
	const limit = 2
	newCfg := func(entered chan<- struct{}, release <-chan struct{}) *Config {
		h, _ := servedCh(AcceptOptions{OnUpdate: func(*ServedSubscription, *wire.Params) error {
			entered <- struct{}{}
			<-release
			return nil
		}})
		return &Config{Handler: h, MaxRequestUpdates: limit}
	}
	t.Run("within the limit", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			entered := make(chan struct{}, 8)
			release := make(chan struct{})
			_, fp := serverSessionSetup(t, newCfg(entered, release), func(st *wire.Setup) {
				assert.Equal(t, wire.Some[uint64](limit), st.MaxRequestUpdates)
			})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2})
			recvOrFail(t, entered)
			fs.send(&wire.RequestUpdate{RequestID: 4})
			close(release)
			expect[*wire.RequestOK](fs)
			expect[*wire.RequestOK](fs)
			// Credit is back: two more are fine.
			fs.send(&wire.RequestUpdate{RequestID: 6})
			fs.send(&wire.RequestUpdate{RequestID: 8})
			expect[*wire.RequestOK](fs)
			expect[*wire.RequestOK](fs)
		})
	})
	t.Run("one over", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			entered := make(chan struct{}, 8)
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			_, fp := serverSession(t, newCfg(entered, release))
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2})
			recvOrFail(t, entered) // the first is being processed, and stays so
			fs.send(&wire.RequestUpdate{RequestID: 4})
			fs.send(&wire.RequestUpdate{RequestID: 6})
			fp.expectClose(wire.TooManyRequestUpdates)
		})
	})
}

// serverSessionSetup is serverSession that also checks the library's SETUP.
// Call it inside inBubble.
func serverSessionSetup(t *testing.T, cfg *Config, check func(*wire.Setup)) (*Session, *fakePeer) {
	t.Helper()
	s, fp, served := pipeServerAccept(t, transport.PipeConfig{}, cfg)
	fp.sendSetup(&wire.Setup{Path: wire.Some("/live"), Authority: wire.Some(pipeAuthority)})
	check(fp.readPeerSetup())
	require.NoError(t, <-served)
	return s, fp
}

// The library, as an update sender, respects the peer's MAX_REQUEST_UPDATES:
// a further Update waits for credit, and one abandoned while waiting never
// reaches the wire nor consumes a Request ID.
func TestMaxRequestUpdatesRespected(t *testing.T) {
	// MAX_REQUEST_UPDATES is 19's (18: TestNoUpdateLimitOn18).
	forDrafts(t, newerDrafts, func(t *testing.T) {
		s, fp, dialed := pipeClientDial(t, transport.PipeConfig{}, nil)
		fp.readPeerSetup()
		fp.sendSetup(&wire.Setup{MaxRequestUpdates: wire.Some[uint64](1)})
		require.NoError(t, recvOrFail(t, dialed))
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})

		u1 := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{SubscriberPriority: wire.Some[uint8](1)}) })
		assert.Equal(t, uint64(2), expect[*wire.RequestUpdate](fs).RequestID)

		ctx, cancel := context.WithCancel(fakeCtx(t))
		blocked := make(chan struct{})
		u2 := goErr(func() error {
			close(blocked)
			return sub.Update(ctx, wire.Params{SubscriberPriority: wire.Some[uint8](2)})
		})
		<-blocked
		cancel()
		assert.ErrorIs(t, recvOrFail(t, u2), context.Canceled)

		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, u1))
		u3 := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{SubscriberPriority: wire.Some[uint8](3)}) })
		m := expect[*wire.RequestUpdate](fs)
		assert.Equal(t, uint64(4), m.RequestID, "the abandoned update was sent")
		assert.Equal(t, wire.Some[uint8](3), m.Parameters.SubscriberPriority)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, u3))
	})
}

// C080: a refused update is answered with REQUEST_ERROR, and the
// subscription then ends with PUBLISH_DONE UPDATE_FAILED and FIN.
func TestC080_FailedUpdateEndsSubscription(t *testing.T) {
	t.Run("library publisher", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			h, served := servedCh(AcceptOptions{OnUpdate: func(_ *ServedSubscription, p *wire.Params) error {
				if p.SubscriberPriority.Value == 0 {
					return &RequestError{Code: wire.ReqNotSupported, Reason: "priority 0 is reserved here"}
				}
				return nil
			}})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			ss := recvOrFail(t, served)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](5)}})
			expect[*wire.RequestOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](0)}})
			re := expect[*wire.RequestError](fs)
			assert.Equal(t, wire.ReqNotSupported, re.ErrorCode)
			d := expect[*wire.PublishDone](fs)
			assert.Equal(t, wire.DoneUpdateFailed, d.StatusCode)
			assert.Equal(t, uint64(0), d.StreamCount) // C083
			fs.expectFIN()
			assert.Equal(t, stateTerminated, ss.current())
			assert.Equal(t, wire.Some[uint8](5), ss.Params().SubscriberPriority, "the refused update applied")
		})
	})
	t.Run("library subscriber", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(false)}) })
			expect[*wire.RequestUpdate](fs)
			fs.send(&wire.RequestError{ErrorCode: wire.ReqNotSupported, ErrorReason: "no"})
			fs.send(&wire.PublishDone{StatusCode: wire.DoneUpdateFailed})
			fs.fin()
			var re *RequestError
			require.ErrorAs(t, recvOrFail(t, upd), &re)
			assert.Equal(t, wire.ReqNotSupported, re.Code)
			closedOrFail(t, sub.Done(), "subscription not terminated")
			var de *DoneError
			require.ErrorAs(t, sub.Err(), &de)
			assert.Equal(t, wire.DoneUpdateFailed, de.Code)
			assert.True(t, sub.forwardState(), "a refused update changed the Forward State")
			fs.expectFIN()
		})
	})
}

func rangeFilter(t wire.ParamType, set uint8, n int) wire.RangeFilter {
	f := wire.RangeFilter{Type: t, SetID: set}
	for i := range n {
		f.Ranges = append(f.Ranges, wire.Range{Start: uint64(10 * i), End: uint64(10*i + 5)})
	}
	return f
}

// C026: more Ranges than MAX_FILTER_RANGES is INVALID_FILTER, in SUBSCRIBE
// and in REQUEST_UPDATE, counting the subscription's filters after the
// update.
func TestC026_MaxFilterRanges(t *testing.T) {
	h, _ := servedCh(AcceptOptions{})
	t.Run("default 0: SUBSCRIBE with a range filter", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 1)}}))
			re := expect[*wire.RequestError](fs)
			assert.Equal(t, wire.ReqInvalidFilter, re.ErrorCode)
			fs.expectFIN()
		})
	})
	t.Run("SUBSCRIBE over the limit", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 2})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 3)}}))
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
			fs.expectFIN()
		})
	})
	t.Run("default 0: SUBSCRIBE with a range filter of no Ranges", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			// "Range Filters are only allowed if the setup option
			// MAX_FILTER_RANGES is non-zero" (§3.3.2): with 0, any filter
			// parameter is refused, even one without Ranges.
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter}}}))
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
			fs.expectFIN()
		})
	})
	// FILL_PARAMETERS is 21's (20+).
	t.Run("FILL_PARAMETERS over the limit", func(t *testing.T) {
		forDrafts(t, only21, func(t *testing.T) {
			// The fill fetch stream's filters are those of the subscription
			// with FILL_PARAMETERS' filters of the same type replacing them
			// (§3.4): 2 subscription Ranges of one type and 2 fill Ranges of
			// another make 4 for the fill fetch.
			_, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 3})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{
				RangeFilters:   []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 2)},
				FillParameters: &wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamObjectIDFilter, 0, 2)}},
			}))
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
			fs.expectFIN()
		})
	})
	t.Run("REQUEST_UPDATE at default 0", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 1)}}})
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
			assert.Equal(t, wire.DoneUpdateFailed, expect[*wire.PublishDone](fs).StatusCode)
			fs.expectFIN()
		})
	})
	t.Run("REQUEST_UPDATE over the limit", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 2})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 2)}}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 1)}}})
			expect[*wire.RequestOK](fs) // replaces the two Ranges with one
			fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamObjectIDFilter, 0, 2)}}})
			re := expect[*wire.RequestError](fs) // 1 + 2 > 2
			assert.Equal(t, wire.ReqInvalidFilter, re.ErrorCode)
			assert.Equal(t, wire.DoneUpdateFailed, expect[*wire.PublishDone](fs).StatusCode)
			fs.expectFIN()
		})
	})
}

// C025: a repeated (type, SetID) range filter is INVALID_FILTER, in
// SUBSCRIBE and in REQUEST_UPDATE.
func TestC025_RepeatedRangeFilter(t *testing.T) {
	h, _ := servedCh(AcceptOptions{})
	twice := []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 1, 1), rangeFilter(wire.ParamSubgroupFilter, 1, 1)}
	t.Run("SUBSCRIBE", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 8})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: twice}))
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
			fs.expectFIN()
		})
	})
	t.Run("REQUEST_UPDATE", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			s, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 8})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{RangeFilters: twice}})
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
			assert.Equal(t, wire.DoneUpdateFailed, expect[*wire.PublishDone](fs).StatusCode) // C080
			fs.expectFIN()
			assert.NoError(t, s.Context().Err())
		})
	})
}

// REQUEST_UPDATE only from the requester, or the subscriber of a PUBLISH
// (§9.5).
func TestRequestUpdateFromWrongSide(t *testing.T) {
	t.Run("publisher of a SUBSCRIBE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fs.send(&wire.RequestUpdate{RequestID: 1})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("on TRACK_STATUS", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			release := make(chan struct{})
			t.Cleanup(func() { close(release) })
			_, fp := serverSession(t, &Config{Handler: HandlerFunc(func(Request) { <-release })})
			fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
			fs.send(&wire.RequestUpdate{RequestID: 2})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
}

// The publisher of a PUBLISH may update it; the subscriber answers after
// its PUBLISH_OK, never before (the response comes first).
func TestRequestUpdateFromPublishSender(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		release := make(chan struct{})
		subs := make(chan *Subscription, 1)
		h := HandlerFunc(func(r Request) {
			<-release
			// EXPIRES tells this PUBLISH_OK from the REQUEST_UPDATE_OK.
			sub, err := r.(*PublishRequest).Accept(wire.Params{Expires: wire.Some[uint64](5000)})
			if err == nil {
				subs <- sub
			}
		})
		received := make(chan struct{}, 1)
		_, fp := clientSession(t, &Config{Handler: h, hooks: &sessionHooks{updateReceived: func() { received <- struct{}{} }}})
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
		fs.send(&wire.RequestUpdate{RequestID: 3, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](9)}})
		recvOrFail(t, received) // the library holds the update, unanswered
		close(release)
		assert.Equal(t, wire.Some[uint64](5000), expect[*wire.RequestOK](fs).Parameters.Expires, "PUBLISH_OK first")
		assert.False(t, expect[*wire.RequestOK](fs).Parameters.Expires.Set, "then REQUEST_UPDATE_OK")
		sub := recvOrFail(t, subs)
		assert.Equal(t, wire.Some[uint8](9), sub.Params().SubscriberPriority)
	})
}
