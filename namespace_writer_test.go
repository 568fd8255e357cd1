package moqt

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// fakeNSRequest starts s's SUBSCRIBE_NAMESPACE (or SUBSCRIBE_TRACKS)
// for prefix and returns the fake's end of its stream and a channel that
// delivers the result.
func fakeNSRequest(t *testing.T, s *Session, fp *fakePeer, tracks bool, prefix wire.Namespace) (*fakeStream, <-chan *NamespaceSubscription, <-chan error) {
	t.Helper()
	subc, errc := make(chan *NamespaceSubscription, 1), make(chan error, 1)
	go func() {
		ctx := fakeCtx(t)
		var sub *NamespaceSubscription
		var err error
		if tracks {
			sub, err = s.SubscribeTracks(ctx, prefix, wire.Params{})
		} else {
			sub, err = s.SubscribeNamespace(ctx, prefix, wire.Params{})
		}
		if err != nil {
			errc <- err
			return
		}
		subc <- sub
	}()
	fs := fp.accept()
	fs.read()
	return fs, subc, errc
}

// namespaceMux hands PUBLISH_NAMESPACE to ah and every other request to h.
func namespaceMux(h *nsServer, ah *announceServer) Handler {
	return HandlerFunc(func(r Request) {
		if _, ok := r.(*PublishNamespaceRequest); ok {
			ah.ServeMOQT(r)
			return
		}
		h.ServeMOQT(r)
	})
}

// The requester's rules on the responder's messages (§9.15, §9.18,
// §2.4.1): each breach closes the session with PROTOCOL_VIOLATION.
func TestNamespaceRequesterProtocolViolations(t *testing.T) {
	long := make([]string, 30)
	for i := range long {
		long[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		name   string
		tracks bool
		msgs   []wire.Message
	}{
		{"NAMESPACE as the first answer", false, []wire.Message{&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")}}},
		{"PUBLISH_SKIPPED as the first answer", true, []wire.Message{&wire.PublishSkipped{TrackNamespaceSuffix: wire.NewNamespace("a"), TrackName: []byte("t")}}},
		{"NAMESPACE_DONE before its NAMESPACE", false, []wire.Message{&wire.RequestOK{},
			&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")},
			&wire.NamespaceDone{TrackNamespaceSuffix: wire.NewNamespace("b")}}},
		{"NAMESPACE_DONE twice", false, []wire.Message{&wire.RequestOK{},
			&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")},
			&wire.NamespaceDone{TrackNamespaceSuffix: wire.NewNamespace("a")},
			&wire.NamespaceDone{TrackNamespaceSuffix: wire.NewNamespace("a")}}},
		{"prefix and suffix over 32 fields", false, []wire.Message{&wire.RequestOK{},
			&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("x", "y", "z")}}},
		{"REQUEST_OK with no update outstanding", false, []wire.Message{&wire.RequestOK{}, &wire.RequestOK{}}},
		{"message after REQUEST_ERROR", false, []wire.Message{&wire.RequestError{ErrorCode: wire.ReqUninterested},
			&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")}}},
		{"NAMESPACE on SUBSCRIBE_TRACKS", true, []wire.Message{&wire.RequestOK{},
			&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")}}},
	} {
		forClientSessions(t, tc.name, func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			prefix := wire.NewNamespace(long...)
			fs, _, _ := fakeNSRequest(t, s, fp, tc.tracks, prefix)
			for _, m := range tc.msgs {
				fs.send(m)
			}
			fp.expectClose(wire.ProtocolViolation)
		})
	}
	forClientSessions(t, "PUBLISH_NAMESPACE answered twice", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		go func() { _, _ = s.PublishNamespace(fakeCtx(t), wire.NewNamespace("a"), wire.Params{}) }()
		fs := fp.accept()
		expect[*wire.PublishNamespace](fs)
		fs.send(&wire.RequestOK{})
		fs.send(&wire.RequestOK{})
		fp.expectClose(wire.ProtocolViolation)
	})
}

// A peer that keeps more namespaces active than Config.MaxActiveNamespaces
// gets the request cancelled with EXCESSIVE_LOAD; the application is told.
// Until then, and before, a subscription whose application does not call
// Next stops reading at a bounded queue.
func TestNamespaceRequesterBounds(t *testing.T) {
	forClientSessions(t, "active", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{MaxActiveNamespaces: 3})
		fs, subc, _ := fakeNSRequest(t, s, fp, false, nil)
		fs.send(&wire.RequestOK{})
		sub := recvOrFail(t, subc)
		for i := range 4 {
			fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace(fmt.Sprint(i))})
		}
		fs.expectStopSending(wire.ResetExcessiveLoad)
		ctx := fakeCtx(t)
		var err error
		for n := 0; err == nil && n < 10; n++ {
			_, err = sub.Next(ctx)
		}
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqExcessiveLoad, re.Code)
		assert.NoError(t, s.Context().Err())
	})
	forClientSessions(t, "queue", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		fs, subc, _ := fakeNSRequest(t, s, fp, false, nil)
		fs.send(&wire.RequestOK{})
		sub := recvOrFail(t, subc)
		const n = maxQueuedEvents + 50
		go func() {
			for i := range n {
				fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace(fmt.Sprint(i))})
			}
		}()
		queued := func() int {
			sub.mu.Lock()
			defer sub.mu.Unlock()
			return len(sub.events)
		}
		settle(t, func() bool { return queued() == maxQueuedEvents }, "queue not filled")
		time.Sleep(50 * time.Millisecond)
		assert.Equal(t, maxQueuedEvents, queued(), "the queue grew past its bound")
		ctx := fakeCtx(t)
		for i := range n {
			assert.Equal(t, nsEvent(false, fmt.Sprint(i)), next(t, ctx, sub))
		}
		// Next's ctx interrupts it.
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		_, err := sub.Next(short)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// A subscription whose reader waits on a full queue ends with the
// session: its events, the Done events, then the session's error, and no
// goroutine is left.
func TestNamespaceRequesterFullAtSessionEnd(t *testing.T) {
	forClientSessions(t, "full", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		fs, subc, _ := fakeNSRequest(t, s, fp, false, nil)
		fs.send(&wire.RequestOK{})
		sub := recvOrFail(t, subc)
		for i := range maxQueuedEvents + 1 {
			fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace(fmt.Sprint(i))})
		}
		settle(t, func() bool {
			sub.mu.Lock()
			defer sub.mu.Unlock()
			return len(sub.events) == maxQueuedEvents
		}, "queue not filled")
		require.NoError(t, s.Close())
		ctx := fakeCtx(t)
		for i := range maxQueuedEvents {
			assert.Equal(t, nsEvent(false, fmt.Sprint(i)), next(t, ctx, sub))
		}
		for range maxQueuedEvents {
			ev := next(t, ctx, sub)
			assert.True(t, ev.Done)
		}
		_, err := sub.Next(ctx)
		var se *SessionError
		assert.ErrorAs(t, err, &se)
	})
}

