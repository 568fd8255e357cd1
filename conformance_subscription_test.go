package moqt

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The subscription state machine and its rules (§3.1, §3.6, §9.6–§9.10,
// §9.13).

func TestSubscriptionStateDiagram(t *testing.T) {
	all := []SubscriptionState{StateIdle, StatePendingSubscriber, StatePendingPublisher, StateEstablished, StateTerminated}
	arrows := map[[2]SubscriptionState]bool{
		{StateIdle, StatePendingSubscriber}:              true, // SUBSCRIBE
		{StateIdle, StatePendingPublisher}:               true, // PUBLISH
		{StatePendingSubscriber, StateEstablished}:       true, // SUBSCRIBE_OK
		{StatePendingPublisher, StateEstablished}:        true, // PUBLISH_OK
		{StatePendingSubscriber, StateTerminated}:        true, // REQUEST_ERROR, STOP_SENDING
		{StatePendingPublisher, StateTerminated}:         true, // REQUEST_ERROR, PUBLISH_DONE
		{StateEstablished, StateEstablished}:             true, // REQUEST_UPDATE
		{StateEstablished, StateTerminated}:              true, // STOP_SENDING, PUBLISH_DONE
		{StateTerminated, StateTerminated}:               false,
		{StatePendingSubscriber, StatePendingPublisher}:  false,
		{StateEstablished, StatePendingSubscriber}:       false,
		{StateTerminated, StateEstablished}:              false,
		{StateIdle, StateEstablished}:                    false,
		{StatePendingPublisher, StatePendingSubscriber}:  false,
		{StatePendingSubscriber, StatePendingSubscriber}: false,
	}
	for _, from := range all {
		for _, to := range all {
			want := arrows[[2]SubscriptionState{from, to}]
			assert.Equal(t, want, from.canMove(to), "%s -> %s", from, to)
			st := newSubState(from)
			err := st.move(to, nil)
			if want {
				assert.NoError(t, err)
				assert.Equal(t, to, st.State())
			} else {
				assert.Error(t, err)
				assert.Equal(t, from, st.State())
			}
		}
	}
}

// The publisher's end of a SUBSCRIBE: Pending(Subscriber) until the handler
// answers, then Established, then Terminated by PUBLISH_DONE.
func TestSubscriptionStatesServedSubscribe(t *testing.T) {
	pending := make(chan SubscriptionState, 1)
	h := HandlerFunc(func(r Request) {
		sr := r.(*SubscribeRequest)
		pending <- sr.served.State()
		_, _ = acceptLocal(sr, AcceptOptions{})
	})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	assert.Equal(t, StatePendingSubscriber, recvOrFail(t, pending))
	expect[*wire.SubscribeOK](fs)
}

func TestSubscriptionStatesRejectedSubscribe(t *testing.T) {
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
	assert.Equal(t, StateTerminated, ss.State())
	var re *RequestError
	require.ErrorAs(t, ss.Err(), &re)
	assert.Equal(t, wire.ReqUnauthorized, re.Code)
}

// The subscriber's end of a PUBLISH: Pending(Publisher), Established on
// PUBLISH_OK, Terminated on PUBLISH_DONE.
func TestSubscriptionStatesPublishInitiated(t *testing.T) {
	pending := make(chan SubscriptionState, 1)
	subs := make(chan *Subscription, 1)
	h := HandlerFunc(func(r Request) {
		pr := r.(*PublishRequest)
		pending <- pr.sub.State()
		sub, err := pr.Accept(wire.Params{})
		if err == nil {
			subs <- sub
		}
	})
	_, fp := clientSession(t, &Config{Handler: h})
	fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
	assert.Equal(t, StatePendingPublisher, recvOrFail(t, pending))
	expect[*wire.RequestOK](fs)
	sub := recvOrFail(t, subs)
	assert.Equal(t, StateEstablished, sub.State())
	assert.Equal(t, uint64(7), sub.TrackAlias())
	fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
	fs.fin()
	closedOrFail(t, sub.Done(), "not terminated")
	assert.Equal(t, StateTerminated, sub.State())
	fs.expectFIN()
}

// The publisher may end a PUBLISH while it is Pending(Publisher) (§3.1);
// the subscriber still answers it exactly once before its FIN (C002, C008).
func TestSubscriptionPublishDoneWhilePendingPublisher(t *testing.T) {
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
}

// The library as subscriber: REQUEST_ERROR terminates a Pending
// subscription.
func TestSubscriptionRequestErrorTerminates(t *testing.T) {
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
	}
	t.Run("REQUEST_OK with Track Properties answering an update", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(false)}) })
		expect[*wire.RequestUpdate](fs)
		fs.send(&wire.RequestOK{TrackProperties: wire.KVList{{Type: 2, Value: 1}}}) // §9.3
		fp.expectClose(wire.ProtocolViolation)
		assert.Error(t, recvOrFail(t, upd))
	})
}

