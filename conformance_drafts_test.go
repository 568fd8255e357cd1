package moqt

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// What differs between drafts 18, 19 and 21 in the session (docs/drafts.md
// §6), both roles, against the fake peer speaking each draft.

// Smoke: every draft negotiates, and a subscription carries objects.
func TestDraftSmoke(t *testing.T) {
	forDrafts(t, everyDraft, func(t *testing.T) {
		track, cfg, served := newServedTrack(t, trackA, nil)
		s, fp := serverSession(t, cfg)
		assert.Equal(t, draftOf(t), s.Version())
		assert.Equal(t, draftOf(t), fp.v)
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		recvOrFail(t, served)
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("x")))
		require.NoError(t, w.Close())
		d := fp.acceptData()
		d.expectObjects(0)
		d.expectFIN()
	})
}

// The default Config offers every draft, newest first.
func TestDefaultVersions(t *testing.T) {
	cfg := (*Config)(nil).withDefaults()
	assert.Equal(t, []wire.Version{wire.Draft21, wire.Draft20, wire.Draft19, wire.Draft18}, cfg.Versions)
	assert.Equal(t, []string{"moqt-21", "moqt-20", "moqt-19", "moqt-18"}, cfg.alpns())
}

// ---- GOAWAY (18 §10.4) ----

// On 18 the control-stream GOAWAY carries the smallest peer Request ID not
// processed: the first peer ID when none was (0 at a server, 1 at a
// client), else the one after the highest; on 19 and 21 it has none.
func TestGoawayRequestID(t *testing.T) {
	want := func(t *testing.T, id uint64) wire.Opt[uint64] {
		if rulesOf(draftOf(t)).goawayRequestID {
			return wire.Some(id)
		}
		return wire.Opt[uint64]{}
	}
	t.Run("server, none processed", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			go func() { _ = s.Shutdown(fakeCtx(t), "") }()
			g := expectControl[*wire.Goaway](t, fp)
			assert.Equal(t, want(t, 0), g.RequestID)
			fp.closeSession()
		})
	})
	t.Run("server, after requests", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			s, fp := serverSession(t, &Config{Handler: h})
			old := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](old)
			st := fp.open(&wire.TrackStatus{RequestID: 2, TrackNamespace: trackB.Namespace, TrackName: trackB.Name})
			st.read()
			go func() { _ = s.Shutdown(fakeCtx(t), "") }()
			g := expectControl[*wire.Goaway](t, fp)
			assert.Equal(t, want(t, 4), g.RequestID)
			// A request at or past it, or arriving after, is refused.
			late := fp.open(subscribeMsg(4, trackB, wire.Params{}))
			assert.Equal(t, wire.ReqGoingAway, expect[*wire.RequestError](late).ErrorCode)
			fp.closeSession()
		})
	})
	t.Run("client, none processed", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			go func() { _ = s.Shutdown(fakeCtx(t), "") }()
			g := expectControl[*wire.Goaway](t, fp)
			assert.Equal(t, want(t, 1), g.RequestID)
			fp.closeSession()
		})
	})
}

