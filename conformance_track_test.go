package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
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
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("library subscriber", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			sub1, _, m1 := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
			sub2, _, m2 := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
			assert.NotEqual(t, m1.RequestID, m2.RequestID)
			assert.Equal(t, sub1.TrackAlias(), sub2.TrackAlias())
			assert.NoError(t, s.Context().Err())
		})
	})
}

// Self-subscription (§3.1): the library publishes a track to the peer and
// subscribes to the same track through it. The two directions' aliases are
// separate tables, so sharing a number is no conflict.
func TestSelfSubscription(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

// C034: the library, as publisher, never uses one alias for two tracks,
// not even after the first track's subscriptions have ended.
func TestC034_AliasNamesOneTrack(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

// C035: an alias that names a different track with an Established
// subscription closes the session with DUPLICATE_TRACK_ALIAS.
func TestC035_DuplicateTrackAlias(t *testing.T) {
	t.Run("SUBSCRIBE_OK", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 5})
			res := startSubscribe(fakeCtx(t), s, trackB, wire.Params{})
			fs, _ := fp.acceptSubscribe()
			fs.send(&wire.SubscribeOK{TrackAlias: 5})
			fp.expectClose(wire.DuplicateTrackAlias)
			assert.Error(t, recvOrFail(t, res).err)
		})
	})
	t.Run("PUBLISH, even if the handler would refuse it", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
	t.Run("the old subscription has ended", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
	t.Run("same track is no conflict", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
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
			if draftOf(t) == wire.Draft18 {
				// One subscription per track (18 §5.1): the PUBLISH is
				// refused, the session goes on.
				assert.Equal(t, wire.ReqDuplicateSubscription, expect[*wire.RequestError](fs).ErrorCode)
			} else {
				expect[*wire.RequestOK](fs)
				recvOrFail(t, subs)
			}
			fp.alive(3)
			assert.NoError(t, s.Context().Err())
		})
	})
}

var mandatoryProp = wire.KVList{{Type: 0x4000, Value: 1}}

// C006: an unknown Mandatory Track Property in PUBLISH is refused with
// UNSUPPORTED_EXTENSION, without bothering the application.
func TestC006_MandatoryPropertyInPublish(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

// C007: an unknown Mandatory Track Property in SUBSCRIBE_OK makes the
// subscriber cancel the subscription.
func TestC007_MandatoryPropertyInSubscribeOK(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

// mandatoryCases are Track Properties for TestC090: Mandatory ones at both
// ends of 0x4000–0x7FFF and one inside IMMUTABLE_PROPERTIES, where §10.7
// makes a processor look too; and, as controls, unknown properties just
// outside the range, which a receiver passes over.
func mandatoryCases(t *testing.T) []struct {
	name      string
	props     wire.KVList
	mandatory bool
} {
	return []struct {
		name      string
		props     wire.KVList
		mandatory bool
	}{
		{"0x4000", wire.KVList{{Type: 0x4000, Value: 1}}, true},
		{"0x7FFF", wire.KVList{{Type: 0x22, Value: 1}, {Type: 0x7FFF, Bytes: []byte("m")}}, true},
		{"inside IMMUTABLE_PROPERTIES", wire.KVList{{Type: wire.PropImmutableProperties,
			Bytes: propsBlock(t, wire.KVList{{Type: 0x0E, Value: 3}, {Type: 0x5000, Value: 2}})}}, true},
		{"0x3FFF and 0x8000 are not mandatory", wire.KVList{{Type: 0x3FFF, Bytes: []byte("x")}, {Type: 0x8000, Value: 1}}, false},
	}
}

// pendingStreams is how many data streams wait for their alias or their
// FETCH_OK, and the bytes read ahead from them.
func pendingStreams(s *Session) (int, int) {
	s.routes.mu.Lock()
	defer s.routes.mu.Unlock()
	return s.routes.pendingStreams, s.routes.pendingBytes
}

// expectDiscarded requires str, a data stream of a track this end refused,
// to be stopped with CANCELLED well before Config.AliasWait (a minute in
// TestC090) would have let it go: at once in a bubble, within fakeGuard
// over a real transport.
func expectDiscarded(t *testing.T, str transport.SendStream, what string) {
	t.Helper()
	start := time.Now()
	assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, str), what)
	if bubbled() {
		assert.Zero(t, time.Since(start), "%s: stopped at once, not held", what)
	}
}

