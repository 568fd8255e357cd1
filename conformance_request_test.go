package moqt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Request streams: Request IDs, framing, exactly one response, FIN and
// cancellation, REQUEST_UPDATE (§6.4.2, §9.3–§9.5).

type subResult struct {
	sub *Subscription
	err error
}

// startSubscribe runs s.Subscribe in the background.
func startSubscribe(ctx context.Context, s *Session, track wire.FullTrackName, params wire.Params) <-chan subResult {
	ch := make(chan subResult, 1)
	go func() {
		sub, err := s.Subscribe(ctx, track, params)
		ch <- subResult{sub, err}
	}()
	return ch
}

// acceptSubscribe accepts the library's next request stream, which must
// carry SUBSCRIBE, and returns a detached copy of it.
func (fp *fakePeer) acceptSubscribe() (*fakeStream, *wire.Subscribe) {
	fp.t.Helper()
	fs := fp.accept()
	m := expect[*wire.Subscribe](fs)
	own, err := detach(fp.v, m)
	require.NoError(fp.t, err)
	return fs, own
}

// establish runs a library Subscribe that the fake accepts with alias.
func establish(t *testing.T, s *Session, fp *fakePeer, track wire.FullTrackName, params wire.Params, ok *wire.SubscribeOK) (*Subscription, *fakeStream, *wire.Subscribe) {
	t.Helper()
	res := startSubscribe(fakeCtx(t), s, track, params)
	fs, m := fp.acceptSubscribe()
	fs.send(ok)
	r := recvOrFail(t, res)
	require.NoError(t, r.err)
	return r.sub, fs, m
}

type servedResult struct {
	ss  *ServedSubscription
	err error
}

// startPublish runs publishLocal in the background.
func startPublish(ctx context.Context, s *Session, track wire.FullTrackName, params wire.Params, props wire.KVList) <-chan servedResult {
	ch := make(chan servedResult, 1)
	go func() {
		ss, err := publishLocal(ctx, s, track, params, props)
		ch <- servedResult{ss, err}
	}()
	return ch
}

// ---- Request IDs (§6.4.2.1) ----

func TestRequestIDsClientEvenFromZero(t *testing.T) {
	s, fp := clientSession(t, nil)
	ctx := fakeCtx(t)

	res := startSubscribe(ctx, s, trackA, wire.Params{})
	fs, m := fp.acceptSubscribe()
	assert.Equal(t, uint64(0), m.RequestID)
	fs.send(&wire.SubscribeOK{TrackAlias: 1})
	sub := recvOrFail(t, res).sub
	require.NotNil(t, sub)
	assert.Equal(t, uint64(0), sub.RequestID())

	ts := goErr(func() error { _, err := s.TrackStatus(ctx, trackB, wire.Params{}); return err })
	tsStream := fp.accept()
	assert.Equal(t, uint64(2), expect[*wire.TrackStatus](tsStream).RequestID)
	tsStream.send(&wire.RequestError{ErrorCode: wire.ReqDoesNotExist})
	tsStream.fin()
	require.Error(t, recvOrFail(t, ts))

	// REQUEST_UPDATE consumes a Request ID too.
	upd := goErr(func() error { return sub.Update(ctx, wire.Params{SubscriberPriority: wire.Some[uint8](1)}) })
	assert.Equal(t, uint64(4), expect[*wire.RequestUpdate](fs).RequestID)
	fs.send(&wire.RequestOK{})
	require.NoError(t, recvOrFail(t, upd))

	res = startSubscribe(ctx, s, trackB, wire.Params{})
	fs2, m2 := fp.acceptSubscribe()
	assert.Equal(t, uint64(6), m2.RequestID)
	fs2.send(&wire.SubscribeOK{TrackAlias: 2})
	require.NoError(t, recvOrFail(t, res).err)
}