func TestSubscriptionIllegalTransitionsFromSubscriber(t *testing.T) {
	t.Run("library publisher of a PUBLISH gets REQUEST_ERROR after PUBLISH_OK", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, pub).err)
		fs.send(&wire.RequestError{ErrorCode: wire.ReqUninterested})
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("subscriber sends SUBSCRIBE_OK", func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.SubscribeOK{TrackAlias: 0})
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("subscriber sends PUBLISH_DONE", func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.PublishDone{})
		fp.expectClose(wire.ProtocolViolation)
	})
}

// ---- Forward State (§3.1) ----

func TestForwardStateSetByInitiatorChangedByUpdate(t *testing.T) {
	t.Run("SUBSCRIBE, library publisher", func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{Forward: wire.Some(false)}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		assert.False(t, ss.Forward())
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{Forward: wire.Some(true)}})
		expect[*wire.RequestOK](fs)
		assert.True(t, ss.Forward())
	})
	t.Run("SUBSCRIBE default is 1", func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		expect[*wire.SubscribeOK](fp.open(subscribeMsg(0, trackA, wire.Params{})))
		assert.True(t, recvOrFail(t, served).Forward())
	})
	t.Run("SUBSCRIBE, library subscriber", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, m := establish(t, s, fp, trackA, wire.Params{Forward: wire.Some(false)}, &wire.SubscribeOK{TrackAlias: 1})
		assert.Equal(t, wire.Some(false), m.Parameters.Forward)
		assert.False(t, sub.Forward())
		upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(true)}) })
		assert.Equal(t, wire.Some(true), expect[*wire.RequestUpdate](fs).Parameters.Forward)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, upd))
		assert.True(t, sub.Forward())
	})
	t.Run("PUBLISH, library publisher", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		pub := startPublish(fakeCtx(t), s, trackA, wire.Params{Forward: wire.Some(false)}, nil)
		fs := fp.accept()
		assert.Equal(t, wire.Some(false), expect[*wire.Publish](fs).Parameters.Forward)
		fs.send(&wire.RequestOK{})
		ss := recvOrFail(t, pub).ss
		require.NotNil(t, ss)
		assert.False(t, ss.Forward())
		fs.send(&wire.RequestUpdate{RequestID: 0, Parameters: wire.Params{Forward: wire.Some(true)}})
		expect[*wire.RequestOK](fs)
		assert.True(t, ss.Forward())
	})
	t.Run("PUBLISH, library subscriber", func(t *testing.T) {
		subs := make(chan *Subscription, 1)
		h := HandlerFunc(func(r Request) {
			sub, err := r.(*PublishRequest).Accept(wire.Params{})
			if err == nil {
				subs <- sub
			}
		})
		_, fp := clientSession(t, &Config{Handler: h})
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{Forward: wire.Some(false)}, nil))
		expect[*wire.RequestOK](fs)
		sub := recvOrFail(t, subs)
		assert.False(t, sub.Forward())
		upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(true)}) })
		u := expect[*wire.RequestUpdate](fs)
		assert.Equal(t, uint64(0), u.RequestID)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, upd))
		assert.True(t, sub.Forward())
	})
}

// ---- PUBLISH_STATE_NOTIFY (§9.10) ----

