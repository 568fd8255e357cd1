package moqt

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// openObjects opens a subgroup stream of group on alias carrying the
// objects first, first+1, … with payloads.
func (fp *fakePeer) openObjects(alias, group, first uint64, payloads ...string) transport.SendStream {
	fp.t.Helper()
	str, err := fp.conn.OpenUniStreamSync(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: alias, GroupID: group, DefaultPriority: true}}
	b, err := enc.Header.Append(nil)
	require.NoError(fp.t, err)
	for i, p := range payloads {
		b, err = enc.AppendObject(b, wire.SubgroupObject{ObjectID: first + uint64(i), PayloadLength: uint64(len(p))})
		require.NoError(fp.t, err)
		b = append(b, p...)
	}
	_, err = str.Write(b)
	require.NoError(fp.t, err)
	return str
}

// subscribeInBackground subscribes with params in the background and returns
// where the subscription will come once answered, the fake's request
// stream and the SUBSCRIBE.
func subscribeInBackground(t *testing.T, s *Session, fp *fakePeer, params wire.Params) (<-chan *Subscription, *fakeStream, *wire.Subscribe) {
	t.Helper()
	got := make(chan *Subscription, 1)
	go func() {
		sub, err := s.Subscribe(fakeCtx(t), testTrack, params)
		if err == nil {
			got <- sub
		}
		close(got)
	}()
	req := fp.accept()
	return got, req, expect[*wire.Subscribe](req)
}

// subscribeAnswered subscribes with params, answers SUBSCRIBE_OK with
// largest on alias 1, and returns the subscription, the fake's request
// stream and the SUBSCRIBE.
func subscribeAnswered(t *testing.T, s *Session, fp *fakePeer, params wire.Params, largest wire.Location) (*Subscription, *fakeStream, *wire.Subscribe) {
	t.Helper()
	got, req, m := subscribeInBackground(t, s, fp, params)
	req.send(&wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{LargestObject: wire.Some(largest)}})
	sub := recvOrFail(t, got)
	require.NotNil(t, sub)
	return sub, req, m
}

// subscribeWithFill is subscribeAnswered for a SUBSCRIBE carrying
// FILL_PARAMETERS; it returns the SUBSCRIBE's Request ID.
func subscribeWithFill(t *testing.T, s *Session, fp *fakePeer, params wire.Params, largest wire.Location) (*Subscription, *fakeStream, uint64) {
	t.Helper()
	sub, req, m := subscribeAnswered(t, s, fp, params, largest)
	require.NotNil(t, m.Parameters.FillParameters, "FILL_PARAMETERS sent")
	return sub, req, m.RequestID
}

// readEntries reads n entries from sub and describes each: "g/o:payload",
// "gap g/o", "incomplete" for an entry that reports a failed fill or
// subgroup, or "err".
func readEntries(t *testing.T, sub *Subscription, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), fakeGuard)
	defer cancel()
	var out []string
	for range n {
		o, err := sub.ReadObject(ctx)
		switch {
		case err != nil:
			require.NotErrorIs(t, err, context.DeadlineExceeded, "after %v", out)
			out = append(out, "err")
		case o.Incomplete != nil:
			out = append(out, "incomplete")
		case o.EndOfRange != 0:
			out = append(out, fmt.Sprintf("gap %d/%d", o.Location.Group, o.Location.Object))
		default:
			out = append(out, fmt.Sprintf("%d/%d:%s", o.Location.Group, o.Location.Object, o.Payload))
		}
	}
	return out
}

// nextObjectWithFill is §3.4's recipe: the Next Object filter and an
// open-ended fill.
var nextObjectWithFill = wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
	FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())}}

// TestFillExactlyOnceAcrossSeam: with §3.4's recipe, ReadObject yields the
// fill, gaps included, then the subscription's objects, each once and in
// order, though the subscription's stream arrives before the fill's.
func TestFillExactlyOnceAcrossSeam(t *testing.T) {
	forClientSessions(t, "seam", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 2, Object: 1})
		live := fp.openObjects(1, 2, 2, "s22", "s23")
		require.NoError(t, live.Close())
		got := make(chan []string, 1)
		go func() { got <- readEntries(t, sub, 7) }()
		time.Sleep(20 * time.Millisecond) // ReadObject waits for the fill meanwhile
		fill := fp.openFetch(id, fobj(0, 0, "f00"), fobj(0, 1, "f01"), fgap(wire.EndOfNonExistentRange, 1, wire.MaxVarint),
			fobj(2, 0, "f20"), fobj(2, 1, "f21"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"0/0:f00", "0/1:f01", fmt.Sprintf("gap 1/%d", uint64(wire.MaxVarint)), "2/0:f20", "2/1:f21", "2/2:s22", "2/3:s23"},
			recvOrFail(t, got))
	})
}