func TestRequestIDsServerOddFromOne(t *testing.T) {
	s, fp := serverSession(t, nil)
	ctx := fakeCtx(t)

	pub := startPublish(ctx, s, trackA, wire.Params{}, nil)
	fs := fp.accept()
	assert.Equal(t, uint64(1), expect[*wire.Publish](fs).RequestID)
	fs.send(&wire.RequestOK{})
	require.NoError(t, recvOrFail(t, pub).err)

	ts := goErr(func() error { _, err := s.TrackStatus(ctx, trackB, wire.Params{}); return err })
	tsStream := fp.accept()
	assert.Equal(t, uint64(3), expect[*wire.TrackStatus](tsStream).RequestID)
	tsStream.send(&wire.RequestOK{})
	tsStream.fin()
	require.NoError(t, recvOrFail(t, ts))

	res := startSubscribe(ctx, s, trackB, wire.Params{})
	_, m := fp.acceptSubscribe()
	assert.Equal(t, uint64(5), m.RequestID)
	fp.conn.CloseWithError(0, "")
	recvOrFail(t, res)
}

func TestRequestIDInvalid(t *testing.T) {
	h, _ := servedCh(AcceptOptions{})
	cfg := func() *Config { return &Config{Handler: h} }
	t.Run("odd ID from the client", func(t *testing.T) {
		_, fp := serverSession(t, cfg())
		fp.open(subscribeMsg(1, trackA, wire.Params{}))
		fp.expectClose(wire.InvalidRequestID)
	})
	t.Run("even ID from the server", func(t *testing.T) {
		s, fp := clientSession(t, cfg())
		fp.open(subscribeMsg(0, trackA, wire.Params{}))
		fp.expectClose(wire.InvalidRequestID)
		expectSessionError(t, s, wire.InvalidRequestID)
	})
	t.Run("reused ID", func(t *testing.T) {
		_, fp := serverSession(t, cfg())
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackB.Namespace, TrackName: trackB.Name})
		fp.expectClose(wire.InvalidRequestID)
	})
	t.Run("REQUEST_UPDATE reuses the request's ID", func(t *testing.T) {
		_, fp := serverSession(t, cfg())
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 0})
		fp.expectClose(wire.InvalidRequestID)
	})
	t.Run("REQUEST_UPDATE with the wrong parity", func(t *testing.T) {
		_, fp := serverSession(t, cfg())
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 3})
		fp.expectClose(wire.InvalidRequestID)
	})
	t.Run("out of order is fine, a repeat is not", func(t *testing.T) {
		_, fp := serverSession(t, cfg())
		for _, id := range []uint64{4, 0, 2} {
			expect[*wire.SubscribeOK](fp.open(subscribeMsg(id, trackA, wire.Params{})))
		}
		fp.open(subscribeMsg(2, trackA, wire.Params{}))
		fp.expectClose(wire.InvalidRequestID)
	})
}

// ---- the first message on a request stream (§6.3, §9) ----

func TestRequestStreamMustStartWithRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    wire.Message
	}{
		{"REQUEST_OK", &wire.RequestOK{}},
		{"SUBSCRIBE_OK", &wire.SubscribeOK{TrackAlias: 1}},
		{"REQUEST_UPDATE", &wire.RequestUpdate{RequestID: 0}},
		{"GOAWAY", &wire.Goaway{}},
		{"PUBLISH_DONE", &wire.PublishDone{}},
		{"PUBLISH_STATE_NOTIFY", &wire.PublishStateNotify{}},
		{"SETUP", &wire.Setup{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.open(tc.m)
			fp.expectClose(wire.ProtocolViolation)
		})
	}
	t.Run("unknown message type", func(t *testing.T) {
		_, fp := serverSession(t, nil)
		fp.openStream().sendRaw(frame(0x3F, []byte{1, 2}))
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("stream ends inside the first message", func(t *testing.T) {
		_, fp := serverSession(t, nil)
		fs := fp.openStream()
		fs.sendRaw(frame(wire.MsgSubscribe, []byte{0, 1, 2})[:4])
		fs.fin()
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("unknown message type later on the stream", func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.sendRaw(frame(0x3F, nil))
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("a stream reset before its first message is ignored", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		fs := fp.openStream()
		fs.sendRaw([]byte{0x03}) // the type only
		fs.reset(wire.ResetCancelled)
		fp.alive(0)
		assert.NoError(t, s.Context().Err())
	})
}

// ---- exactly one response (C001, C002) ----

func TestC001_PublisherSendsExactlyOneResponse(t *testing.T) {
	second := make(chan [2]error, 1)
	h := HandlerFunc(func(r Request) {
		sr := r.(*SubscribeRequest)
		ss, err := acceptLocal(sr, AcceptOptions{})
		if err != nil {
			return
		}
		_, err1 := acceptLocal(sr, AcceptOptions{})
		err2 := sr.Reject(wire.ReqInternalError, "too late")
		second <- [2]error{err1, err2}
		_ = ss.End(wire.DoneTrackEnded, "")
	})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	expect[*wire.SubscribeOK](fs)
	errs := recvOrFail(t, second)
	assert.ErrorIs(t, errs[0], errAlreadyAnswered)
	assert.ErrorIs(t, errs[1], errAlreadyAnswered)
	// The next message is PUBLISH_DONE, not another response.
	expect[*wire.PublishDone](fs)
	fs.expectFIN()
}

func TestC001_UnansweredSubscribeIsRejected(t *testing.T) {
	_, fp := serverSession(t, &Config{Handler: HandlerFunc(func(Request) {})})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	re := expect[*wire.RequestError](fs)
	assert.Equal(t, wire.ReqInternalError, re.ErrorCode)
	fs.expectFIN()
}

func TestC001_SecondResponseIsProtocolViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []wire.Message
	}{
		{"SUBSCRIBE_OK twice", []wire.Message{&wire.SubscribeOK{TrackAlias: 1}, &wire.SubscribeOK{TrackAlias: 1}}},
		{"REQUEST_ERROR then SUBSCRIBE_OK", []wire.Message{&wire.RequestError{ErrorCode: wire.ReqDoesNotExist}, &wire.SubscribeOK{TrackAlias: 1}}},
		{"REQUEST_ERROR twice", []wire.Message{&wire.RequestError{ErrorCode: wire.ReqDoesNotExist}, &wire.RequestError{ErrorCode: wire.ReqDoesNotExist}}},
		{"SUBSCRIBE_OK then REQUEST_ERROR", []wire.Message{&wire.SubscribeOK{TrackAlias: 1}, &wire.RequestError{ErrorCode: wire.ReqDoesNotExist}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
			fs, _ := fp.acceptSubscribe()
			for _, m := range tc.answer {
				fs.send(m)
			}
			fp.expectClose(wire.ProtocolViolation)
			recvOrFail(t, res)
			expectSessionError(t, s, wire.ProtocolViolation)
		})
	}
}

func TestC002_SubscriberSendsExactlyOnePublishOK(t *testing.T) {
	second := make(chan [2]error, 1)
	h := HandlerFunc(func(r Request) {
		pr := r.(*PublishRequest)
		if _, err := pr.Accept(wire.Params{}); err != nil {
			return
		}
		_, err1 := pr.Accept(wire.Params{})
		err2 := pr.Reject(wire.ReqUninterested, "")
		second <- [2]error{err1, err2}
	})
	_, fp := clientSession(t, &Config{Handler: h})
	fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
	ok := expect[*wire.RequestOK](fs)
	assert.Empty(t, ok.TrackProperties)
	errs := recvOrFail(t, second)
	assert.ErrorIs(t, errs[0], errAlreadyAnswered)
	assert.ErrorIs(t, errs[1], errAlreadyAnswered)
	fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
	fs.fin()
	fs.expectFIN() // no second response before the FIN
}

func TestC002_SecondPublishOKIsProtocolViolation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []wire.Message
	}{
		{"REQUEST_OK twice", []wire.Message{&wire.RequestOK{}, &wire.RequestOK{}}},
		{"REQUEST_OK then REQUEST_ERROR", []wire.Message{&wire.RequestOK{}, &wire.RequestError{ErrorCode: wire.ReqUninterested}}},
		{"SUBSCRIBE_OK", []wire.Message{&wire.SubscribeOK{TrackAlias: 0}}},
		{"REQUEST_UPDATE before PUBLISH_OK", []wire.Message{&wire.RequestUpdate{RequestID: 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
			fs := fp.accept()
			expect[*wire.Publish](fs)
			for _, m := range tc.answer {
				fs.send(m)
			}
			fp.expectClose(wire.ProtocolViolation)
			recvOrFail(t, pub)
		})
	}
}