// C012: PUBLISH_STATE_NOTIFY from the subscriber, or on a request that is
// not a subscription, closes with PROTOCOL_VIOLATION.
func TestC012_PublishStateNotifyOnlyFromPublisher(t *testing.T) {
	t.Run("subscriber of a SUBSCRIBE", func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.send(&wire.PublishStateNotify{Parameters: wire.Params{Forward: wire.Some(false)}})
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("subscriber of a PUBLISH", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, pub).err)
		fs.send(&wire.PublishStateNotify{})
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("on TRACK_STATUS", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		ts := goErr(func() error { _, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{}); return err })
		fs := fp.accept()
		expect[*wire.TrackStatus](fs)
		fs.send(&wire.PublishStateNotify{})
		fp.expectClose(wire.ProtocolViolation)
		assert.Error(t, recvOrFail(t, ts))
	})
	t.Run("from the publisher it is applied", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fs.send(&wire.PublishStateNotify{Parameters: wire.Params{LargestObject: wire.Some(wire.Location{Group: 9, Object: 2})}})
		// No answer is sent; a later update's answer proves the notify was
		// read first.
		upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{}) })
		expect[*wire.RequestUpdate](fs)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, upd))
		l, ok := sub.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 9, Object: 2}, l)
	})
}

// C013: a publisher does not change a subscriber-controlled parameter with
// PUBLISH_STATE_NOTIFY (see Notify for what counts as one).
func TestC013_NotifyLeavesSubscriberParameters(t *testing.T) {
	t.Run("SUBSCRIBE-initiated: FORWARD and LOCATION_FILTER are the subscriber's", func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{Forward: wire.Some(true)}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		require.Error(t, ss.Notify(wire.Params{Forward: wire.Some(false)}))
		require.Error(t, ss.Notify(wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}))
		assert.True(t, ss.Forward())
		// Restating the current values is no change.
		require.NoError(t, ss.Notify(wire.Params{Forward: wire.Some(true), LocationFilter: wire.Some(wire.NoLocationFilter())}))
		n := expect[*wire.PublishStateNotify](fs)
		assert.Equal(t, wire.Some(true), n.Parameters.Forward)
	})
	t.Run("PUBLISH-initiated: FORWARD is the publisher's until the subscriber sets it", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		ss := recvOrFail(t, pub).ss
		require.NotNil(t, ss)
		require.NoError(t, ss.Notify(wire.Params{Forward: wire.Some(false)}))
		assert.Equal(t, wire.Some(false), expect[*wire.PublishStateNotify](fs).Parameters.Forward)
		assert.False(t, ss.Forward())

		fs.send(&wire.RequestUpdate{RequestID: 0, Parameters: wire.Params{Forward: wire.Some(true)}})
		expect[*wire.RequestOK](fs)
		assert.Error(t, ss.Notify(wire.Params{Forward: wire.Some(false)}), "FORWARD is now the subscriber's")
		require.NoError(t, ss.Notify(wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())}), "LOCATION_FILTER still is the publisher's")
		assert.Equal(t, wire.Some(wire.NextObjectFilter()), expect[*wire.PublishStateNotify](fs).Parameters.LocationFilter)
	})
}

// C014: PUBLISH_STATE_NOTIFY carries LARGEST_OBJECT when it is known.
func TestC014_NotifyCarriesLargestObject(t *testing.T) {
	t.Run("known from AcceptOptions and SetLargest", func(t *testing.T) {
		h, served := servedChAt(wire.Some(wire.Location{Group: 1, Object: 4}), AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		require.NoError(t, ss.Notify(wire.Params{}))
		assert.Equal(t, wire.Some(wire.Location{Group: 1, Object: 4}), expect[*wire.PublishStateNotify](fs).Parameters.LargestObject)
		ss.SetLargest(wire.Location{Group: 2, Object: 0})
		require.NoError(t, ss.Notify(wire.Params{}))
		assert.Equal(t, wire.Some(wire.Location{Group: 2, Object: 0}), expect[*wire.PublishStateNotify](fs).Parameters.LargestObject)
	})
	t.Run("known from PUBLISH", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		pub := startPublish(fakeCtx(t), s, trackA, wire.Params{LargestObject: wire.Some(wire.Location{Group: 5, Object: 5})}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		ss := recvOrFail(t, pub).ss
		require.NotNil(t, ss)
		require.NoError(t, ss.Notify(wire.Params{Forward: wire.Some(false)}))
		n := expect[*wire.PublishStateNotify](fs)
		assert.Equal(t, wire.Some(false), n.Parameters.Forward)
		assert.Equal(t, wire.Some(wire.Location{Group: 5, Object: 5}), n.Parameters.LargestObject)
	})
	t.Run("absent when nothing is known", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		ss := recvOrFail(t, pub).ss
		require.NotNil(t, ss)
		require.NoError(t, ss.Notify(wire.Params{Forward: wire.Some(false)}))
		assert.False(t, expect[*wire.PublishStateNotify](fs).Parameters.LargestObject.Set)
	})
}