// TestC090_MandatoryPropertyTrackNotProcessed: a Mandatory Track Property
// this end does not understand (it understands none), in PUBLISH,
// SUBSCRIBE_OK or FETCH_OK, keeps the track from being processed (§3.6):
// PUBLISH is refused with UNSUPPORTED_EXTENSION before the Handler sees it
// (C006), the subscription (C007) or the fetch (C091) is cancelled, and no
// object of the track reaches the application. Its data streams, those
// that arrived early and those that come after, are stopped at once rather
// than held for an alias or an answer (§3.1.2: late objects of a
// cancelled subscription are discarded quickly) and nothing stays held.
// Properties outside 0x4000–0x7FFF leave the track alone.
func TestC090_MandatoryPropertyTrackNotProcessed(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		cfg := func(h Handler) *Config { return &Config{Handler: h, AliasWait: time.Minute} }
		for _, c := range mandatoryCases(t) {
			forClientSessions(t, "PUBLISH/"+c.name, func(t *testing.T, connect fakeConnector) {
				offered := make(chan *Subscription, 1)
				s, fp := connect(t, cfg(HandlerFunc(func(r Request) {
					if sub, err := r.(*PublishRequest).Accept(wire.Params{}); err == nil {
						offered <- sub
					}
				})))
				early := fp.openSubgroup(7, 0, []byte("early"))
				settle(t, func() bool { n, _ := pendingStreams(s); return n == 1 }, "the early stream waits for its alias")
				fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, c.props))
				if !c.mandatory {
					expect[*wire.RequestOK](fs)
					sub := recvOrFail(t, offered)
					r, err := sub.AcceptSubgroup(fakeCtx(t))
					require.NoError(t, err)
					o, err := r.Next()
					require.NoError(t, err)
					assert.Equal(t, uint64(0), o.Location.Object)
					return
				}
				re := expect[*wire.RequestError](fs)
				assert.Equal(t, wire.ReqUnsupportedExtension, re.ErrorCode)
				fs.expectFIN()
				expectDiscarded(t, early, "the early stream")
				late := fp.openSubgroup(7, 1, []byte("late"))
				expectDiscarded(t, late, "a later stream")
				settle(t, func() bool { n, b := pendingStreams(s); return n == 0 && b == 0 }, "streams or bytes held")
				fp.alive(3)
				assert.Empty(t, offered, "the Handler was offered the track")
			})
			forClientSessions(t, "SUBSCRIBE_OK/"+c.name, func(t *testing.T, connect fakeConnector) {
				s, fp := connect(t, cfg(nil))
				res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
				fs, _ := fp.acceptSubscribe()
				early := fp.openSubgroup(7, 0, []byte("early"))
				settle(t, func() bool { n, _ := pendingStreams(s); return n == 1 }, "the early stream waits for its alias")
				fs.send(&wire.SubscribeOK{TrackAlias: 7, TrackProperties: c.props})
				r := recvOrFail(t, res)
				if !c.mandatory {
					require.NoError(t, r.err)
					sr, err := r.sub.AcceptSubgroup(fakeCtx(t))
					require.NoError(t, err)
					_, err = sr.Next()
					require.NoError(t, err)
					return
				}
				var re *RequestError
				require.ErrorAs(t, r.err, &re)
				assert.Equal(t, wire.ReqUnsupportedExtension, re.Code)
				assert.Nil(t, r.sub, "a subscription to read from")
				fs.expectReset(wire.ResetCancelled)
				fs.expectStopSending(wire.ResetCancelled)
				expectDiscarded(t, early, "the early stream")
				late := fp.openSubgroup(7, 1, []byte("late"))
				expectDiscarded(t, late, "a later stream")
				settle(t, func() bool { n, b := pendingStreams(s); return n == 0 && b == 0 }, "streams or bytes held")
				fp.alive(1)
			})
			forClientSessions(t, "FETCH_OK/"+c.name, func(t *testing.T, connect fakeConnector) {
				s, fp := connect(t, cfg(nil))
				got, req, m := startFetch(t, s, fp, wire.Params{})
				early := fp.openFetch(m.RequestID, fobj(0, 0, "early"))
				settle(t, func() bool { n, _ := pendingStreams(s); return n == 1 }, "the early stream waits for FETCH_OK")
				req.send(&wire.FetchOK{EndLocation: wire.Location{Group: 1}, TrackProperties: c.props})
				res := recvOrFail(t, got)
				if !c.mandatory {
					require.NoError(t, res.err)
					o, err := res.f.ReadObject(fakeCtx(t))
					require.NoError(t, err)
					assert.Equal(t, []byte("early"), o.Payload)
					return
				}
				var re *RequestError
				require.ErrorAs(t, res.err, &re)
				assert.Equal(t, wire.ReqUnsupportedExtension, re.Code)
				assert.Nil(t, res.f, "a fetch to read from")
				req.expectStopSending(wire.ResetCancelled)
				expectDiscarded(t, early, "the early stream")
				late := fp.openFetch(m.RequestID, fobj(0, 1, "late"))
				expectDiscarded(t, late, "a later stream")
				settle(t, func() bool { n, _ := pendingStreams(s); return n == 0 }, "streams held")
				fp.alive(1)
			})
		}
	})
}

func TestTrackStatusAnswered(t *testing.T) {
	props := wire.KVList{{Type: 0x0E, Value: 64}}
	t.Run("REQUEST_OK then FIN", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("requester FINs late", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("REQUEST_ERROR then FIN", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
			fs.fin()
			assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
			fs.expectFIN()
		})
	})
	t.Run("library requester", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
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
	})
	t.Run("library requester, message after the answer", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			ts := goErr(func() error { _, err := s.TrackStatus(fakeCtx(t), trackA, wire.Params{}); return err })
			fs := fp.accept()
			expect[*wire.TrackStatus](fs)
			fs.send(&wire.RequestOK{})
			fs.send(&wire.RequestOK{})
			fp.expectClose(wire.ProtocolViolation)
			assert.Error(t, recvOrFail(t, ts))
		})
	})
}

func TestSessionNamespaceDoesNotExist(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}

// Unknown codes in REQUEST_ERROR and PUBLISH_DONE read as INTERNAL_ERROR
// and never close the session.
func TestUnknownCodesDoNotCloseSession(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
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
	})
}
