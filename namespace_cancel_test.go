package moqt

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// A responder's STOP_SENDING alone, without a reset of its direction,
// cancels a namespace request this end sent (§6.4.2.3, §4.1): the request
// ends with a cause wrapping ErrCancelled, and this end resets its
// direction in turn (the fake, having stopped reading, sees its STOP_SENDING).
func TestNamespaceRequesterStopSending(t *testing.T) {
	forClientSessions(t, "SUBSCRIBE_NAMESPACE", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		ctx := testCtx(t, 10*time.Second)
		fs, subc, _ := fakeNSRequest(t, s, fp, false, wire.NewNamespace("p"))
		fs.send(&wire.RequestOK{})
		sub := recvOrFail(t, subc)
		fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")})
		assert.Equal(t, nsEvent(false, "p", "a"), next(t, ctx, sub))
		fs.stopSending(wire.ResetExcessiveLoad)
		assert.Equal(t, nsEvent(true, "p", "a"), next(t, ctx, sub))
		_, err := sub.Next(ctx)
		assert.ErrorIs(t, err, ErrCancelled)
		var se *StreamError
		if assert.ErrorAs(t, err, &se) { // the responder's reason
			assert.Equal(t, wire.ResetExcessiveLoad, se.Code)
		}
		fs.expectStopSending(wire.ResetCancelled)
		assert.NoError(t, s.Context().Err())
	})
	forClientSessions(t, "PUBLISH_NAMESPACE", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		ctx := testCtx(t, 10*time.Second)
		anns := make(chan *Announcement, 1)
		go func() {
			a, err := s.PublishNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
			if assert.NoError(t, err) {
				anns <- a
			}
		}()
		fs := fp.accept()
		expect[*wire.PublishNamespace](fs)
		fs.send(&wire.RequestOK{})
		a := recvOrFail(t, anns)
		fs.stopSending(wire.ResetCancelled)
		waitDone(t, ctx, a.Done(), "the announcement")
		assert.ErrorIs(t, a.Err(), ErrCancelled)
		fs.expectStopSending(wire.ResetCancelled)
	})
	forClientSessions(t, "before the answer", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		fs, _, errc := fakeNSRequest(t, s, fp, true, wire.NewNamespace("p"))
		fs.stopSending(wire.ResetCancelled)
		assert.ErrorIs(t, recvOrFail(t, errc), ErrCancelled)
		fs.expectStopSending(wire.ResetCancelled)
	})
}

// A requester that cancels a namespace request before the Handler has
// answered, by a reset or by STOP_SENDING alone, ends it at once: the
// Handler's Context ends, its late Accept fails, and the prefix the
// request claimed is free, so that the requester's next request for it is
// not refused with PREFIX_OVERLAP while the first Handler still decides.
func TestNamespaceCancelledBeforeAnswer(t *testing.T) {
	for _, how := range []string{"reset", "STOP_SENDING"} {
		forServerSessions(t, how, func(t *testing.T, connect fakeConnector) {
			release := make(chan struct{})
			first := make(chan *SubscribeNamespaceRequest, 1)
			accepted := make(chan error, 1)
			h := HandlerFunc(func(r Request) {
				sr := r.(*SubscribeNamespaceRequest)
				if sr.requestID() == 0 {
					first <- sr
					<-release
					_, err := sr.Accept(wire.Params{})
					accepted <- err
					return
				}
				_, _ = sr.Accept(wire.Params{})
			})
			s, fp := connect(t, &Config{Handler: h})
			fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a")})
			req := recvOrFail(t, first)
			if how == "reset" {
				fs.reset(wire.ResetCancelled)
			} else {
				fs.stopSending(wire.ResetCancelled)
			}
			closedOrFail(t, req.Context().Done(), "the cancelled request's Context")
			assert.ErrorIs(t, context.Cause(req.Context()), ErrCancelled)
			settle(t, func() bool { return s.nsPrefixes.count() == 0 }, "the cancelled request's claim is held")
			again := fp.open(&wire.SubscribeNamespace{RequestID: 2, TrackNamespacePrefix: wire.NewNamespace("a")})
			expect[*wire.RequestOK](again)
			close(release)
			assert.Error(t, recvOrFail(t, accepted), "Accept of a cancelled request")
			assert.NoError(t, s.Context().Err())
		})
	}
}