// nsRequestBody is the body of a SUBSCRIBE_NAMESPACE for a prefix of
// fields fields, which the codec refuses past 32.
func nsRequestBody(id uint64, fields int) []byte {
	b := wire.AppendVarint(nil, id)
	b = wire.AppendVarint(b, uint64(fields))
	for range fields {
		b = append(b, 1, 'f')
	}
	return wire.AppendVarint(b, 0)
}

// The responder's checks before the Handler: PREFIX_OVERLAP within each
// type (§9.15, §9.18), and a prefix over 32 fields closes the session.
func TestNamespacePrefixOverlap(t *testing.T) {
	forServerSessions(t, "overlap", func(t *testing.T, connect fakeConnector) {
		h := newNSServer()
		s, fp := connect(t, &Config{Handler: h})
		a := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a", "b")})
		expect[*wire.RequestOK](a)
		for i, p := range []wire.Namespace{wire.NewNamespace("a"), wire.NewNamespace("a", "b"), wire.NewNamespace("a", "b", "c"), nil} {
			fs := fp.open(&wire.SubscribeNamespace{RequestID: uint64(2 + 2*i), TrackNamespacePrefix: p})
			assert.Equal(t, wire.ReqPrefixOverlap, expect[*wire.RequestError](fs).ErrorCode, "prefix %v", p)
			fs.expectFIN()
		}
		// (a, bc) shares no prefix with (a, b): fields match whole.
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 10, TrackNamespacePrefix: wire.NewNamespace("a", "bc")})
		expect[*wire.RequestOK](fs)
		// SUBSCRIBE_TRACKS has its own space.
		tr := fp.open(&wire.SubscribeTracks{RequestID: 12, TrackNamespacePrefix: wire.NewNamespace("a")})
		expect[*wire.RequestOK](tr)
		tr2 := fp.open(&wire.SubscribeTracks{RequestID: 14, TrackNamespacePrefix: wire.NewNamespace("a", "x")})
		assert.Equal(t, wire.ReqPrefixOverlap, expect[*wire.RequestError](tr2).ErrorCode)
		// Once a request ends, its prefix is free.
		a.cancel()
		settle(t, func() bool { return s.nsPrefixes.count() == 2 }, "the cancelled request's claim is held")
		again := fp.open(&wire.SubscribeNamespace{RequestID: 16, TrackNamespacePrefix: wire.NewNamespace("a", "b")})
		expect[*wire.RequestOK](again)
		assert.NoError(t, s.Context().Err())
	})
	for _, typ := range []wire.MessageType{wire.MsgSubscribeNamespace, wire.MsgSubscribeTracks} {
		forServerSessions(t, typ.String()+" over 32 fields", func(t *testing.T, connect fakeConnector) {
			_, fp := connect(t, &Config{Handler: newNSServer()})
			fs := fp.openStream()
			fs.sendRaw(frame(typ, nsRequestBody(0, 33)))
			fp.expectClose(wire.ProtocolViolation)
		})
	}
}

