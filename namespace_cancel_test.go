package moqt

import (
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
		fs.stopSending(wire.ResetCancelled)
		assert.Equal(t, nsEvent(true, "p", "a"), next(t, ctx, sub))
		_, err := sub.Next(ctx)
		assert.ErrorIs(t, err, ErrCancelled)
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
