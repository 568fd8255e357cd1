package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// The subscription state machine and its transitions (§3.1, §3.6).

func TestSubscriptionStateDiagram(t *testing.T) {
	all := []subscriptionState{stateIdle, statePendingSubscriber, statePendingPublisher, stateEstablished, stateTerminated}
	arrows := map[[2]subscriptionState]bool{
		{stateIdle, statePendingSubscriber}:              true, // SUBSCRIBE
		{stateIdle, statePendingPublisher}:               true, // PUBLISH
		{statePendingSubscriber, stateEstablished}:       true, // SUBSCRIBE_OK
		{statePendingPublisher, stateEstablished}:        true, // PUBLISH_OK
		{statePendingSubscriber, stateTerminated}:        true, // REQUEST_ERROR, STOP_SENDING
		{statePendingPublisher, stateTerminated}:         true, // REQUEST_ERROR, PUBLISH_DONE
		{stateEstablished, stateEstablished}:             true, // REQUEST_UPDATE
		{stateEstablished, stateTerminated}:              true, // STOP_SENDING, PUBLISH_DONE
		{stateTerminated, stateTerminated}:               false,
		{statePendingSubscriber, statePendingPublisher}:  false,
		{stateEstablished, statePendingSubscriber}:       false,
		{stateTerminated, stateEstablished}:              false,
		{stateIdle, stateEstablished}:                    false,
		{statePendingPublisher, statePendingSubscriber}:  false,
		{statePendingSubscriber, statePendingSubscriber}: false,
	}
	for _, from := range all {
		for _, to := range all {
			want := arrows[[2]subscriptionState{from, to}]
			assert.Equal(t, want, from.canMove(to), "%s -> %s", from, to)
			st := newSubState(from)
			err := st.move(to, nil)
			if want {
				assert.NoError(t, err)
				assert.Equal(t, to, st.current())
			} else {
				assert.Error(t, err)
				assert.Equal(t, from, st.current())
			}
		}
	}
}

// The publisher's end of a SUBSCRIBE: Pending(Subscriber) until the handler
// answers, then Established, then Terminated by PUBLISH_DONE.
func TestSubscriptionStatesServedSubscribe(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		pending := make(chan subscriptionState, 1)
		h := HandlerFunc(func(r Request) {
			sr := r.(*SubscribeRequest)
			pending <- sr.served.current()
			_, _ = acceptLocal(sr, AcceptOptions{})
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		assert.Equal(t, statePendingSubscriber, recvOrFail(t, pending))
		expect[*wire.SubscribeOK](fs)
	})
}

func TestSubscriptionStatesRejectedSubscribe(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		served := make(chan *ServedSubscription, 1)
		h := HandlerFunc(func(r Request) {
			sr := r.(*SubscribeRequest)
			_ = sr.Reject(wire.ReqUnauthorized, "no")
			served <- sr.served
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		assert.Equal(t, wire.ReqUnauthorized, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		ss := recvOrFail(t, served)
		assert.Equal(t, stateTerminated, ss.current())
		var re *RequestError
		require.ErrorAs(t, ss.Err(), &re)
		assert.Equal(t, wire.ReqUnauthorized, re.Code)
	})
}

// The subscriber's end of a PUBLISH: Pending(Publisher), Established on
// PUBLISH_OK, Terminated on PUBLISH_DONE.
func TestSubscriptionStatesPublishInitiated(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		pending := make(chan subscriptionState, 1)
		subs := make(chan *Subscription, 1)
		h := HandlerFunc(func(r Request) {
			pr := r.(*PublishRequest)
			pending <- pr.sub.current()
			sub, err := pr.Accept(wire.Params{})
			if err == nil {
				subs <- sub
			}
		})
		_, fp := clientSession(t, &Config{Handler: h})
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
		assert.Equal(t, statePendingPublisher, recvOrFail(t, pending))
		expect[*wire.RequestOK](fs)
		sub := recvOrFail(t, subs)
		assert.Equal(t, stateEstablished, sub.current())
		assert.Equal(t, uint64(7), sub.TrackAlias())
		fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
		fs.fin()
		closedOrFail(t, sub.Done(), "not terminated")
		assert.Equal(t, stateTerminated, sub.current())
		fs.expectFIN()
	})
}