// TestC009_FailedNamespaceUpdateClosesStream: a refused REQUEST_UPDATE of
// a SUBSCRIBE_NAMESPACE, SUBSCRIBE_TRACKS or PUBLISH_NAMESPACE is
// answered with REQUEST_ERROR, and the responder closes the stream
// (§9.5.1): FIN, and the request is over.
func TestC009_FailedNamespaceUpdateClosesStream(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		overlapping := wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("a", "z"))}
		for _, tc := range []struct {
			name   string
			open   func(id uint64, ns wire.Namespace) wire.Message
			update wire.Params
			code   wire.RequestErrorCode
			// not18: 18 §10.10 names SUBSCRIBE_NAMESPACE and
			// PUBLISH_NAMESPACE only; 19 adds SUBSCRIBE_TRACKS.
			not18 bool
		}{
			{"SUBSCRIBE_NAMESPACE", func(id uint64, ns wire.Namespace) wire.Message {
				return &wire.SubscribeNamespace{RequestID: id, TrackNamespacePrefix: ns}
			}, overlapping, wire.ReqPrefixOverlap, false},
			{"SUBSCRIBE_TRACKS", func(id uint64, ns wire.Namespace) wire.Message {
				return &wire.SubscribeTracks{RequestID: id, TrackNamespacePrefix: ns}
			}, overlapping, wire.ReqPrefixOverlap, true},
			{"PUBLISH_NAMESPACE", func(id uint64, ns wire.Namespace) wire.Message {
				return &wire.PublishNamespace{RequestID: id, TrackNamespace: ns}
			}, wire.Params{AuthorizationTokens: toks(tokVal("t"), tokVal("t"))}, wire.ReqMalformedAuthToken, false},
		} {
			if tc.not18 && draftOf(t) == wire.Draft18 {
				continue
			}
			forServerSessions(t, tc.name, func(t *testing.T, connect fakeConnector) {
				h, ah := newNSServer(), newAnnounceServer(wire.Params{})
				mux := namespaceMux(h, ah)
				s, fp := connect(t, &Config{Handler: mux, MaxAuthTokenCacheSize: 100})
				_, announce := tc.open(0, nil).(*wire.PublishNamespace)
				// The requests' Contexts, in the order the requests are made.
				reqCtx := func() context.Context {
					if announce {
						return recvOrFail(t, ah.reqs).Context()
					}
					return recvOrFail(t, h.reqs).Context()
				}
				first := fp.open(tc.open(0, wire.NewNamespace("a")))
				expect[*wire.RequestOK](first)
				reqCtx()
				fs := fp.open(tc.open(2, wire.NewNamespace("b")))
				expect[*wire.RequestOK](fs)
				ctx := reqCtx()
				fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: tc.update})
				re := expect[*wire.RequestError](fs)
				assert.Equal(t, tc.code, re.ErrorCode)
				fs.expectFIN()
				closedOrFail(t, ctx.Done(), "the refused request's Context")
				var rerr *RequestError
				require.ErrorAs(t, context.Cause(ctx), &rerr)
				assert.Equal(t, tc.code, rerr.Code)
				// The other request is untouched, and its update accepted.
				first.send(&wire.RequestUpdate{RequestID: 6})
				expect[*wire.RequestOK](first)
				assert.NoError(t, s.Context().Err())
			})
		}
	})
}