// On 18 a received GOAWAY's Request ID must have the receiver's parity
// (INVALID_REQUEST_ID), is required on the control stream and absent on a
// request stream (PROTOCOL_VIOLATION).
func TestGoawayRequestIDReceived(t *testing.T) {
	t.Run("valid", func(t *testing.T) {
		forDrafts(t, only18, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fp.sendControl(&wire.Goaway{RequestID: wire.Some(uint64(2))})
			closedOrFail(t, s.GoingAway(), "GOAWAY not seen")
			fp.alive(1)
		})
	})
	t.Run("wrong parity", func(t *testing.T) {
		forDrafts(t, only18, func(t *testing.T) {
			_, fp := clientSession(t, nil)
			fp.sendControl(&wire.Goaway{RequestID: wire.Some(uint64(1))})
			fp.expectClose(wire.InvalidRequestID)
		})
	})
	t.Run("wrong parity at a server", func(t *testing.T) {
		forDrafts(t, only18, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.sendControl(&wire.Goaway{RequestID: wire.Some(uint64(0))})
			fp.expectClose(wire.InvalidRequestID)
		})
	})
	t.Run("missing on the control stream", func(t *testing.T) {
		forDrafts(t, only18, func(t *testing.T) {
			_, fp := clientSession(t, nil)
			fp.sendControl(&wire.Goaway{})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("present on a request stream", func(t *testing.T) {
		forDrafts(t, only18, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fs.send(&wire.Goaway{RequestID: wire.Some(uint64(0))})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
}

// expectControl reads the library's next control message, which must be
// an M.
func expectControl[M wire.Message](t *testing.T, fp *fakePeer) M {
	t.Helper()
	m, ok := fp.readControl().(M)
	require.True(t, ok, "unexpected control message")
	return m
}

// ---- Parameters of a PUBLISH-initiated subscription ----

// On 18 and 19 PUBLISH_OK carries the subscriber's parameters, and what it
// omits takes its default (FORWARD 1, no filter) rather than the
// PUBLISH's: the subscriber's end records them as sent.
func TestPublishOKParamsSent(t *testing.T) {
	forDrafts(t, olderDrafts, func(t *testing.T) {
		ask := make(chan wire.Params, 1)
		subs := make(chan *Subscription, 1)
		h := HandlerFunc(func(r Request) {
			if sub, err := r.(*PublishRequest).Accept(<-ask); err == nil {
				subs <- sub
			}
		})
		_, fp := clientSession(t, &Config{Handler: h})
		filt := wire.RangeFilterTo(wire.Location{Group: 5, Object: 1}, 7)
		ask <- wire.Params{Forward: wire.Some(false), SubscriberPriority: wire.Some[uint8](9), LocationFilter: wire.Some(filt)}
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
		ok := expect[*wire.RequestOK](fs)
		assert.Equal(t, wire.Some(false), ok.Parameters.Forward)
		assert.Equal(t, wire.Some[uint8](9), ok.Parameters.SubscriberPriority)
		assert.Equal(t, wire.Some(filt), ok.Parameters.LocationFilter)
		sub := recvOrFail(t, subs)
		p := sub.Params()
		assert.False(t, forwardOf(&p))
		assert.Equal(t, wire.Some(filt), p.LocationFilter)

		// A PUBLISH with FORWARD 0 answered without FORWARD forwards.
		ask <- wire.Params{}
		fs = fp.open(publishMsg(3, trackB, 8, wire.Params{Forward: wire.Some(false)}, nil))
		ok = expect[*wire.RequestOK](fs)
		assert.False(t, ok.Parameters.Forward.Set)
		sub = recvOrFail(t, subs)
		assert.True(t, sub.forwardState())
	})
}

// On 20 and 21 PUBLISH_OK carries EXPIRES only: the rest is refused before
// anything is sent, as another draft's rule.
func TestPublishOKParamsRefusedOn21(t *testing.T) {
	forDrafts(t, []wire.Version{wire.Draft21}, func(t *testing.T) {
		errs := make(chan error, 1)
		h := HandlerFunc(func(r Request) {
			pr := r.(*PublishRequest)
			_, err := pr.Accept(wire.Params{Forward: wire.Some(false)})
			errs <- err
			_ = pr.Reject(wire.ReqUninterested, "")
		})
		_, fp := clientSession(t, &Config{Handler: h})
		fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, nil))
		assert.ErrorIs(t, recvOrFail(t, errs), wire.ErrNotInDraft)
		assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
	})
}

// The publisher's end applies a PUBLISH_OK's parameters on 18 and 19:
// FORWARD 0 there stops the objects its PUBLISH offered with FORWARD 1,
// and a PUBLISH_OK without FORWARD sets it to 1.
func TestPublishOKParamsApplied(t *testing.T) {
	forDrafts(t, olderDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		res := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
		fs := fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{Parameters: wire.Params{Forward: wire.Some(false), SubscriberPriority: wire.Some[uint8](3)}})
		r := recvOrFail(t, res)
		require.NoError(t, r.err)
		settle(t, func() bool { return !r.ss.Forward() }, "PUBLISH_OK's FORWARD 0 applies")
		assert.Equal(t, wire.Some[uint8](3), r.ss.Params().SubscriberPriority)

		res = startPublish(fakeCtx(t), s, trackB, wire.Params{Forward: wire.Some(false)}, nil)
		fs = fp.accept()
		expect[*wire.Publish](fs)
		fs.send(&wire.RequestOK{})
		r = recvOrFail(t, res)
		require.NoError(t, r.err)
		settle(t, func() bool { return r.ss.Forward() }, "PUBLISH_OK without FORWARD: 1")
	})
}

// ---- What a draft lacks is refused before anything is sent ----

func TestNotInDraftRefused(t *testing.T) {
	forDrafts(t, olderDrafts, func(t *testing.T) {
		s, fp := clientSession(t, &Config{MaxRequestUpdates: 4, MaxFilterRanges: 4})
		ctx := fakeCtx(t)
		_, err := s.Subscribe(ctx, trackA, wire.Params{IncludeProperties: wire.Some(true)})
		assert.ErrorIs(t, err, wire.ErrNotInDraft, "INCLUDE_PROPERTIES is 20's")
		if draftOf(t) == wire.Draft18 {
			rf := wire.Params{RangeFilters: []wire.RangeFilter{{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: 0, End: 1}}}}}
			_, err = s.Subscribe(ctx, trackA, rf)
			assert.ErrorIs(t, err, wire.ErrNotInDraft, "range filters are 19's")
		}
		// A relative filter has no typed form.
		_, err = s.Subscribe(ctx, trackA, wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(2))})
		assert.ErrorIs(t, err, wire.ErrNotInDraft)

		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		_ = sub
		fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
		fs.fin()

		res := startPublish(ctx, s, trackB, wire.Params{}, nil)
		pfs := fp.accept()
		expect[*wire.Publish](pfs)
		pfs.send(&wire.RequestOK{})
		r := recvOrFail(t, res)
		require.NoError(t, r.err)
		assert.ErrorIs(t, r.ss.Notify(wire.Params{Forward: wire.Some(false)}), wire.ErrNotInDraft, "PUBLISH_STATE_NOTIFY is 20's")
		fp.alive(1) // nothing was sent: the session goes on
	})
}