// The application decides a namespace request's updates (OnUpdate): a
// TRACK_NAMESPACE_PREFIX wider than what it authorized, or a refreshed
// token it refuses, ends the request with its code (§9.15, §9.5.1), and
// the prefix claim goes with it. Updates that came before the Handler's
// answer are decided too, in order, after it.
func TestNamespaceOnUpdate(t *testing.T) {
	forServerSessions(t, "SUBSCRIBE_NAMESPACE", func(t *testing.T, connect fakeConnector) {
		seen := make(chan wire.Namespace, 4)
		release := make(chan struct{})
		h := HandlerFunc(func(r Request) {
			sr := r.(*SubscribeNamespaceRequest)
			sr.OnUpdate = func(u *wire.Params) error {
				p := u.TrackNamespacePrefix
				seen <- p.Value
				if !p.Value.HasPrefix(wire.NewNamespace("a")) {
					return &RequestError{Code: wire.ReqUnauthorized, Reason: "outside (a)"}
				}
				return nil
			}
			<-release
			_, _ = sr.Accept(wire.Params{})
		})
		s, fp := connect(t, &Config{Handler: h})
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a")})
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("a", "b"))}})
		close(release)
		expect[*wire.RequestOK](fs) // the answer
		expect[*wire.RequestOK](fs) // the early update's
		assert.True(t, recvOrFail(t, seen).Equal(wire.NewNamespace("a", "b")))
		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{TrackNamespacePrefix: wire.Some(wire.Namespace{})}})
		assert.Equal(t, wire.ReqUnauthorized, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		assert.Empty(t, recvOrFail(t, seen))
		settle(t, func() bool { return s.nsPrefixes.count() == 0 }, "the refused request's claim is held")
		assert.NoError(t, s.Context().Err())
	})
	forServerSessions(t, "PUBLISH_NAMESPACE", func(t *testing.T, connect fakeConnector) {
		h := HandlerFunc(func(r Request) {
			pr := r.(*PublishNamespaceRequest)
			pr.OnUpdate = func(u *wire.Params) error {
				return &RequestError{Code: wire.ReqExpiredAuthToken, Reason: "token expired"}
			}
			_, _ = pr.Accept(wire.Params{})
		})
		s, fp := connect(t, &Config{Handler: h})
		fs := fp.open(&wire.PublishNamespace{RequestID: 0, TrackNamespace: wire.NewNamespace("a")})
		expect[*wire.RequestOK](fs)
		fs.send(&wire.RequestUpdate{RequestID: 2})
		assert.Equal(t, wire.ReqExpiredAuthToken, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		assert.NoError(t, s.Context().Err())
	})
}

// An Update whose caller gave up stays outstanding until answered, and
// the peer's MAX_REQUEST_UPDATES bounds how many are (§9.1.7): the next
// Update waits for credit instead of exceeding it.
func TestNamespaceUpdateRespectsPeerLimit(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp, dialed := pipeClientDial(t, transport.PipeConfig{WebTransport: tr.wt}, nil)
				fp.readPeerSetup()
				fp.sendSetup(&wire.Setup{MaxRequestUpdates: wire.Some[uint64](1)})
				require.NoError(t, <-dialed)
				fs, subc, _ := fakeNSRequest(t, s, fp, false, wire.NewNamespace("p"))
				fs.send(&wire.RequestOK{})
				sub := recvOrFail(t, subc)

				ctx, cancel := context.WithCancel(fakeCtx(t))
				u1 := goErr(func() error { return sub.Update(ctx, wire.Params{}) })
				expect[*wire.RequestUpdate](fs)
				cancel()
				assert.ErrorIs(t, recvOrFail(t, u1), context.Canceled)

				u2 := goErr(func() error { return sub.Update(fakeCtx(t), wire.Params{}) })
				got := make(chan *wire.RequestUpdate, 1)
				go func() { got <- expect[*wire.RequestUpdate](fs) }()
				synctest.Wait()
				select {
				case <-got:
					require.FailNow(t, "a second REQUEST_UPDATE past the peer's MAX_REQUEST_UPDATES of 1")
				default:
				}
				fs.send(&wire.RequestOK{}) // answers the abandoned one
				recvOrFail(t, got)
				fs.send(&wire.RequestOK{})
				assert.NoError(t, recvOrFail(t, u2))
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// An Update that the peer's flow control holds (it does not read this
// end's direction) returns when its ctx ends, and the subscription, whose
// stream may carry part of the update, is cancelled.
func TestNamespaceUpdateBlockedWrite(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				pc := transport.PipeConfig{WebTransport: tr.wt, StreamWindow: 256, SendBuffer: -1}
				s, fp, dialed := pipeClientDial(t, pc, nil)
				fp.readPeerSetup()
				fp.sendSetup(&wire.Setup{})
				require.NoError(t, <-dialed)
				fs, subc, _ := fakeNSRequest(t, s, fp, false, wire.NewNamespace("p"))
				fs.send(&wire.RequestOK{})
				sub := recvOrFail(t, subc)

				long := make([]string, 20)
				for i := range long {
					long[i] = string(bytes.Repeat([]byte{'x'}, 100))
				}
				ctx, cancel := context.WithCancel(fakeCtx(t))
				u := goErr(func() error {
					return sub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace(long...))})
				})
				synctest.Wait() // the write is held
				cancel()
				assert.ErrorIs(t, recvOrFail(t, u), context.Canceled)
				_, err := sub.Next(fakeCtx(t))
				assert.ErrorIs(t, err, context.Canceled)
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// A requester may FIN right after its SUBSCRIBE_NAMESPACE (§6.4.2.2): that
// is no cancellation, and the request is served as long as the responder
// keeps it, here until the Handler's NamespaceWriter ends it.
func TestNamespaceRequesterFINAfterRequest(t *testing.T) {
	forServerSessions(t, "FIN", func(t *testing.T, connect fakeConnector) {
		h := newNSServer()
		s, fp := connect(t, &Config{Handler: h})
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("a")})
		fs.fin()
		expect[*wire.RequestOK](fs)
		w := recvOrFail(t, h.writers)
		require.NoError(t, w.Publish(wire.NewNamespace("a", "1")))
		assert.True(t, expect[*wire.NamespaceMsg](fs).TrackNamespaceSuffix.Equal(wire.NewNamespace("1")))
		require.NoError(t, w.Done(wire.NewNamespace("a", "1")))
		expect[*wire.NamespaceDone](fs)
		w.End(wire.ResetInternalError)
		fs.expectReset(wire.ResetInternalError)
		settle(t, func() bool { return s.nsPrefixes.count() == 0 }, "claim held")
		assert.NoError(t, s.Context().Err())
	})
}
