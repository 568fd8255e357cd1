package moqt

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Request streams: Request IDs, framing and exactly one response
// (§6.4.2, §9.3, §9.4). Cancellation is in conformance_cancel_test.go,
// REQUEST_UPDATE in conformance_update_test.go.

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
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		ctx := fakeCtx(t)

		res := startSubscribe(ctx, s, trackA, wire.Params{})
		fs, m := fp.acceptSubscribe()
		assert.Equal(t, uint64(0), m.RequestID)
		fs.send(&wire.SubscribeOK{TrackAlias: 1})
		sub := recvOrFail(t, res).sub
		require.NotNil(t, sub)
		assert.Equal(t, uint64(0), sub.requestID())

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
	})
}

func TestRequestIDsServerOddFromOne(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

func TestRequestIDInvalid(t *testing.T) {
	h, _ := servedCh(AcceptOptions{})
	cfg := func() *Config { return &Config{Handler: h} }
	t.Run("odd ID from the client", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, cfg())
			fp.open(subscribeMsg(1, trackA, wire.Params{}))
			fp.expectClose(wire.InvalidRequestID)
		})
	})
	t.Run("even ID from the server", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, cfg())
			fp.open(subscribeMsg(0, trackA, wire.Params{}))
			fp.expectClose(wire.InvalidRequestID)
			expectSessionError(t, s, wire.InvalidRequestID)
		})
	})
	t.Run("reused ID", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, cfg())
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackB.Namespace, TrackName: trackB.Name})
			fp.expectClose(wire.InvalidRequestID)
		})
	})
	t.Run("REQUEST_UPDATE reuses the request's ID", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, cfg())
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 0})
			fp.expectClose(wire.InvalidRequestID)
		})
	})
	t.Run("REQUEST_UPDATE with the wrong parity", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, cfg())
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 3})
			fp.expectClose(wire.InvalidRequestID)
		})
	})
	t.Run("out of order is fine, a repeat is not", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, cfg())
			for _, id := range []uint64{4, 0, 2} {
				expect[*wire.SubscribeOK](fp.open(subscribeMsg(id, trackA, wire.Params{})))
			}
			fp.open(subscribeMsg(2, trackA, wire.Params{}))
			fp.expectClose(wire.InvalidRequestID)
		})
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
			inBubble(t, func(t *testing.T) {
				_, fp := serverSession(t, nil)
				fp.open(tc.m)
				fp.expectClose(wire.ProtocolViolation)
			})
		})
	}
	t.Run("unknown message type", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.openStream().sendRaw(frame(0x3F, []byte{1, 2}))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("stream ends inside the first message", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fs := fp.openStream()
			fs.sendRaw(frame(wire.MsgSubscribe, []byte{0, 1, 2})[:4])
			fs.fin()
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("unknown message type later on the stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.sendRaw(frame(0x3F, nil))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("a stream reset before its first message is ignored", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			fs := fp.openStream()
			fs.sendRaw([]byte{0x03}) // the type only
			fs.reset(wire.ResetCancelled)
			fp.alive(0)
			assert.NoError(t, s.Context().Err())
		})
	})
}

// ---- exactly one response (C001, C002) ----

func TestC001_PublisherSendsExactlyOneResponse(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

func TestC001_UnansweredSubscribeIsRejected(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		_, fp := serverSession(t, &Config{Handler: HandlerFunc(func(Request) {})})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		re := expect[*wire.RequestError](fs)
		assert.Equal(t, wire.ReqInternalError, re.ErrorCode)
		fs.expectFIN()
	})
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
			forDrafts(t, sharedDrafts, func(t *testing.T) {
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
		})
	}
}

func TestC002_SubscriberSendsExactlyOnePublishOK(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
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
			forDrafts(t, sharedDrafts, func(t *testing.T) {
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
		})
	}
}

// ---- cancellation and FIN (§6.4.2.2, §6.4.2.3) ----

// ---- REQUEST_UPDATE (§9.5) ----