// SETUP leaves out the options the draft lacks: on 18 MAX_REQUEST_UPDATES
// and MAX_FILTER_RANGES (19 §10.3.1), which then are no limit at all.
func TestSetupOptionsPerDraft(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		cfg := &Config{MaxRequestUpdates: 4, MaxFilterRanges: 2}
		_, fp, served := pipeServerAccept(t, transport.PipeConfig{}, cfg)
		fp.sendSetup(&wire.Setup{Path: wire.Some("/live"), Authority: wire.Some(pipeAuthority)})
		st := fp.readPeerSetup()
		require.NoError(t, <-served)
		if draftOf(t) == wire.Draft18 {
			assert.False(t, st.MaxRequestUpdates.Set)
			assert.False(t, st.MaxFilterRanges.Set)
			assert.Empty(t, st.Unknown, "not sent as unknown options either")
		} else {
			assert.Equal(t, wire.Some(uint64(4)), st.MaxRequestUpdates)
			assert.Equal(t, wire.Some(uint64(2)), st.MaxFilterRanges)
		}
	})
}

// On 18 there is no limit on outstanding REQUEST_UPDATEs and no
// TOO_MANY_REQUEST_UPDATES: a configured limit is neither advertised nor
// enforced.
func TestNoUpdateLimitOn18(t *testing.T) {
	forDrafts(t, only18, func(t *testing.T) {
		h := HandlerFunc(func(r Request) {
			sr := r.(*SubscribeRequest)
			_, _ = acceptLocal(sr, AcceptOptions{OnUpdate: func(ss *ServedSubscription, _ *wire.Params) error {
				<-ss.Context().Done() // unanswered until the session ends
				return nil
			}})
		})
		s, fp := serverSession(t, &Config{Handler: h, MaxRequestUpdates: 1})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		for id := uint64(2); id <= 6; id += 2 {
			fs.send(&wire.RequestUpdate{RequestID: id, Parameters: wire.Params{Forward: wire.Some(true)}})
		}
		fp.alive(8)
		assert.NoError(t, s.Context().Err())
	})
}

// ---- Codes ----

