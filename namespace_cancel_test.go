package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