// The requester's end of a refused update: Update returns the
// *RequestError, and the subscription ends with it, after Done for every
// active namespace.
func TestNamespaceUpdateRefused(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newNSServer()
		p := connect(t, &Config{Handler: h}, nil)
		ctx := testCtx(t, 10*time.Second)
		a, err := p.client.SubscribeNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
		require.NoError(t, err)
		recvOrFail(t, h.writers)
		b, err := p.client.SubscribeNamespace(ctx, wire.NewNamespace("b"), wire.Params{})
		require.NoError(t, err)
		wb := recvOrFail(t, h.writers)
		require.NoError(t, wb.Publish(wire.NewNamespace("b", "1")))
		assert.Equal(t, nsEvent(false, "b", "1"), next(t, ctx, b))

		err = b.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("a", "x"))})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqPrefixOverlap, re.Code)
		assert.Equal(t, nsEvent(true, "b", "1"), next(t, ctx, b))
		_, err = b.Next(ctx)
		assert.ErrorAs(t, err, &re)
		assert.ErrorAs(t, b.Update(ctx, wire.Params{}), &re, "the subscription is over")
		require.NoError(t, a.Update(ctx, wire.Params{}))
		require.NoError(t, a.Close())
	})
}

// A requester that does not read its response stream holds no one up:
// the writer's methods return at once, and once the requester has read
// nothing for SubscriberGrace the stream is reset with TOO_FAR_BEHIND
// (§9.15). In a bubble the Publish calls all come before the grace ends;
// over a real transport on a busy machine the grace may end while they
// go on, and the rest fail with the request's end.
func TestNamespaceWriterStalledRequester(t *testing.T) {
	forServerSessions(t, "stalled", func(t *testing.T, connect fakeConnector) {
		h := newNSServer()
		s, fp := connect(t, &Config{Handler: h, SubscriberGrace: 300 * time.Millisecond})
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: nil})
		expect[*wire.RequestOK](fs)
		req, w := recvOrFail(t, h.reqs), recvOrFail(t, h.writers)
		field := string(bytes.Repeat([]byte("x"), 3000))
		published := goErr(func() error {
			for i := range 1000 {
				if err := w.Publish(wire.NewNamespace(fmt.Sprint(i), field)); err != nil {
					return err
				}
			}
			return nil
		})
		perr := recvOrFail(t, published) // none of them blocked
		closedOrFail(t, req.Context().Done(), "the stalled request")
		cause := context.Cause(req.Context())
		if perr != nil {
			require.False(t, bubbled(), "Publish failed before the grace ended: %v", perr)
			require.ErrorIs(t, perr, cause, "Publish failed otherwise than by the request's end")
		}
		assert.ErrorIs(t, w.Publish(wire.NewNamespace("late")), cause)
		// What was written can still be read; then the reset.
		for {
			_, err := fs.readErr()
			if err == nil {
				continue
			}
			var se *transport.StreamError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, uint64(wire.ResetTooFarBehind), se.Code)
			break
		}
		assert.NoError(t, s.Context().Err())
	})
}