// PUBLISH_DONE's "unknown" Stream Count is 2^62−1 on 18 and 19 and 2^64−1
// on 21; the subscriber reports either as 2^64−1.
func TestPublishDoneUnknownStreamCount(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: draftOf(t).Profile().UnknownStreamCount})
		fs.fin()
		closedOrFail(t, sub.Done(), "not ended")
		var d *DoneError
		require.ErrorAs(t, sub.Err(), &d)
		assert.Equal(t, ^uint64(0), d.StreamCount)
	})
}

// The session writes its own unknown count as the draft's.
func TestUnknownStreamCountSent(t *testing.T) {
	for _, v := range sharedDrafts {
		m := rulesOf(v).fitMessage(&wire.PublishDone{StreamCount: unknownStreamCount}).(*wire.PublishDone)
		assert.Equal(t, v.Profile().UnknownStreamCount, m.StreamCount, "%s", v)
	}
}

// On 18 and 19 a publisher ends a subscription whose filter's End Group the
// track has passed with SUBSCRIPTION_ENDED; on 21 it goes on (#1833).
func TestSubscriptionEndedAtFilterEnd(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		track, cfg, served := newServedTrack(t, trackA, nil)
		s, fp := serverSession(t, cfg)
		filt := wire.RangeFilterTo(wire.Location{}, 1)
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{LocationFilter: wire.Some(filt)}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)
		for g := uint64(0); g <= 2; g++ {
			w := track.OpenSubgroup(g, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte("x")))
			require.NoError(t, w.Close())
		}
		for range 2 {
			d := fp.acceptData()
			d.expectObjects(0)
			d.expectFIN()
		}
		if ss.sess.rules.endAtFilterEnd {
			done := expect[*wire.PublishDone](fs)
			assert.Equal(t, wire.DoneSubscriptionEnded, done.StatusCode)
			assert.Equal(t, uint64(2), done.StreamCount)
			fs.expectFIN()
		} else {
			fp.alive(2)
			assert.NoError(t, ss.Err())
		}
		assert.Equal(t, s, ss.sess)
	})
}

// A code only another draft has is refused to the application, before
// anything is sent.
func TestCodesNotInDraft(t *testing.T) {
	forDrafts(t, []wire.Version{wire.Draft21}, func(t *testing.T) {
		errs := make(chan error, 1)
		h := HandlerFunc(func(r Request) {
			errs <- r.Reject(wire.ReqDuplicateSubscription, "")
			_ = r.Reject(wire.ReqUninterested, "")
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		assert.ErrorIs(t, recvOrFail(t, errs), wire.ErrNotInDraft)
		assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
	})
	for _, c := range []struct {
		v    wire.Version
		in   wire.RequestErrorCode
		want wire.RequestErrorCode
	}{
		{wire.Draft18, wire.ReqInvalidFilter, wire.ReqInvalidRange},
		{wire.Draft18, wire.ReqConflictingFilters, wire.ReqInvalidRange},
		{wire.Draft21, wire.ReqDuplicateSubscription, wire.ReqInternalError},
		{wire.Draft19, wire.ReqInvalidFilter, wire.ReqInvalidFilter},
		{wire.Draft21, 0x7777, 0x7777},
	} {
		assert.Equal(t, c.want, rulesOf(c.v).requestCode(c.in), "%s %s", c.v, c.in)
	}
	assert.Equal(t, wire.ProtocolViolation, rulesOf(wire.Draft18).sessionCode(wire.TooManyRequestUpdates))
	assert.Equal(t, wire.DoneInternalError, rulesOf(wire.Draft21).doneCode(wire.DoneSubscriptionEnded))
	assert.Equal(t, wire.DoneSubscriptionEnded, rulesOf(wire.Draft19).doneCode(wire.DoneSubscriptionEnded))
}

// ---- One subscription per track and role (18 §5.1) ----

// On 18 a second SUBSCRIBE to a track this end publishes gets
// DUPLICATE_SUBSCRIPTION; on 19 and 21 both are served.
func TestDuplicateSubscriptionServed(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		first := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](first)
		ss := recvOrFail(t, served)
		second := fp.open(subscribeMsg(2, trackA, wire.Params{}))
		if draftOf(t) != wire.Draft18 {
			expect[*wire.SubscribeOK](second)
			return
		}
		assert.Equal(t, wire.ReqDuplicateSubscription, expect[*wire.RequestError](second).ErrorCode)
		second.expectFIN()
		second.fin()
		// Once the first ends, the track may be subscribed again.
		require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
		expect[*wire.PublishDone](first)
		third := fp.open(subscribeMsg(4, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](third)
	})
}