// C015: GROUP_ORDER outside 1–2 closes the session with PROTOCOL_VIOLATION.
func TestC015_GroupOrderOutOfRange(t *testing.T) {
	for _, v := range []byte{0, 3, 255} {
		t.Run(fmt.Sprintf("GROUP_ORDER %d in SUBSCRIBE", v), func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.openStream().sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, 0, trackA, 1, byte(wire.ParamGroupOrder), v)))
			fp.expectClose(wire.ProtocolViolation)
		})
	}
	t.Run("GROUP_ORDER 3 in PUBLISH", func(t *testing.T) {
		_, fp := clientSession(t, nil)
		fp.openStream().sendRaw(frame(wire.MsgPublish, rawPublish(t, 1, 3)))
		fp.expectClose(wire.ProtocolViolation)
	})
	// The same bytes with valid values are served, so the violations
	// above are the values' doing.
	t.Run("controls", func(t *testing.T) {
		s, fp := serverSession(t, nil)
		for i, v := range []byte{1, 2} {
			fs := fp.openStream()
			fs.sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, uint64(2*i), trackA, 1, byte(wire.ParamGroupOrder), v)))
			assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
		}
		fs := fp.openStream()
		fs.sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, 4, trackA, 1, byte(wire.ParamForward), 0)))
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
		assert.NoError(t, s.Context().Err())

		c, cfp := clientSession(t, nil)
		pfs := cfp.openStream()
		pfs.sendRaw(frame(wire.MsgPublish, rawPublish(t, 1, 2)))
		assert.Equal(t, wire.ReqNotSupported, expect[*wire.RequestError](pfs).ErrorCode)
		assert.NoError(t, c.Context().Err())
	})
}

// rawPublish is a PUBLISH body for trackA, alias 7, with GROUP_ORDER set
// to order by hand.
func rawPublish(t *testing.T, id uint64, order byte) []byte {
	body := rawTrackRequest(t, id, trackA)
	return append(body, 7, 1, byte(wire.ParamGroupOrder), order) // alias, one parameter, no properties
}

// C017: FORWARD outside 0–1 closes the session with PROTOCOL_VIOLATION.
func TestC017_ForwardOutOfRange(t *testing.T) {
	t.Run("in SUBSCRIBE", func(t *testing.T) {
		_, fp := serverSession(t, nil)
		fp.openStream().sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, 0, trackA, 1, byte(wire.ParamForward), 2)))
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("in PUBLISH_STATE_NOTIFY", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fs.sendRaw(frame(wire.MsgPublishStateNotify, []byte{1, byte(wire.ParamForward), 2}))
		fp.expectClose(wire.ProtocolViolation)
	})
	t.Run("in REQUEST_UPDATE", func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		fs.sendRaw(frame(wire.MsgRequestUpdate, []byte{2, 1, byte(wire.ParamForward), 0})) // control
		expect[*wire.RequestOK](fs)
		fs.sendRaw(frame(wire.MsgRequestUpdate, []byte{4, 1, byte(wire.ParamForward), 2}))
		fp.expectClose(wire.ProtocolViolation)
	})
}

// ---- LARGEST_OBJECT, Stream Count ----