// TestFillDropsOnlyCoveredObjects: a subscription whose objects overlap
// the fill's range gets the overlap once, from the fill; what lies past it
// comes from the subscription.
func TestFillDropsOnlyCoveredObjects(t *testing.T) {
	forClientSessions(t, "overlap", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}}
		sub, _, id := subscribeWithFill(t, s, fp, params, wire.Location{Group: 4, Object: 1})
		live := fp.openObjects(1, 4, 1, "s41", "s42")
		require.NoError(t, live.Close())
		fill := fp.openFetch(id, fobj(4, 0, "f40"), fobj(4, 1, "f41"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"4/0:f40", "4/1:f41", "4/2:s42"}, readEntries(t, sub, 3))
	})
}

// TestFillKeepsObjectsInItsGaps: where the fill reported objects as
// unknown or timed out it delivered none, so the subscription's objects
// there are returned; those the fill delivered are not returned again.
func TestFillKeepsObjectsInItsGaps(t *testing.T) {
	forClientSessions(t, "gaps", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}}
		sub, _, id := subscribeWithFill(t, s, fp, params, wire.Location{Group: 4, Object: 4})
		live := fp.openObjects(1, 4, 1, "s41", "s42", "s43", "s44", "s45")
		require.NoError(t, live.Close())
		fill := fp.openFetch(id, fgap(wire.EndOfUnknownRange, 4, 1), fobj(4, 2, "f42"),
			fgap(wire.EndOfTimedOutRange, 4, 3), fobj(4, 4, "f44"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"gap 4/1", "4/2:f42", "gap 4/3", "4/4:f44", "4/1:s41", "4/3:s43", "4/5:s45"},
			readEntries(t, sub, 7))
	})
}

// TestFillResetLeavesSubscription: a fill stream that is reset is an
// entry of ReadObject whose Incomplete wraps ErrFillFailed and the reset,
// and the subscription goes on (§3.4.1).
func TestFillResetLeavesSubscription(t *testing.T) {
	forClientSessions(t, "reset", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1, Object: 0})
		fill := fp.openFetch(id, fobj(0, 0, "f00"))
		live := fp.openObjects(1, 1, 1, "s11")
		require.NoError(t, live.Close())
		ctx := fakeCtx(t)
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, []byte("f00"), o.Payload)
		fill.CancelWrite(uint64(wire.ResetUnknownObjectStatus))
		o, err = sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.ErrorIs(t, o.Incomplete, ErrFillFailed)
		var se *StreamError
		require.ErrorAs(t, o.Incomplete, &se)
		assert.Equal(t, wire.ResetUnknownObjectStatus, se.Code)
		o, err = sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, []byte("s11"), o.Payload)
		assert.Nil(t, sub.Err(), "the subscription is live")
	})
}

// TestFillMissingIsReported: a fill SUBSCRIBE_OK promised that never opens
// is reported after Config.FillWait, and the subscription's objects flow.
func TestFillMissingIsReported(t *testing.T) {
	forClientSessions(t, "missing", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{FillWait: 100 * time.Millisecond})
		sub, _, _ := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1, Object: 0})
		live := fp.openObjects(1, 1, 1, "s11")
		require.NoError(t, live.Close())
		ctx := fakeCtx(t)
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.ErrorIs(t, o.Incomplete, ErrFillFailed)
		assert.ErrorIs(t, o.Incomplete, errFillMissing)
		o, err = sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, []byte("s11"), o.Payload)
	})
}