// On 18 a second Subscribe to one track is refused before anything is
// sent, and a PUBLISH of a track this end subscribes to is refused with
// DUPLICATE_SUBSCRIPTION.
func TestDuplicateSubscriptionSubscriber(t *testing.T) {
	forDrafts(t, only18, func(t *testing.T) {
		s, fp := clientSession(t, &Config{Handler: newAcceptAll()})
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		_, err := s.Subscribe(fakeCtx(t), trackA, wire.Params{})
		assert.ErrorIs(t, err, ErrDuplicateSubscription)
		pub := fp.open(publishMsg(1, trackA, 9, wire.Params{}, nil))
		assert.Equal(t, wire.ReqDuplicateSubscription, expect[*wire.RequestError](pub).ErrorCode)
		fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
		fs.fin()
		closedOrFail(t, sub.Done(), "not ended")
		pub = fp.open(publishMsg(3, trackA, 10, wire.Params{}, nil))
		expect[*wire.RequestOK](pub)
	})
}

// On 18 a refused SUBSCRIBE lets go of its track claim before its
// REQUEST_ERROR goes: the peer may ask for the track again as soon as it
// reads the error. A stream window smaller than the error holds its write
// back, so that the claim is looked at with the error under way.
func TestRefusedSubscribeReleasesTrackClaimFirst(t *testing.T) {
	forDrafts(t, only18, func(t *testing.T) {
		s, fp := pipeServerSession(t, heldBackAnswers, &Config{Handler: refuseAll})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		synctest.Wait()
		assert.False(t, s.tracks.serving(trackA), "the claim is let go before the REQUEST_ERROR")
		assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
	})
}

// On 18 a refused PUBLISH lets go of its track claim before its
// REQUEST_ERROR goes, as a refused SUBSCRIBE does.
func TestRefusedPublishReleasesTrackClaimFirst(t *testing.T) {
	forDrafts(t, only18, func(t *testing.T) {
		s, fp := pipeClientSession(t, heldBackAnswers, &Config{Handler: refuseAll})
		pub := fp.open(publishMsg(1, trackA, 9, wire.Params{}, nil))
		synctest.Wait()
		assert.False(t, s.tracks.subscribed(trackA), "the claim is let go before the REQUEST_ERROR")
		assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](pub).ErrorCode)
	})
}

// heldBackAnswers is a Pipe whose stream window is smaller than a
// REQUEST_ERROR: its write waits for the peer to read.
var heldBackAnswers = transport.PipeConfig{StreamWindow: 8, SendBuffer: -1}

// refuseAll refuses every request with a reason longer than
// heldBackAnswers' window.
var refuseAll = HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqUninterested, "not this track, not now") })

// On 18 a PUBLISH for a track whose SUBSCRIBE is still pending ends that
// subscription before the PUBLISH_OK (18 §5.1).
func TestPublishReplacesPendingSubscribe(t *testing.T) {
	forDrafts(t, only18, func(t *testing.T) {
		s, fp := clientSession(t, &Config{Handler: newAcceptAll()})
		res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
		fs, _ := fp.acceptSubscribe()
		pub := fp.open(publishMsg(1, trackA, 9, wire.Params{}, nil))
		fs.expectReset(wire.ResetCancelled)
		expect[*wire.RequestOK](pub)
		assert.ErrorIs(t, recvOrFail(t, res).err, ErrCancelled)
	})
}

// An unexpected REQUEST_UPDATE, from the publisher of a SUBSCRIBE: a
// PROTOCOL_VIOLATION on 19 and 21 (#1784); on 18, whose §10.10 allows only
// the request's sender and a PUBLISH's subscriber to send one, the same as
// an action the specification disallows (18 §3.5).
func TestUnexpectedRequestUpdate(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fs.send(&wire.RequestUpdate{RequestID: 1})
		fp.expectClose(wire.ProtocolViolation)
	})
}