// The Largest Object an application passes in AcceptOptions is reported in
// SUBSCRIBE_OK, and SetLargest moves what REQUEST_OK reports, never back.
// TestC016_LocalTrackReportsLargestObject checks that the library fills it
// in itself.
func TestLargestObjectFromAcceptOptions(t *testing.T) {
	h, served := servedChAt(wire.Some(wire.Location{Group: 7, Object: 3}), AcceptOptions{})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	ok := expect[*wire.SubscribeOK](fs)
	assert.Equal(t, wire.Some(wire.Location{Group: 7, Object: 3}), ok.Parameters.LargestObject)
	ss := recvOrFail(t, served)
	ss.SetLargest(wire.Location{Group: 8, Object: 0})
	ss.SetLargest(wire.Location{Group: 7, Object: 9}) // never goes back
	fs.send(&wire.RequestUpdate{RequestID: 2})
	assert.Equal(t, wire.Some(wire.Location{Group: 8, Object: 0}), expect[*wire.RequestOK](fs).Parameters.LargestObject)
}

// C016's converse: a LocalTrack with nothing published reports no Largest
// Object, rather than some made-up Location.
func TestC016_NoLargestObjectWhenNothingPublished(t *testing.T) {
	_, fp, served := servedTrack(t)
	_, ok, _ := subscribeFake(t, fp, served, wire.Params{})
	assert.False(t, ok.Parameters.LargestObject.Set)
}

// C083: with no data streams opened, PUBLISH_DONE's Stream Count is 0.
func TestC083_StreamCountZero(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	expect[*wire.SubscribeOK](fs)
	require.NoError(t, recvOrFail(t, served).End(wire.DoneTrackEnded, ""))
	assert.Equal(t, uint64(0), expect[*wire.PublishDone](fs).StreamCount)
	fs.expectFIN()
}

// ---- EXPIRES (§9.20.17) ----

// The publisher ends the subscription with PUBLISH_DONE EXPIRED once the
// granted time has passed.
func TestExpiresEndsSubscription(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const grant = 5 * time.Second
		h, served := servedCh(AcceptOptions{Expires: grant})
		_, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{Handler: h})
		start := time.Now()
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		ok := expect[*wire.SubscribeOK](fs)
		assert.Equal(t, wire.Some(uint64(grant.Milliseconds())), ok.Parameters.Expires)
		d := expect[*wire.PublishDone](fs)
		assert.Equal(t, wire.DoneExpired, d.StatusCode)
		assert.Equal(t, grant, time.Since(start), "expired when the grant passed")
		fs.expectFIN()
		assert.Equal(t, StateTerminated, recvOrFail(t, served).State())
	})
}

// Each accepted REQUEST_UPDATE restarts the grant: a subscriber that keeps
// updating keeps its subscription, and it expires a grant after the last
// update.
func TestExpiresExtendedByUpdate(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const grant = 2 * time.Second // three grants and one fit in fakeGuard
		h, _ := servedCh(AcceptOptions{Expires: grant})
		_, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{Handler: h})
		start := time.Now()
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		// Refresh every three quarters of a grant for three grants. Each
		// REQUEST_OK must come back: a PUBLISH_DONE instead would mean the
		// grant was not extended.
		id := uint64(2)
		var last time.Time
		for time.Since(start) < 3*grant {
			advance(grant * 3 / 4)
			last = time.Now()
			fs.send(&wire.RequestUpdate{RequestID: id})
			id += 2
			ok := expect[*wire.RequestOK](fs)
			assert.Equal(t, wire.Some(uint64(grant.Milliseconds())), ok.Parameters.Expires)
		}
		d := expect[*wire.PublishDone](fs)
		assert.Equal(t, wire.DoneExpired, d.StatusCode)
		assert.Equal(t, grant, time.Since(last), "expired a grant after the last update")
		fs.expectFIN()
	})
}

// The subscriber records EXPIRES from SUBSCRIBE_OK and REQUEST_OK.
func TestExpiresSeenBySubscriber(t *testing.T) {
	s, fp := clientSession(t, nil)
	before := time.Now()
	sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1, Parameters: wire.Params{Expires: wire.Some[uint64](60_000)}})
	exp := sub.Expires()
	assert.False(t, exp.Before(before.Add(time.Minute)))
	upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{}) })
	expect[*wire.RequestUpdate](fs)
	fs.send(&wire.RequestOK{Parameters: wire.Params{Expires: wire.Some[uint64](120_000)}})
	require.NoError(t, recvOrFail(t, upd))
	assert.True(t, sub.Expires().After(exp))
}