// TestAcceptFill: AcceptFill hands out the fill streams, the SUBSCRIBE's
// and an update's (tagged with the REQUEST_UPDATE's Request ID, §3.4);
// ReadObject then yields no fill entries and does not wait for them, and a
// stream for a fill that was not asked for is stopped.
func TestAcceptFill(t *testing.T) {
	forClientSessions(t, "accept", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, req, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 3, Object: 0})
		fill := fp.openFetch(id, fobj(3, 0, "f30"))
		require.NoError(t, fill.Close())
		f, err := sub.AcceptFill(fakeCtx(t))
		require.NoError(t, err)
		objs, err := readFetch(t, f)
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, objs, 1)
		assert.Equal(t, []byte("f30"), objs[0].Payload)

		live := fp.openObjects(1, 3, 1, "s31")
		require.NoError(t, live.Close())
		o, err := sub.ReadObject(fakeCtx(t))
		require.NoError(t, err)
		assert.Equal(t, []byte("s31"), o.Payload)

		update := goErr(func() error {
			return sub.Update(fakeCtx(t), wire.Params{FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}})
		})
		u := expect[*wire.RequestUpdate](req)
		later := fp.openFetch(u.RequestID, fobj(3, 0, "u30"))
		require.NoError(t, later.Close())
		req.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, update))
		f2, err := sub.AcceptFill(fakeCtx(t))
		require.NoError(t, err)
		objs, err = readFetch(t, f2)
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, objs, 1)
		assert.Equal(t, []byte("u30"), objs[0].Payload)

		again := fp.openFetch(u.RequestID, fobj(3, 0, "dup"))
		assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, again))
	})
}

// TestFillBeforeSubscribeOK: a fill stream that arrives before
// SUBSCRIBE_OK is held and read once the subscription is Established.
func TestFillBeforeSubscribeOK(t *testing.T) {
	forClientSessions(t, "early", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		got, req, m := subscribeInBackground(t, s, fp, nextObjectWithFill)
		fill := fp.openFetch(m.RequestID, fobj(0, 0, "f00"))
		require.NoError(t, fill.Close())
		waitFillRouted(t, s, m.RequestID)
		req.send(&wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{LargestObject: wire.Some(wire.Location{})}})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		assert.Equal(t, []string{"0/0:f00"}, readEntries(t, sub, 1))
	})
}

// waitFillRouted waits until the fill stream of request id has reached its
// subscription.
func waitFillRouted(t *testing.T, s *Session, id uint64) {
	t.Helper()
	settle(t, func() bool {
		sub, _ := s.fetches.lookup(id).(*Subscription)
		if sub == nil {
			return false
		}
		sub.mu.Lock()
		defer sub.mu.Unlock()
		return sub.fill.slots[id] != nil && sub.fill.slots[id].arrived
	}, "fill stream routed")
}

// TestFillStall: a fill stream left untaken past Config.ReadStallTimeout
// cancels the subscription as a subgroup stream would (ErrFellBehind); one
// the application waits for inside ReadObject, holding the subscription's
// objects back, does not.
func TestFillStall(t *testing.T) {
	forClientSessions(t, "untaken", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{ReadStallTimeout: 200 * time.Millisecond})
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1})
		fill := fp.openFetch(id, fobj(0, 0, "f00"))
		closedOrFail(t, sub.Done(), "subscription cancelled")
		assert.ErrorIs(t, sub.Err(), ErrFellBehind)
		assert.Equal(t, uint64(wire.ResetExcessiveLoad), expectStopped(t, fill))
	})
	forClientSessions(t, "waiting", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{ReadStallTimeout: 200 * time.Millisecond})
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1})
		// More objects than ReadObject queues: the stream waits, unread,
		// while the fill is awaited.
		payloads := make([]string, 2*arrivalObjects)
		payloads[0] = "s11"
		for i := 1; i < len(payloads); i++ {
			payloads[i] = "x"
		}
		fp.openObjects(1, 1, 1, payloads...)
		got := make(chan []string, 1)
		go func() { got <- readEntries(t, sub, 2) }()
		time.Sleep(time.Second)
		fill := fp.openFetch(id, fobj(1, 0, "f10"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"1/0:f10", "1/1:s11"}, recvOrFail(t, got))
		assert.Nil(t, sub.Err())
	})
}

// TestFillJoinCurrentGroup is §3.5's join at the current group: the Next
// Object filter and a fill of the current group from its start.
func TestFillJoinCurrentGroup(t *testing.T) {
	forClientSessions(t, "current", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}}
		sub, _, id := subscribeWithFill(t, s, fp, params, wire.Location{Group: 7, Object: 2})
		live := fp.openObjects(1, 7, 3, "s73", "s74")
		require.NoError(t, live.Close())
		fill := fp.openFetch(id, fobj(7, 0, "f70"), fgap(wire.EndOfUnknownRange, 7, 1), fobj(7, 2, "f72"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"7/0:f70", "gap 7/1", "7/2:f72", "7/3:s73", "7/4:s74"}, readEntries(t, sub, 5))
	})
}

