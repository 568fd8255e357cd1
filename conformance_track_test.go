package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Tracks across requests: shared and duplicate Track Aliases, Mandatory
// Track Properties, TRACK_STATUS, the .session namespace and unknown codes
// (§3.1.2, §6.5, §9.13, §10).

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
			ids[recvOrFail(t, served).requestID()] = true
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
	assert.Equal(t, stateEstablished, ss.current())
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