// ---- several subscriptions, aliases ----

// Concurrent subscriptions to one track: each its own Request ID; with
// Config.SharedTrackAliases the library publisher gives them one Track
// Alias (§3.1, §3.1.2), and a peer may do so too.
func TestConcurrentSubscriptionsShareAlias(t *testing.T) {
	t.Run("library publisher", func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h, SharedTrackAliases: true})
		fs1 := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		fs2 := fp.open(subscribeMsg(2, trackA, wire.Params{Forward: wire.Some(false)}))
		fs3 := fp.open(subscribeMsg(4, trackB, wire.Params{}))
		a1 := expect[*wire.SubscribeOK](fs1).TrackAlias
		a2 := expect[*wire.SubscribeOK](fs2).TrackAlias
		a3 := expect[*wire.SubscribeOK](fs3).TrackAlias
		assert.Equal(t, a1, a2)
		assert.NotEqual(t, a1, a3)
		ids := map[uint64]bool{}
		for range 3 {
			ids[recvOrFail(t, served).RequestID()] = true
		}
		assert.Len(t, ids, 3)
	})
	t.Run("library subscriber", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub1, _, m1 := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		sub2, _, m2 := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		assert.NotEqual(t, m1.RequestID, m2.RequestID)
		assert.Equal(t, sub1.TrackAlias(), sub2.TrackAlias())
		assert.NoError(t, s.Context().Err())
	})
}

// Self-subscription (§3.1): the library publishes a track to the peer and
// subscribes to the same track through it. The two directions' aliases are
// separate tables, so sharing a number is no conflict.
func TestSelfSubscription(t *testing.T) {
	s, fp := clientSession(t, nil)
	pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
	pfs := fp.accept()
	p := expect[*wire.Publish](pfs)
	alias := p.TrackAlias
	pfs.send(&wire.RequestOK{})
	ss := recvOrFail(t, pub).ss
	require.NotNil(t, ss)

	// The peer, a relay, answers the subscription with the same alias.
	sub, _, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: alias})
	assert.Equal(t, alias, sub.TrackAlias())
	assert.Equal(t, StateEstablished, ss.State())
	assert.NoError(t, s.Context().Err())
}

// C034: the library, as publisher, never uses one alias for two tracks,
// not even after the first track's subscriptions have ended.
func TestC034_AliasNamesOneTrack(t *testing.T) {
	h, served := servedCh(AcceptOptions{})
	_, fp := serverSession(t, &Config{Handler: h})
	fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
	a := expect[*wire.SubscribeOK](fs).TrackAlias
	require.NoError(t, recvOrFail(t, served).End(wire.DoneTrackEnded, ""))
	expect[*wire.PublishDone](fs)
	fs.expectFIN()
	fs.fin()
	fs2 := fp.open(subscribeMsg(2, trackB, wire.Params{}))
	b := expect[*wire.SubscribeOK](fs2).TrackAlias
	assert.NotEqual(t, a, b)
}

// C035: an alias that names a different track with an Established
// subscription closes the session with DUPLICATE_TRACK_ALIAS.
func TestC035_DuplicateTrackAlias(t *testing.T) {
	t.Run("SUBSCRIBE_OK", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		res := startSubscribe(fakeCtx(t), s, trackB, wire.Params{})
		fs, _ := fp.acceptSubscribe()
		fs.send(&wire.SubscribeOK{TrackAlias: 5})
		fp.expectClose(wire.DuplicateTrackAlias)
		assert.Error(t, recvOrFail(t, res).err)
	})
	t.Run("PUBLISH, even if the handler would refuse it", func(t *testing.T) {
		called := make(chan struct{}, 1)
		h := HandlerFunc(func(r Request) {
			called <- struct{}{}
			_ = r.Reject(wire.ReqUninterested, "")
		})
		s, fp := clientSession(t, &Config{Handler: h})
		establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		fp.open(publishMsg(1, trackB, 5, wire.Params{}, nil))
		fp.expectClose(wire.DuplicateTrackAlias)
		assert.Empty(t, called, "the handler saw a PUBLISH that must close the session")
	})
	t.Run("the old subscription has ended", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
		fs.fin()
		closedOrFail(t, sub.Done(), "not terminated")
		fs.expectFIN()
		sub2, _, _ := establish(t, s, fp, trackB, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		assert.Equal(t, uint64(5), sub2.TrackAlias())
		assert.NoError(t, s.Context().Err())
	})
	t.Run("same track is no conflict", func(t *testing.T) {
		subs := make(chan *Subscription, 1)
		h := HandlerFunc(func(r Request) {
			sub, err := r.(*PublishRequest).Accept(wire.Params{})
			if err == nil {
				subs <- sub
			}
		})
		s, fp := clientSession(t, &Config{Handler: h})
		establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
		fs := fp.open(publishMsg(1, trackA, 5, wire.Params{}, nil))
		expect[*wire.RequestOK](fs)
		recvOrFail(t, subs)
		assert.NoError(t, s.Context().Err())
	})
}