// TestFillMalformedAndBad: a fill entry outside the fill range is a
// Malformed Track, which cancels the subscription (§12.1); bad fill stream
// data closes the session (§11.4.1).
func TestFillMalformedAndBad(t *testing.T) {
	forClientSessions(t, "outside", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}}
		sub, req, id := subscribeWithFill(t, s, fp, params, wire.Location{Group: 7, Object: 2})
		fill := fp.openFetch(id, fobj(6, 0, "before the current group"))
		_, err := sub.ReadObject(fakeCtx(t))
		var me *MalformedTrackError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, uint64(wire.ResetMalformedTrack), expectStopped(t, fill))
		req.expectStopSending(wire.ResetMalformedTrack)
		fp.alive(1)
	})
	forClientSessions(t, "flags", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1})
		fp.openFetchRaw(append(wire.FetchHeader{RequestID: id}.Append(nil), varints(0x81, 0, 0)...))
		// The fill's end may be read before the session's close.
		o, err := sub.ReadObject(fakeCtx(t))
		if err == nil {
			assert.ErrorIs(t, o.Incomplete, ErrFillFailed)
			_, err = sub.ReadObject(fakeCtx(t))
		}
		assert.Error(t, err)
		fp.expectClose(wire.ProtocolViolation)
	})
}

// TestFillFromUpdateInReadObject: a fill asked for by Update comes through
// ReadObject as it arrives, between the subscription's objects, and
// AcceptFill then has none to give.
func TestFillFromUpdateInReadObject(t *testing.T) {
	forClientSessions(t, "update", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, req, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 2})
		fill := fp.openFetch(id, fobj(2, 0, "f20"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"2/0:f20"}, readEntries(t, sub, 1))
		_, err := sub.AcceptFill(fakeCtx(t))
		assert.ErrorIs(t, err, errFillsTaken)

		update := goErr(func() error {
			return sub.Update(fakeCtx(t), wire.Params{FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}})
		})
		u := expect[*wire.RequestUpdate](req)
		require.NotNil(t, u.Parameters.FillParameters)
		req.send(&wire.RequestOK{Parameters: wire.Params{LargestObject: wire.Some(wire.Location{Group: 2, Object: 1})}})
		require.NoError(t, recvOrFail(t, update))
		later := fp.openFetch(u.RequestID, fobj(2, 0, "u20"), fobj(2, 1, "u21"))
		require.NoError(t, later.Close())
		assert.Equal(t, []string{"2/0:u20", "2/1:u21"}, readEntries(t, sub, 2))
		live := fp.openObjects(1, 2, 2, "s22")
		require.NoError(t, live.Close())
		assert.Equal(t, []string{"2/2:s22"}, readEntries(t, sub, 1))
	})
}

// TestFillNotStarvedByHeldObjects: subscription objects held back for the
// initial fill fill ReadObject's byte bound; the fill's entries have a
// bound of their own, so they still come through, then the objects.
func TestFillNotStarvedByHeldObjects(t *testing.T) {
	forClientSessions(t, "bytes", func(t *testing.T, connect fakeConnector) {
		// Windows large enough for every byte written here: the held
		// objects must not keep the fill out by flow control, which is
		// FillWait's case (TestFillStalledReleasesObjects).
		s, fp := connect(t, &Config{StreamReceiveWindow: 4 << 20, ConnectionReceiveWindow: 16 << 20})
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1})
		big := string(make([]byte, arrivalBytes/2))
		// Written in the background: flow control holds the writes back.
		liveDone := goErr(func() error {
			live := fp.openObjects(1, 1, 1, big, big, big)
			return live.Close()
		})
		time.Sleep(20 * time.Millisecond)
		fillDone := goErr(func() error { return fp.openFetch(id, fobj(1, 0, big)).Close() })
		ctx := fakeCtx(t)
		for i, want := range []wire.Location{{Group: 1}, {Group: 1, Object: 1}, {Group: 1, Object: 2}, {Group: 1, Object: 3}} {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err, "entry %d", i)
			assert.Equal(t, want, o.Location)
		}
		require.NoError(t, recvOrFail(t, liveDone))
		require.NoError(t, recvOrFail(t, fillDone))
	})
}