// ---- cancellation and FIN (§6.4.2.2, §6.4.2.3) ----

// A subscriber cancels with STOP_SENDING and RESET_STREAM, code CANCELLED.
func TestSubscriberCancelResetsAndStops(t *testing.T) {
	s, fp := clientSession(t, nil)
	sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
	require.NoError(t, sub.Close())
	fs.expectReset(wire.ResetCancelled)
	fs.expectStopSending(wire.ResetCancelled)
	assert.Equal(t, StateTerminated, sub.State())
	assert.ErrorIs(t, sub.Err(), ErrCancelled)
	assert.NoError(t, s.Context().Err())
}

// A Subscribe whose context ends while Pending cancels the request.
func TestSubscribeContextCancelsPendingRequest(t *testing.T) {
	s, fp := clientSession(t, nil)
	ctx, cancel := context.WithCancel(fakeCtx(t))
	res := startSubscribe(ctx, s, trackA, wire.Params{})
	fs, _ := fp.acceptSubscribe()
	cancel()
	r := recvOrFail(t, res)
	assert.ErrorIs(t, r.err, context.Canceled)
	fs.expectReset(wire.ResetCancelled)
	fs.expectStopSending(wire.ResetCancelled)
}

// C003: after STOP_SENDING the publisher resets the request stream.
func TestC003_PublisherResetsAfterStopSending(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	s, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	expect[*wire.SubscribeOK](fs)
	ss := recvOrFail(t, served)

	// STOP_SENDING alone, the receiving side left open.
	fs.stopSending(wire.ResetCancelled)
	closedOrFail(t, ss.Context().Done(), "publisher did not see STOP_SENDING")
	assert.Equal(t, StateTerminated, ss.State())
	assert.ErrorIs(t, ss.Err(), ErrCancelled)
	// The publisher's reply is RESET_STREAM on its sending direction; the
	// fake no longer reads, so the library's own view must show it.
	assert.True(t, ss.rs.isCancelled())
	fp.alive(2)
	assert.NoError(t, s.Context().Err())
}

// C003 over WebTransport, whose streams come from another library.
func TestC003_PublisherResetsAfterStopSendingWebTransport(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	ls := startLibServer(t, &Config{Handler: h}, nil)
	fp := ls.dial("https")
	fp.sendSetup(&wire.Setup{})
	ls.accept()
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	expect[*wire.SubscribeOK](fs)
	ss := recvOrFail(t, served)
	fs.stopSending(wire.ResetCancelled)
	closedOrFail(t, ss.Context().Done(), "publisher did not see STOP_SENDING")
	assert.ErrorIs(t, ss.Err(), ErrCancelled)
	assert.True(t, ss.rs.isCancelled())
	fp.alive(2)
}

// C003: a subscriber's RESET_STREAM is answered with a reset.
func TestC003_PublisherResetsAfterSubscriberReset(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	expect[*wire.SubscribeOK](fs)
	ss := recvOrFail(t, served)
	fs.reset(wire.ResetCancelled)
	fs.expectReset(wire.ResetCancelled)
	assert.ErrorIs(t, ss.Err(), ErrCancelled)
}