// A REQUEST_UPDATE that arrives before the Handler's answer is answered
// after it, in order (§9.5).
func TestNamespaceUpdateBeforeAnswer(t *testing.T) {
	forServerSessions(t, "early update", func(t *testing.T, connect fakeConnector) {
		release := make(chan struct{})
		writers := make(chan *NamespaceWriter, 1)
		h := HandlerFunc(func(r Request) {
			<-release
			w, err := r.(*SubscribeNamespaceRequest).Accept(wire.Params{})
			if assert.NoError(t, err) {
				writers <- w
			}
		})
		_, fp := connect(t, &Config{Handler: h})
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a")})
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("b"))}})
		close(release)
		expect[*wire.RequestOK](fs) // the answer
		expect[*wire.RequestOK](fs) // the update's
		w := recvOrFail(t, writers)
		settle(t, func() bool { return w.Prefix().Equal(wire.NewNamespace("b")) }, "prefix not updated")
		require.NoError(t, w.Publish(wire.NewNamespace("b", "1")))
		assert.True(t, expect[*wire.NamespaceMsg](fs).TrackNamespaceSuffix.Equal(wire.NewNamespace("1")))
	})
}

// Everything a session's namespace requests hold is released when it
// ends: announcements and subscriptions end with the session's error, the
// writers' goroutines and the prefix claims go (the goroutine-leak check
// of newPair and TestMain sees the rest).
func TestNamespaceReleasedAtSessionEnd(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h, ah := newNSServer(), newAnnounceServer(wire.Params{Expires: wire.Some[uint64](60_000)})
		mux := namespaceMux(h, ah)
		p := connect(t, &Config{Handler: mux}, nil)
		ctx := testCtx(t, 10*time.Second)
		pub, err := p.client.PublishNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
		require.NoError(t, err)
		sub, err := p.client.SubscribeNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
		require.NoError(t, err)
		w := recvOrFail(t, h.writers)
		tracks, err := p.client.SubscribeTracks(ctx, wire.NewNamespace("a"), wire.Params{})
		require.NoError(t, err)
		ann := recvOrFail(t, ah.anns)
		require.NoError(t, w.Publish(wire.NewNamespace("a", "1")))
		assert.Equal(t, nsEvent(false, "a", "1"), next(t, ctx, sub))
		assert.Equal(t, 2, p.server.nsPrefixes.count())

		p.client.Close()
		waitDone(t, ctx, pub.Done(), "publisher's announcement")
		waitDone(t, ctx, ann.Done(), "subscriber's announcement")
		assert.Equal(t, nsEvent(true, "a", "1"), next(t, ctx, sub))
		_, err = sub.Next(ctx)
		var se *SessionError
		assert.ErrorAs(t, err, &se)
		_, err = tracks.Next(ctx)
		assert.ErrorAs(t, err, &se)
		settle(t, func() bool { return p.server.nsPrefixes.count() == 0 }, "prefix claims left")
		assert.ErrorAs(t, pub.Err(), &se)
		assert.Error(t, ann.Err()) // over WebTransport the streams may be reset before the session is seen closed
		closedOrFail(t, w.srv.done, "the writer")
	})
}

// TestNamespaceWriterOfferedBounded: what a SUBSCRIBE_NAMESPACE's writer
// remembers as offered is held for the requester until the request ends,
// and counts against the session's backlog budget as its queue does.
// Before, only the queue counted: a requester that read every NAMESPACE
// still made the writer keep a copy and a key of every namespace published,
// without bound; through moqt relay, 300 such requesters of the empty prefix
// and 500 announced namespaces of 3.9 KB held 1.7 GB.
func TestNamespaceWriterOfferedBounded(t *testing.T) {
	forServerSessions(t, "offered", func(t *testing.T, connect fakeConnector) {
		h := newNSServer()
		s, fp := connect(t, &Config{Handler: h, MaxSessionBacklog: 64 << 10})
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: nil})
		expect[*wire.RequestOK](fs)
		req, w := recvOrFail(t, h.reqs), recvOrFail(t, h.writers)
		field := string(bytes.Repeat([]byte("x"), 3000))
		published := 0
		var perr error
		for i := range 100 {
			if perr = w.Publish(wire.NewNamespace(fmt.Sprint(i), field)); perr != nil {
				break
			}
			published++
			expect[*wire.NamespaceMsg](fs) // read at once: the queue is empty again
		}
		require.Error(t, perr, "every namespace was kept")
		assert.Less(t, published, 12, "64 KiB hold about ten of them")
		closedOrFail(t, req.Context().Done(), "the request")
		assert.ErrorIs(t, context.Cause(req.Context()), errExcessiveLoad)
		fs.expectReset(wire.ResetExcessiveLoad)
		assert.NoError(t, s.Context().Err(), "the session goes on")
	})
}