// TestFillStalledReleasesObjects: an initial fill that gives nothing for
// Config.FillWait while the subscription's objects wait is reported, and
// the objects flow; the rest of the fill follows as it comes.
func TestFillStalledReleasesObjects(t *testing.T) {
	forClientSessions(t, "stalled", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{FillWait: time.Second})
		sub, _, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1, Object: 1})
		both := encodeFetch(t, id, false, fobj(1, 0, "f10"), fobj(1, 1, "f11"))
		first := len(encodeFetch(t, id, false, fobj(1, 0, "f10")))
		fill := fp.openFetchRaw(both[:first])
		live := fp.openObjects(1, 1, 2, "s12")
		require.NoError(t, live.Close())
		assert.Equal(t, []string{"1/0:f10", "incomplete", "1/2:s12"}, readEntries(t, sub, 3))
		_, err := fill.Write(both[first:])
		require.NoError(t, err)
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"1/1:f11"}, readEntries(t, sub, 1))
	})
}

// TestFillFromUpdateInheritsItsFilter: a REQUEST_UPDATE that lowers the
// subscription's start and carries FILL_PARAMETERS without a filter of
// its own fills from the new start (§3.4, §9.5.1), and its stream may
// overtake REQUEST_OK: its entries are in range, not a Malformed Track.
func TestFillFromUpdateInheritsItsFilter(t *testing.T) {
	forClientSessions(t, "lowered", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, req, _ := subscribeAnswered(t, s, fp, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 10}))}, wire.Location{Group: 12})
		update := goErr(func() error {
			return sub.Update(fakeCtx(t), wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 5})),
				FillParameters: &wire.Params{}})
		})
		u := expect[*wire.RequestUpdate](req)
		fill := fp.openFetch(u.RequestID, fobj(5, 0, "f50"), fobj(12, 0, "f120"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"5/0:f50", "12/0:f120"}, readEntries(t, sub, 2))
		req.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, update))
		assert.Nil(t, sub.Err(), "the subscription is live")
	})
}

// TestFillNotHeldOnceSubscribeOKApplied: SUBSCRIBE_OK's fills are applied
// before the subscription turns Established; a fill stream arriving in
// between takes no held-stream slot, which nothing would give back.
func TestFillNotHeldOnceSubscribeOKApplied(t *testing.T) {
	forClientSessions(t, "between", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		got, req, m := subscribeInBackground(t, s, fp, nextObjectWithFill)
		pending, ok := s.fetches.lookup(m.RequestID).(*Subscription)
		require.True(t, ok)
		pending.startFill() // where the handling of SUBSCRIBE_OK stands
		fill := fp.openFetch(m.RequestID, fobj(0, 0, "f00"))
		require.NoError(t, fill.Close())
		waitFillRouted(t, s, m.RequestID)
		s.routes.mu.Lock()
		held := s.routes.pendingStreams
		s.routes.mu.Unlock()
		assert.Zero(t, held, "no held-stream slot taken")
		req.send(&wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{LargestObject: wire.Some(wire.Location{})}})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		assert.Equal(t, []string{"0/0:f00"}, readEntries(t, sub, 1))
	})
}

// TestFillRefusedIsReportedAtOnce: a fill stream stopped with
// EXCESSIVE_LOAD because it came before SUBSCRIBE_OK with every
// held-stream slot taken ends the fill: ReadObject reports it at once
// rather than waiting for a fill that will not come.
func TestFillRefusedIsReportedAtOnce(t *testing.T) {
	forClientSessions(t, "refused", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{MaxPendingStreams: 1, AliasWait: time.Minute, FillWait: time.Minute})
		got, req, m := subscribeInBackground(t, s, fp, nextObjectWithFill)
		early := fp.openObjects(9, 0, 0, "unknown alias") // takes the one slot
		settle(t, func() bool {
			s.routes.mu.Lock()
			defer s.routes.mu.Unlock()
			return s.routes.pendingStreams == 1
		}, "early subgroup stream held")
		fill := fp.openFetch(m.RequestID, fobj(0, 0, "f00"))
		assert.Equal(t, uint64(wire.ResetExcessiveLoad), expectStopped(t, fill))
		req.send(&wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{LargestObject: wire.Some(wire.Location{Group: 1})}})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		ctx, cancel := context.WithTimeout(t.Context(), fakeGuard)
		defer cancel()
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.ErrorIs(t, o.Incomplete, errHeldStreams)
		early.CancelWrite(0)
	})
}