// ---- Mandatory Track Properties (§3.6) ----

var mandatoryProp = wire.KVList{{Type: 0x4000, Value: 1}}

// C006: an unknown Mandatory Track Property in PUBLISH is refused with
// UNSUPPORTED_EXTENSION, without bothering the application.
func TestC006_MandatoryPropertyInPublish(t *testing.T) {
	called := make(chan struct{}, 1)
	h := HandlerFunc(func(r Request) {
		called <- struct{}{}
		_, _ = r.(*PublishRequest).Accept(wire.Params{})
	})
	s, fp := clientSession(t, &Config{Handler: h})
	fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, mandatoryProp))
	re := expect[*wire.RequestError](fs)
	assert.Equal(t, wire.ReqUnsupportedExtension, re.ErrorCode)
	fs.expectFIN()
	assert.Empty(t, called)
	// A non-mandatory unknown property is fine.
	fs2 := fp.open(publishMsg(3, trackB, 8, wire.Params{}, wire.KVList{{Type: 0x3FFE, Value: 1}}))
	expect[*wire.RequestOK](fs2)
	assert.NoError(t, s.Context().Err())
}

// C007: an unknown Mandatory Track Property in SUBSCRIBE_OK makes the
// subscriber cancel the subscription.
func TestC007_MandatoryPropertyInSubscribeOK(t *testing.T) {
	s, fp := clientSession(t, nil)
	res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
	fs, _ := fp.acceptSubscribe()
	fs.send(&wire.SubscribeOK{TrackAlias: 1, TrackProperties: mandatoryProp})
	r := recvOrFail(t, res)
	var re *RequestError
	require.ErrorAs(t, r.err, &re)
	assert.Equal(t, wire.ReqUnsupportedExtension, re.Code)
	fs.expectReset(wire.ResetCancelled)
	fs.expectStopSending(wire.ResetCancelled)
	assert.NoError(t, s.Context().Err())
}

// ---- TRACK_STATUS (§9.13) ----

