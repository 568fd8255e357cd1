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

// A subscription's parameters and what the publisher tells it: the
// forward state, PUBLISH_STATE_NOTIFY, Largest Object, group order,
// stream counts and EXPIRES (§9.6–§9.10, §9.20).

// ---- Forward State (§3.1) ----

func TestForwardStateSetByInitiatorChangedByUpdate(t *testing.T) {
	t.Run("SUBSCRIBE, library publisher", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("SUBSCRIBE default is 1", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, served := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			expect[*wire.SubscribeOK](fp.open(subscribeMsg(0, trackA, wire.Params{})))
			assert.True(t, recvOrFail(t, served).Forward())
		})
	})
	t.Run("SUBSCRIBE, library subscriber", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			sub, fs, m := establish(t, s, fp, trackA, wire.Params{Forward: wire.Some(false)}, &wire.SubscribeOK{TrackAlias: 1})
			assert.Equal(t, wire.Some(false), m.Parameters.Forward)
			assert.False(t, sub.forwardState())
			upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(true)}) })
			assert.Equal(t, wire.Some(true), expect[*wire.RequestUpdate](fs).Parameters.Forward)
			fs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, upd))
			assert.True(t, sub.forwardState())
		})
	})
	t.Run("PUBLISH, library publisher", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("PUBLISH, library subscriber", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
			assert.False(t, sub.forwardState())
			upd := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{Forward: wire.Some(true)}) })
			u := expect[*wire.RequestUpdate](fs)
			assert.Equal(t, uint64(0), u.RequestID)
			fs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, upd))
			assert.True(t, sub.forwardState())
		})
	})
}

// ---- PUBLISH_STATE_NOTIFY (§9.10) ----

// C012: PUBLISH_STATE_NOTIFY from the subscriber, or on a request that is
// not a subscription, closes with PROTOCOL_VIOLATION.
func TestC012_PublishStateNotifyOnlyFromPublisher(t *testing.T) {
	t.Run("subscriber of a SUBSCRIBE", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.PublishStateNotify{Parameters: wire.Params{Forward: wire.Some(false)}})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("subscriber of a PUBLISH", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			pub := startPublish(fakeCtx(t), s, trackA, wire.Params{}, nil)
			fs := fp.accept()
			expect[*wire.Publish](fs)
			fs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, pub).err)
			fs.send(&wire.PublishStateNotify{})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("on TRACK_STATUS", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			ts := goErr(func() error { _, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{}); return err })
			fs := fp.accept()
			expect[*wire.TrackStatus](fs)
			fs.send(&wire.PublishStateNotify{})
			fp.expectClose(wire.ProtocolViolation)
			assert.Error(t, recvOrFail(t, ts))
		})
	})
	t.Run("from the publisher it is applied", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
}