// TestFillNoneExpectedNothingWaits: when the publisher opens no fill
// stream, because the subscription starts in Forward State 0 (§3.4.1) or
// the fill range is empty or starts past the Largest Object (§3.4),
// ReadObject holds nothing back for one.
func TestFillNoneExpectedNothingWaits(t *testing.T) {
	fill := &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())}
	for name, params := range map[string]wire.Params{
		"forward 0": {LocationFilter: wire.Some(wire.NextObjectFilter()), Forward: wire.Some(false), FillParameters: fill},
		"past largest": {LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 9}))}},
	} {
		forClientSessions(t, name, func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, &Config{FillWait: time.Minute})
			sub, _, _ := subscribeWithFill(t, s, fp, params, wire.Location{Group: 2, Object: 1})
			live := fp.openObjects(1, 2, 2, "s22")
			require.NoError(t, live.Close())
			ctx, cancel := context.WithTimeout(t.Context(), fakeGuard)
			defer cancel()
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			assert.Equal(t, []byte("s22"), o.Payload)
		})
	}
}

// TestFillDescendingGapCovers: in a Descending fill a gap marker covers
// what follows the entry before it in the stream's order, up to its own
// Location: the rest of that entry's group, the groups between, and its
// own group up to it (§11.4.1.2). After the fill is reset there, the
// subscription's objects in that span, which the fill said do not exist,
// are dropped, and the rest come through.
func TestFillDescendingGapCovers(t *testing.T) {
	forClientSessions(t, "desc", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{FillParameters: &wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)}}
		sub, _, id := subscribeWithFill(t, s, fp, params, wire.Location{Group: 3, Object: 1})
		fill := fp.openFetchRaw(encodeFetch(t, id, true, fobj(3, 0, "f30"), fobj(3, 1, "f31"), fgap(wire.EndOfNonExistentRange, 1, 4)))
		assert.Equal(t, []string{"3/0:f30", "3/1:f31", "gap 1/4"}, readEntries(t, sub, 3))
		fill.CancelWrite(uint64(wire.ResetUnknownObjectStatus))
		assert.Equal(t, []string{"incomplete"}, readEntries(t, sub, 1))
		for _, g := range []uint64{2, 1, 0} {
			require.NoError(t, fp.openObjects(1, g, 4, fmt.Sprintf("s%d4", g), fmt.Sprintf("s%d5", g)).Close())
		}
		assert.ElementsMatch(t, []string{"1/5:s15", "0/4:s04", "0/5:s05"}, readEntries(t, sub, 3))
	})
}

// TestFillAfterAbandonedUpdate: an update whose caller gave up waiting is
// still applied when REQUEST_OK comes, so a later fill inherits the
// filter it set (§3.4), as the publisher applies it.
func TestFillAfterAbandonedUpdate(t *testing.T) {
	forClientSessions(t, "abandoned", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, req, _ := subscribeAnswered(t, s, fp, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 10}))}, wire.Location{Group: 12})
		ctx, cancel := context.WithCancel(t.Context())
		first := goErr(func() error {
			return sub.Update(ctx, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 5}))})
		})
		expect[*wire.RequestUpdate](req)
		cancel()
		assert.ErrorIs(t, recvOrFail(t, first), context.Canceled)
		req.send(&wire.RequestOK{})
		settle(t, func() bool { return sub.Params().LocationFilter.Value.StartGroup == 5 }, "the update applied")
		second := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{FillParameters: &wire.Params{}}) })
		u := expect[*wire.RequestUpdate](req)
		fill := fp.openFetch(u.RequestID, fobj(5, 0, "f50"))
		require.NoError(t, fill.Close())
		assert.Equal(t, []string{"5/0:f50"}, readEntries(t, sub, 1))
		req.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, second))
	})
}

// TestFillUntakenStoppedAfterLinger: once the wait for streams after
// PUBLISH_DONE is over, a fill stream nobody took is stopped, as an
// untaken subgroup stream is (§9.9), rather than left holding
// flow-control credit for the session's life.
func TestFillUntakenStoppedAfterLinger(t *testing.T) {
	forClientSessions(t, "linger", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{DoneLinger: 200 * time.Millisecond, ReadStallTimeout: time.Minute})
		sub, req, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 1})
		fill := fp.openFetch(id, fobj(1, 0, "f10"))
		waitFillRouted(t, s, id)
		req.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: 2}) // one never comes
		closedOrFail(t, sub.Done(), "subscription ended")
		assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, fill))
	})
}