func TestTrackStatusAnswered(t *testing.T) {
	props := wire.KVList{{Type: 0x0E, Value: 64}}
	t.Run("REQUEST_OK then FIN", func(t *testing.T) {
		h := HandlerFunc(func(r Request) {
			_ = r.(*TrackStatusRequest).Accept(wire.Some(wire.Location{Group: 4, Object: 4}), props)
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
		fs.fin()
		ok := expect[*wire.RequestOK](fs)
		assert.Equal(t, wire.Some(wire.Location{Group: 4, Object: 4}), ok.Parameters.LargestObject)
		assert.Equal(t, props, ok.TrackProperties)
		fs.expectFIN()
	})
	t.Run("requester FINs late", func(t *testing.T) {
		h := HandlerFunc(func(r Request) { _ = r.(*TrackStatusRequest).Accept(wire.Opt[wire.Location]{}, nil) })
		s, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
		ok := expect[*wire.RequestOK](fs)
		assert.False(t, ok.Parameters.LargestObject.Set)
		fs.expectFIN()
		// The stream is open until the requester finishes too, and a
		// Shutdown waits for that, so the answer is never cut short.
		done := goErr(func() error { return s.Shutdown(fakeCtx(t), "") })
		_, isGoaway := fp.readControl().(*wire.Goaway)
		require.True(t, isGoaway)
		fs.fin()
		fp.alive(2)
		fp.closeSession()
		assert.NoError(t, recvOrFail(t, done))
	})
	t.Run("REQUEST_ERROR then FIN", func(t *testing.T) {
		_, fp := serverSession(t, nil)
		fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
		fs.fin()
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
	})
	t.Run("library requester", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		type res struct {
			st  *TrackStatus
			err error
		}
		ch := make(chan res, 1)
		go func() {
			st, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{})
			ch <- res{st, err}
		}()
		fs := fp.accept()
		expect[*wire.TrackStatus](fs)
		fs.expectFIN() // TRACK_STATUS is the only message
		fs.send(&wire.RequestOK{Parameters: wire.Params{LargestObject: wire.Some(wire.Location{Group: 1})}, TrackProperties: props})
		fs.fin()
		r := recvOrFail(t, ch)
		require.NoError(t, r.err)
		assert.Equal(t, wire.Some(wire.Location{Group: 1}), r.st.Largest)
		assert.Equal(t, props, r.st.Properties)
	})
	t.Run("library requester, message after the answer", func(t *testing.T) {
		s, fp := clientSession(t, nil)
		ts := goErr(func() error { _, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{}); return err })
		fs := fp.accept()
		expect[*wire.TrackStatus](fs)
		fs.send(&wire.RequestOK{})
		fs.send(&wire.RequestOK{})
		fp.expectClose(wire.ProtocolViolation)
		assert.Error(t, recvOrFail(t, ts))
	})
}

// ---- .session (§6.5) ----

func TestSessionNamespaceDoesNotExist(t *testing.T) {
	called := make(chan struct{}, 4)
	h := HandlerFunc(func(r Request) {
		called <- struct{}{}
		_ = r.Reject(wire.ReqInternalError, "")
	})
	sessionTrack := wire.FullTrackName{Namespace: wire.NewNamespace(".session")}
	namedTrack := wire.FullTrackName{Namespace: wire.NewNamespace(".session", "x"), Name: []byte("y")}
	s, fp := serverSession(t, &Config{Handler: h})
	for i, m := range []wire.Message{
		subscribeMsg(0, sessionTrack, wire.Params{}),
		&wire.TrackStatus{RequestID: 2, TrackNamespace: namedTrack.Namespace, TrackName: namedTrack.Name},
		publishMsg(4, namedTrack, 1, wire.Params{}, nil),
	} {
		fs := fp.open(m)
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode, "request %d", i)
		fs.expectFIN()
	}
	assert.Empty(t, called)
	_, err := publishLocal(fakeCtx(t), s, namedTrack, wire.Params{}, nil)
	assert.Error(t, err, "the application must not publish in .session")
}

// ---- unknown codes (§12) ----

// Unknown codes in REQUEST_ERROR and PUBLISH_DONE read as INTERNAL_ERROR
// and never close the session.
func TestUnknownCodesDoNotCloseSession(t *testing.T) {
	s, fp := clientSession(t, nil)
	res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
	fs, _ := fp.acceptSubscribe()
	fs.send(&wire.RequestError{ErrorCode: 0x7777, ErrorReason: "?"})
	fs.fin()
	var re *RequestError
	require.ErrorAs(t, recvOrFail(t, res).err, &re)
	assert.Equal(t, wire.RequestErrorCode(0x7777), re.Code)
	assert.False(t, re.Code.Known(), "an unknown code, to be read as INTERNAL_ERROR")

	sub, fs2, _ := establish(t, s, fp, trackB, wire.Params{}, &wire.SubscribeOK{TrackAlias: 2})
	fs2.send(&wire.PublishDone{StatusCode: 0x9D, StreamCount: 1})
	fs2.fin()
	closedOrFail(t, sub.Done(), "not terminated")
	var de *DoneError
	require.ErrorAs(t, sub.Err(), &de)
	assert.Equal(t, wire.PublishDoneCode(0x9D), de.Code)
	assert.False(t, de.Code.Known(), "an unknown code, to be read as INTERNAL_ERROR")
	fp.alive(1)
	assert.NoError(t, s.Context().Err())
}