// The full cancellation: both directions at once.
func TestSubscriberCancelEndsServedSubscription(t *testing.T) {
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
}

// Cancelling a SUBSCRIBE while it is Pending(Subscriber) (§3.1).
func TestSubscriberCancelWhilePending(t *testing.T) {
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
}

// C008: FIN is not a cancellation: a subscriber may FIN right after
// SUBSCRIBE and the subscription goes on.
func TestC008_FINIsNotCancellation(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	fs.fin()
	expect[*wire.SubscribeOK](fs)
	ss := recvOrFail(t, served)
	assert.Equal(t, StateEstablished, ss.State())
	assert.NoError(t, ss.Context().Err())
	require.NoError(t, ss.End(wire.DoneTrackEnded, "end"))
	d := expect[*wire.PublishDone](fs)
	assert.Equal(t, wire.DoneTrackEnded, d.StatusCode)
	fs.expectFIN()
}

// C008: nothing, in particular no FIN, precedes the response, however long
// the handler takes and whatever the requester does meanwhile.
func TestC008_NoFINBeforeResponse(t *testing.T) {
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
}

// C079: the publisher of an Established subscription sends PUBLISH_DONE
// before FIN, and the subscriber FINs its own direction in turn.
func TestC079_PublishDoneBeforeFIN(t *testing.T) {
	t.Run("library publisher", func(t *testing.T) {
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
	t.Run("library subscriber", func(t *testing.T) {
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
}

// Rejection without processing: REQUEST_ERROR, then FIN (§6.4.2.3).
func TestRejectionIsRequestErrorThenFIN(t *testing.T) {
	_, fp := serverSession(t, nil) // DefaultHandler rejects
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	re := expect[*wire.RequestError](fs)
	assert.Equal(t, wire.ReqDoesNotExist, re.ErrorCode)
	fs.expectFIN()
	// The request is complete, not cancelled: the requester finishes its
	// own direction gracefully.
	fs.fin()
	fp.alive(2)
}

// A FIN on the response half before the response fails the request
// (§6.4.2.2).
func TestFINBeforeResponseFailsRequest(t *testing.T) {
	t.Run("SUBSCRIBE", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
		fs, _ := fp.acceptSubscribe()
		fs.fin()
		r := recvOrFail(t, res)
		require.Error(t, r.err)
		assert.ErrorIs(t, r.err, ErrCancelled)
		assert.NoError(t, s.Context().Err())
	})
	t.Run("TRACK_STATUS", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		ts := goErr(func() error { _, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{}); return err })
		fs := fp.accept()
		expect[*wire.TrackStatus](fs)
		fs.fin()
		assert.Error(t, recvOrFail(t, ts))
		assert.NoError(t, s.Context().Err())
	})
	t.Run("PUBLISH", func(t *testing.T) {
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
	t.Run("PUBLISH_DONE missing", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fs.fin()
		closedOrFail(t, sub.Done(), "subscription not terminated")
		assert.ErrorIs(t, sub.Err(), ErrCancelled)
	})
}

// ---- REQUEST_UPDATE (§9.5) ----

// C010: every successful REQUEST_UPDATE gets its own REQUEST_OK (§9.5.1).
func TestC010_EachUpdateAnswered(t *testing.T) {
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
	t.Run("one over", func(t *testing.T) {
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
}

// serverSessionSetup is serverSession that also checks the library's SETUP.
func serverSessionSetup(t *testing.T, cfg *Config, check func(*wire.Setup)) (*Session, *fakePeer) {
	t.Helper()
	ls := startLibServer(t, cfg, nil)
	fp := ls.dial("moqt")
	fp.sendSetup(ls.clientSetup())
	s := ls.accept()
	check(fp.readPeerSetup())
	return s, fp
}

// The library, as an update sender, respects the peer's MAX_REQUEST_UPDATES:
// a further Update waits for credit, and one abandoned while waiting never
// reaches the wire nor consumes a Request ID.
func TestMaxRequestUpdatesRespected(t *testing.T) {
	fsrv := startFakeServer(t)
	fp, dial := fsrv.dialLib("moqt", nil)
	fp.readPeerSetup()
	fp.sendSetup(&wire.Setup{MaxRequestUpdates: wire.Some[uint64](1)})
	s, err := dial.wait()
	require.NoError(t, err)
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
}

// C080: a refused update is answered with REQUEST_ERROR, and the
// subscription then ends with PUBLISH_DONE UPDATE_FAILED and FIN.
func TestC080_FailedUpdateEndsSubscription(t *testing.T) {
	t.Run("library publisher", func(t *testing.T) {
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
		assert.Equal(t, StateTerminated, ss.State())
		assert.Equal(t, wire.Some[uint8](5), ss.Params().SubscriberPriority, "the refused update applied")
	})
	t.Run("library subscriber", func(t *testing.T) {
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
		assert.True(t, sub.Forward(), "a refused update changed the Forward State")
		fs.expectFIN()
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
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 1)}}))
		re := expect[*wire.RequestError](fs)
		assert.Equal(t, wire.ReqInvalidFilter, re.ErrorCode)
		fs.expectFIN()
	})
	t.Run("SUBSCRIBE over the limit", func(t *testing.T) {
		_, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 2})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 3)}}))
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
	})
	t.Run("default 0: SUBSCRIBE with a range filter of no Ranges", func(t *testing.T) {
		// "Range Filters are only allowed if the setup option
		// MAX_FILTER_RANGES is non-zero" (§3.3.2): with 0, any filter
		// parameter is refused, even one without Ranges.
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter}}}))
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
	})
	t.Run("FILL_PARAMETERS over the limit", func(t *testing.T) {
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
	t.Run("REQUEST_UPDATE at default 0", func(t *testing.T) {
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 1)}}})
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		assert.Equal(t, wire.DoneUpdateFailed, expect[*wire.PublishDone](fs).StatusCode)
		fs.expectFIN()
	})
	t.Run("REQUEST_UPDATE over the limit", func(t *testing.T) {
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
}

// C025: a repeated (type, SetID) range filter is INVALID_FILTER, in
// SUBSCRIBE and in REQUEST_UPDATE.
func TestC025_RepeatedRangeFilter(t *testing.T) {
	h, _ := servedCh(AcceptOptions{})
	twice := []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 1, 1), rangeFilter(wire.ParamSubgroupFilter, 1, 1)}
	t.Run("SUBSCRIBE", func(t *testing.T) {
		_, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 8})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{RangeFilters: twice}))
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
	})
	t.Run("REQUEST_UPDATE", func(t *testing.T) {
		s, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 8})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{RangeFilters: twice}})
		assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		assert.Equal(t, wire.DoneUpdateFailed, expect[*wire.PublishDone](fs).StatusCode) // C080
		fs.expectFIN()
		assert.NoError(t, s.Context().Err())
	})
}

// REQUEST_UPDATE only from the requester, or the subscriber of a PUBLISH
// (§9.5).
func TestRequestUpdateFromWrongSide(t *testing.T) {
	t.Run("publisher of a SUBSCRIBE", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fs.send(&wire.RequestUpdate{RequestID: 1})
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("on TRACK_STATUS", func(t *testing.T) {
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		_, fp := serverSession(t, &Config{Handler: HandlerFunc(func(Request) { <-release })})
		fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
		fs.send(&wire.RequestUpdate{RequestID: 2})
		fp.expectClose(wire.ProtocolViolation)
	})
}

// The publisher of a PUBLISH may update it; the subscriber answers after
// its PUBLISH_OK, never before (the response comes first).
func TestRequestUpdateFromPublishSender(t *testing.T) {
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
}