// C013: a publisher does not change a subscriber-controlled parameter with
// PUBLISH_STATE_NOTIFY (see Notify for what counts as one).
func TestC013_NotifyLeavesSubscriberParameters(t *testing.T) {
	t.Run("SUBSCRIBE-initiated: FORWARD and LOCATION_FILTER are the subscriber's", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("PUBLISH-initiated: FORWARD is the publisher's until the subscriber sets it", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
}

// C014: PUBLISH_STATE_NOTIFY carries LARGEST_OBJECT when it is known.
func TestC014_NotifyCarriesLargestObject(t *testing.T) {
	t.Run("known from AcceptOptions and SetLargest", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, served := servedChAt(wire.Some(wire.Location{Group: 1, Object: 4}), AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			ss := recvOrFail(t, served)
			require.NoError(t, ss.Notify(wire.Params{}))
			assert.Equal(t, wire.Some(wire.Location{Group: 1, Object: 4}), expect[*wire.PublishStateNotify](fs).Parameters.LargestObject)
			ss.setLargest(wire.Location{Group: 2, Object: 0})
			require.NoError(t, ss.Notify(wire.Params{}))
			assert.Equal(t, wire.Some(wire.Location{Group: 2, Object: 0}), expect[*wire.PublishStateNotify](fs).Parameters.LargestObject)
		})
	})
	t.Run("known from PUBLISH", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("absent when nothing is known", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
}

// C015: GROUP_ORDER outside 1–2 closes the session with PROTOCOL_VIOLATION.
func TestC015_GroupOrderOutOfRange(t *testing.T) {
	for _, v := range []byte{0, 3, 255} {
		t.Run(fmt.Sprintf("GROUP_ORDER %d in SUBSCRIBE", v), func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				_, fp := serverSession(t, nil)
				fp.openStream().sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, 0, trackA, 1, byte(wire.ParamGroupOrder), v)))
				fp.expectClose(wire.ProtocolViolation)
			})
		})
	}
	// GROUP_ORDER in PUBLISH is 21's (18 has it in PUBLISH_OK, 19 in
	// neither: docs/drafts.md §2).
	t.Run("GROUP_ORDER 3 in PUBLISH", func(t *testing.T) {
		forDrafts(t, only21, func(t *testing.T) {
			_, fp := clientSession(t, nil)
			fp.openStream().sendRaw(frame(wire.MsgPublish, rawPublish(t, 1, 3)))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	// The same bytes with valid values are served, so the violations
	// above are the values' doing.
	t.Run("controls", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
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
			if draftOf(t) != wire.Draft21 {
				return
			}

			c, cfp := clientSession(t, nil)
			pfs := cfp.openStream()
			pfs.sendRaw(frame(wire.MsgPublish, rawPublish(t, 1, 2)))
			assert.Equal(t, wire.ReqNotSupported, expect[*wire.RequestError](pfs).ErrorCode)
			assert.NoError(t, c.Context().Err())
		})
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
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.openStream().sendRaw(frame(wire.MsgSubscribe, rawTrackRequest(t, 0, trackA, 1, byte(wire.ParamForward), 2)))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	// PUBLISH_STATE_NOTIFY is 21's: on 18 and 19 its type is unknown.
	t.Run("in PUBLISH_STATE_NOTIFY", func(t *testing.T) {
		forDrafts(t, only21, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fs.sendRaw(frame(wire.MsgPublishStateNotify, []byte{1, byte(wire.ParamForward), 2}))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("in REQUEST_UPDATE", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.sendRaw(frame(wire.MsgRequestUpdate, []byte{2, 1, byte(wire.ParamForward), 0})) // control
			expect[*wire.RequestOK](fs)
			fs.sendRaw(frame(wire.MsgRequestUpdate, []byte{4, 1, byte(wire.ParamForward), 2}))
			fp.expectClose(wire.ProtocolViolation)
		})
	})
}

// ---- LARGEST_OBJECT, Stream Count ----

// The Largest Object an application passes in AcceptOptions is reported in
// SUBSCRIBE_OK, and SetLargest moves what REQUEST_OK reports, never back.
// TestC016_LocalTrackReportsLargestObject checks that the library fills it
// in itself.
func TestLargestObjectFromAcceptOptions(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedChAt(wire.Some(wire.Location{Group: 7, Object: 3}), AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		ok := expect[*wire.SubscribeOK](fs)
		assert.Equal(t, wire.Some(wire.Location{Group: 7, Object: 3}), ok.Parameters.LargestObject)
		ss := recvOrFail(t, served)
		ss.setLargest(wire.Location{Group: 8, Object: 0})
		ss.setLargest(wire.Location{Group: 7, Object: 9}) // never goes back
		fs.send(&wire.RequestUpdate{RequestID: 2})
		assert.Equal(t, wire.Some(wire.Location{Group: 8, Object: 0}), expect[*wire.RequestOK](fs).Parameters.LargestObject)
	})
}

// C016's converse: a LocalTrack with nothing published reports no Largest
// Object, rather than some made-up Location.
func TestC016_NoLargestObjectWhenNothingPublished(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		_, fp, served := servedTrack(t)
		_, ok, _ := subscribeFake(t, fp, served, wire.Params{})
		assert.False(t, ok.Parameters.LargestObject.Set)
	})
}

// C083: with no data streams opened, PUBLISH_DONE's Stream Count is 0.
func TestC083_StreamCountZero(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		require.NoError(t, recvOrFail(t, served).End(wire.DoneTrackEnded, ""))
		assert.Equal(t, uint64(0), expect[*wire.PublishDone](fs).StreamCount)
		fs.expectFIN()
	})
}

// ---- EXPIRES (§9.20.17) ----

// The publisher ends the subscription with PUBLISH_DONE EXPIRED once the
// granted time has passed.
func TestExpiresEndsSubscription(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
		assert.Equal(t, stateTerminated, recvOrFail(t, served).current())
	})
}

// Each accepted REQUEST_UPDATE restarts the grant: a subscriber that keeps
// updating keeps its subscription, and it expires a grant after the last
// update.
func TestExpiresExtendedByUpdate(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

// ---- several subscriptions, aliases ----

// ---- Mandatory Track Properties (§3.6) ----

// ---- TRACK_STATUS (§9.13) ----

// ---- .session (§6.5) ----

// ---- unknown codes (§12) ----
