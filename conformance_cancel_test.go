package moqt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Ending a request: cancellation by either side with STOP_SENDING and
// RESET_STREAM, FIN only after the response, PUBLISH_DONE before FIN
// (§3.1.1, §6.4.2.2, §6.4.2.3).

// A subscriber cancels with STOP_SENDING and RESET_STREAM, code CANCELLED.
func TestSubscriberCancelResetsAndStops(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		require.NoError(t, sub.Close())
		fs.expectReset(wire.ResetCancelled)
		fs.expectStopSending(wire.ResetCancelled)
		assert.Equal(t, stateTerminated, sub.current())
		assert.ErrorIs(t, sub.Err(), ErrCancelled)
		assert.NoError(t, s.Context().Err())
	})
}

// A Subscribe whose context ends while Pending cancels the request.
func TestSubscribeContextCancelsPendingRequest(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		ctx, cancel := context.WithCancel(fakeCtx(t))
		res := startSubscribe(ctx, s, trackA, wire.Params{})
		fs, _ := fp.acceptSubscribe()
		cancel()
		r := recvOrFail(t, res)
		assert.ErrorIs(t, r.err, context.Canceled)
		fs.expectReset(wire.ResetCancelled)
		fs.expectStopSending(wire.ResetCancelled)
	})
}

// C003: after STOP_SENDING the publisher resets the request stream.
func TestC003_PublisherResetsAfterStopSending(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		s, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)

		// STOP_SENDING alone, the receiving side left open.
		fs.stopSending(wire.ResetCancelled)
		closedOrFail(t, ss.Context().Done(), "publisher did not see STOP_SENDING")
		assert.Equal(t, stateTerminated, ss.current())
		assert.ErrorIs(t, ss.Err(), ErrCancelled)
		// The publisher's reply is RESET_STREAM on its sending direction; the
		// fake no longer reads, so the library's own view must show it.
		assert.True(t, ss.rs.isCancelled())
		fp.alive(2)
		assert.NoError(t, s.Context().Err())
	})
}

// C003: a subscriber's RESET_STREAM is answered with a reset.
func TestC003_PublisherResetsAfterSubscriberReset(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		fs.reset(wire.ResetCancelled)
		fs.expectReset(wire.ResetCancelled)
		assert.ErrorIs(t, ss.Err(), ErrCancelled)
	})
}

// The full cancellation: both directions at once.
func TestSubscriberCancelEndsServedSubscription(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		s, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		fs.cancel()
		closedOrFail(t, ss.Context().Done(), "subscription not terminated")
		assert.ErrorIs(t, ss.Err(), ErrCancelled)
		assert.ErrorIs(t, ss.End(wire.DoneTrackEnded, ""), ErrCancelled)
		fp.alive(2)
		assert.NoError(t, s.Context().Err())
	})
}

// Cancelling a SUBSCRIBE while it is Pending(Subscriber) (§3.1).
func TestSubscriberCancelWhilePending(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		ctxCh := make(chan context.Context, 1)
		accepted := make(chan error, 1)
		h := HandlerFunc(func(r Request) {
			sr := r.(*SubscribeRequest)
			ctxCh <- sr.Context()
			<-release
			_, err := acceptLocal(sr, AcceptOptions{})
			accepted <- err
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		ctx := recvOrFail(t, ctxCh)
		fs.stopSending(wire.ResetCancelled)
		fs.reset(wire.ResetCancelled)
		closedOrFail(t, ctx.Done(), "handler's context not cancelled")
		release <- struct{}{}
		assert.Error(t, recvOrFail(t, accepted), "Accept after the subscriber cancelled")
	})
}

// C008: FIN is not a cancellation: a subscriber may FIN right after
// SUBSCRIBE and the subscription goes on.
func TestC008_FINIsNotCancellation(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		fs.fin()
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		assert.Equal(t, stateEstablished, ss.current())
		assert.NoError(t, ss.Context().Err())
		require.NoError(t, ss.End(wire.DoneTrackEnded, "end"))
		d := expect[*wire.PublishDone](fs)
		assert.Equal(t, wire.DoneTrackEnded, d.StatusCode)
		fs.expectFIN()
	})
}

// C008: nothing, in particular no FIN, precedes the response, however long
// the handler takes and whatever the requester does meanwhile.
func TestC008_NoFINBeforeResponse(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		release := make(chan struct{})
		h := HandlerFunc(func(r Request) {
			<-release
			_, _ = acceptLocal(r.(*SubscribeRequest), AcceptOptions{})
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		fs.fin()
		close(release)
		expect[*wire.SubscribeOK](fs)
	})
}

// C079: the publisher of an Established subscription sends PUBLISH_DONE
// before FIN, and the subscriber FINs its own direction in turn.
func TestC079_PublishDoneBeforeFIN(t *testing.T) {
	t.Run("library publisher", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			h, served := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			ss := recvOrFail(t, served)
			require.NoError(t, ss.End(wire.DoneGoingAway, "moving"))
			d := expect[*wire.PublishDone](fs)
			assert.Equal(t, wire.DoneGoingAway, d.StatusCode)
			assert.Equal(t, "moving", d.ErrorReason)
			fs.expectFIN()
			assert.Error(t, ss.End(wire.DoneTrackEnded, ""), "a second PUBLISH_DONE")
		})
	})
	t.Run("library subscriber", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: 3})
			fs.fin()
			closedOrFail(t, sub.Done(), "subscription not terminated")
			fs.expectFIN()
			var de *DoneError
			require.ErrorAs(t, sub.Err(), &de)
			assert.Equal(t, uint64(3), de.StreamCount)
		})
	})
}

// Rejection without processing: REQUEST_ERROR, then FIN (§6.4.2.3).
func TestRejectionIsRequestErrorThenFIN(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		_, fp := serverSession(t, nil) // DefaultHandler rejects
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		re := expect[*wire.RequestError](fs)
		assert.Equal(t, wire.ReqDoesNotExist, re.ErrorCode)
		fs.expectFIN()
		// The request is complete, not cancelled: the requester finishes its
		// own direction gracefully.
		fs.fin()
		fp.alive(2)
	})
}

// A FIN on the response half before the response fails the request
// (§6.4.2.2).
func TestFINBeforeResponseFailsRequest(t *testing.T) {
	t.Run("SUBSCRIBE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
			fs, _ := fp.acceptSubscribe()
			fs.fin()
			r := recvOrFail(t, res)
			require.Error(t, r.err)
			assert.ErrorIs(t, r.err, ErrCancelled)
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("TRACK_STATUS", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			ts := goErr(func() error { _, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{}); return err })
			fs := fp.accept()
			expect[*wire.TrackStatus](fs)
			fs.fin()
			assert.Error(t, recvOrFail(t, ts))
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("PUBLISH", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
			fs := fp.accept()
			expect[*wire.Publish](fs)
			fs.fin()
			r := recvOrFail(t, pub)
			require.Error(t, r.err)
			assert.ErrorIs(t, r.err, ErrCancelled)
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("PUBLISH_DONE missing", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fs.fin()
			closedOrFail(t, sub.Done(), "subscription not terminated")
			assert.ErrorIs(t, sub.Err(), ErrCancelled)
		})
	})
}
