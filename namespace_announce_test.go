package moqt

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// announceServer is a Handler that accepts every PUBLISH_NAMESPACE but
// those of refuse, granting grant, and hands the requests and their
// Announcements to the test.
type announceServer struct {
	grant  wire.Params
	refuse wire.Namespace
	reqs   chan *PublishNamespaceRequest
	anns   chan *Announcement
}

func newAnnounceServer(grant wire.Params) *announceServer {
	return &announceServer{grant: grant, reqs: make(chan *PublishNamespaceRequest, 4), anns: make(chan *Announcement, 4)}
}

func (h *announceServer) ServeMOQT(r Request) {
	pr, ok := r.(*PublishNamespaceRequest)
	if !ok {
		DefaultHandler.ServeMOQT(r)
		return
	}
	if h.refuse != nil && pr.Namespace.Equal(h.refuse) {
		_ = pr.Reject(wire.ReqUninterested, "not here")
		return
	}
	a, err := pr.Accept(h.grant)
	if err == nil {
		h.reqs <- pr
		h.anns <- a
	}
}

// PUBLISH_NAMESPACE end to end: accepted, updated, withdrawn by the
// publisher, revoked by the subscriber, refused.
func TestNamespaceAnnounce(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAnnounceServer(wire.Params{})
		h.refuse = wire.NewNamespace("nope")
		p := connect(t, &Config{Handler: h}, nil)
		ctx := testCtx(t, 10*time.Second)
		ns := wire.NewNamespace("live", "a")

		pub, err := p.client.PublishNamespace(ctx, ns, wire.Params{})
		require.NoError(t, err)
		assert.True(t, pub.Namespace.Equal(ns))
		req := recvOrFail(t, h.reqs)
		sub := recvOrFail(t, h.anns)
		assert.True(t, req.Namespace.Equal(ns))
		assert.True(t, sub.Namespace.Equal(ns))
		require.NoError(t, pub.Update(ctx, wire.Params{}))
		assert.Error(t, sub.Update(ctx, wire.Params{}), "only the publisher updates")
		assert.NoError(t, sub.Err())

		// Withdrawn by the publisher.
		require.NoError(t, pub.Close())
		waitDone(t, ctx, sub.Done(), "the subscriber's announcement")
		assert.ErrorIs(t, sub.Err(), ErrCancelled)
		waitDone(t, ctx, req.Context().Done(), "the request's Context")
		assert.ErrorIs(t, pub.Err(), ErrCancelled)

		// Revoked by the subscriber.
		pub, err = p.client.PublishNamespace(ctx, ns, wire.Params{})
		require.NoError(t, err)
		<-h.reqs
		sub = recvOrFail(t, h.anns)
		require.NoError(t, sub.Close())
		waitDone(t, ctx, pub.Done(), "the publisher's announcement")
		assert.ErrorIs(t, pub.Err(), ErrCancelled)
		assert.ErrorIs(t, pub.Update(ctx, wire.Params{}), ErrCancelled)

		// The .session namespace is the implementation's (§6.5).
		_, err = p.client.PublishNamespace(ctx, wire.NewNamespace(".session", "x"), wire.Params{})
		assert.ErrorIs(t, err, errSessionNamespacePublish)

		// Refused.
		_, err = p.client.PublishNamespace(ctx, wire.NewNamespace("nope"), wire.Params{})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqUninterested, re.Code)

		// DefaultHandler, on the client, is not interested.
		_, err = p.server.PublishNamespace(ctx, ns, wire.Params{})
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqUninterested, re.Code)
		assert.NoError(t, p.client.Context().Err())
		settle(t, func() bool { return len(p.server.requests.snapshot()) == 0 && len(p.client.requests.snapshot()) == 0 }, "requests left open")
	})
}

// A granted EXPIRES ends the announcement when it passes (§9.20.17),
// unless an update extends it: its REQUEST_OK grants the same EXPIRES
// again.
func TestNamespaceAnnounceExpires(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAnnounceServer(wire.Params{Expires: wire.Some[uint64](300)})
		p := connect(t, &Config{Handler: h}, nil)
		ctx := testCtx(t, 10*time.Second)
		pub, err := p.client.PublishNamespace(ctx, wire.NewNamespace("live"), wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, wire.Some[uint64](300), pub.Params.Expires)
		sub := recvOrFail(t, h.anns)

		time.Sleep(200 * time.Millisecond)
		pub.Params.Expires = wire.Opt[uint64]{}
		require.NoError(t, pub.Update(ctx, wire.Params{}))
		assert.Equal(t, wire.Some[uint64](300), pub.Params.Expires, "the update's REQUEST_OK grants EXPIRES again")
		time.Sleep(200 * time.Millisecond) // past the first expiry, within the second
		assert.NoError(t, sub.Err())
		assert.NoError(t, pub.Err())

		waitDone(t, ctx, sub.Done(), "the expired announcement")
		assert.ErrorIs(t, sub.Err(), errExpired)
		waitDone(t, ctx, pub.Done(), "the publisher's announcement")
		assert.ErrorIs(t, pub.Err(), ErrCancelled)
	})
}

// The requester's FIN is not a withdrawal (§6.4.2.2); the subscriber's
// FIN after REQUEST_OK ends the announcement with io.EOF.
func TestNamespaceAnnounceFIN(t *testing.T) {
	forServerSessions(t, "publisher FIN", func(t *testing.T, connect fakeConnector) {
		h := newAnnounceServer(wire.Params{})
		_, fp := connect(t, &Config{Handler: h})
		fs := fp.open(&wire.PublishNamespace{RequestID: 0, TrackNamespace: wire.NewNamespace("a")})
		expect[*wire.RequestOK](fs)
		sub := recvOrFail(t, h.anns)
		fs.fin()
		settle(t, func() bool { return sub.Err() == nil }, "the publisher's FIN ended the announcement")
		// Having sent FIN, the publisher withdraws with STOP_SENDING (§6.4.2.3).
		fs.stopSending(wire.ResetCancelled)
		closedOrFail(t, sub.Done(), "announcement after the publisher's STOP_SENDING")
		assert.ErrorIs(t, sub.Err(), ErrCancelled)
	})
	forClientSessions(t, "subscriber FIN", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		ctx := testCtx(t, 10*time.Second)
		done := make(chan *Announcement, 1)
		go func() {
			a, err := s.PublishNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
			assert.NoError(t, err)
			done <- a
		}()
		fs := fp.accept()
		expect[*wire.PublishNamespace](fs)
		fs.send(&wire.RequestOK{})
		a := recvOrFail(t, done)
		fs.fin()
		closedOrFail(t, a.Done(), "announcement after the subscriber's FIN")
		assert.ErrorIs(t, a.Err(), io.EOF)
		fs.expectFIN()
	})
}