// The publisher may end a PUBLISH while it is Pending(Publisher) (§3.1);
// the subscriber still answers it exactly once before its FIN (C002, C008).
func TestSubscriptionPublishDoneWhilePendingPublisher(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		answered := make(chan error, 1)
		h := HandlerFunc(func(r Request) {
			pr := r.(*PublishRequest)
			// Answer only once the library has read the PUBLISH_DONE.
			select {
			case <-pr.sub.Done():
			case <-time.After(fakeGuard):
			}
			_, err := pr.Accept(wire.Params{})
			answered <- err
		})
		_, fp := clientSession(t, &Config{Handler: h})
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
		fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
		fs.fin()
		var de *DoneError
		require.ErrorAs(t, recvOrFail(t, answered), &de)
		expect[*wire.RequestOK](fs)
		fs.expectFIN()
	})
}

// The library as subscriber: REQUEST_ERROR terminates a Pending
// subscription.
func TestSubscriptionRequestErrorTerminates(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
		fs, _ := fp.acceptSubscribe()
		fs.send(&wire.RequestError{ErrorCode: wire.ReqDoesNotExist, RetryInterval: 1001, ErrorReason: "none"})
		fs.fin()
		r := recvOrFail(t, res)
		var re *RequestError
		require.ErrorAs(t, r.err, &re)
		assert.Equal(t, wire.ReqDoesNotExist, re.Code)
		assert.Equal(t, uint64(1001), re.RetryInterval)
		assert.Equal(t, "none", re.Reason)
		fs.expectFIN()
		assert.NoError(t, s.Context().Err())
	})
}

// Illegal transitions from the peer are protocol errors, never silent.
func TestSubscriptionIllegalTransitionsFromPublisher(t *testing.T) {
	for _, tc := range []struct {
		name        string
		established bool // answer SUBSCRIBE_OK first
		send        []wire.Message
	}{
		{"PUBLISH_DONE before SUBSCRIBE_OK", false, []wire.Message{&wire.PublishDone{StatusCode: wire.DoneTrackEnded}}},
		{"REQUEST_OK before SUBSCRIBE_OK", false, []wire.Message{&wire.RequestOK{}}},
		{"PUBLISH_STATE_NOTIFY before SUBSCRIBE_OK", false, []wire.Message{&wire.PublishStateNotify{}}},
		{"REQUEST_OK with no update outstanding", true, []wire.Message{&wire.RequestOK{}}},
		{"REQUEST_ERROR with no update outstanding", true, []wire.Message{&wire.RequestError{ErrorCode: wire.ReqInternalError}}},
		{"SUBSCRIBE_OK after SUBSCRIBE_OK", true, []wire.Message{&wire.SubscribeOK{TrackAlias: 1}}},
		{"PUBLISH_DONE twice", true, []wire.Message{&wire.PublishDone{}, &wire.PublishDone{}}},
		{"PUBLISH_STATE_NOTIFY after PUBLISH_DONE", true, []wire.Message{&wire.PublishDone{}, &wire.PublishStateNotify{}}},
		{"a request message", true, []wire.Message{subscribeMsg(1, trackB, wire.Params{})}},
		{"REQUEST_OK with Track Properties", true, []wire.Message{&wire.RequestOK{TrackProperties: wire.KVList{{Type: 2, Value: 1}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := clientSession(t, nil)
				res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
				fs, _ := fp.acceptSubscribe()
				if tc.established {
					fs.send(&wire.SubscribeOK{TrackAlias: 1})
					require.NoError(t, recvOrFail(t, res).err)
				}
				for _, m := range tc.send {
					fs.send(m)
				}
				fp.expectClose(wire.ProtocolViolation)
				expectSessionError(t, s, wire.ProtocolViolation)
			})
		})
	}
	t.Run("REQUEST_OK with Track Properties answering an update", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(false)}) })
			expect[*wire.RequestUpdate](fs)
			fs.send(&wire.RequestOK{TrackProperties: wire.KVList{{Type: 2, Value: 1}}}) // §9.3
			fp.expectClose(wire.ProtocolViolation)
			assert.Error(t, recvOrFail(t, upd))
		})
	})
}

func TestSubscriptionIllegalTransitionsFromSubscriber(t *testing.T) {
	t.Run("library publisher of a PUBLISH gets REQUEST_ERROR after PUBLISH_OK", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
			fs := fp.accept()
			expect[*wire.Publish](fs)
			fs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, pub).err)
			fs.send(&wire.RequestError{ErrorCode: wire.ReqUninterested})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("subscriber sends SUBSCRIBE_OK", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.SubscribeOK{TrackAlias: 0})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("subscriber sends PUBLISH_DONE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.PublishDone{})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
}
