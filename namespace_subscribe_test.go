package moqt

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// nsServer is a Handler that accepts every SUBSCRIBE_NAMESPACE and
// SUBSCRIBE_TRACKS, granting grant, and hands the requests and their
// writers to the test; onTracks, if set, runs for a SUBSCRIBE_TRACKS once
// accepted.
type nsServer struct {
	grant    wire.Params
	onTracks func(r *SubscribeNamespaceRequest, w *NamespaceWriter)
	reqs     chan *SubscribeNamespaceRequest
	writers  chan *NamespaceWriter
}

func newNSServer() *nsServer {
	return &nsServer{reqs: make(chan *SubscribeNamespaceRequest, 8), writers: make(chan *NamespaceWriter, 8)}
}

func (h *nsServer) ServeMOQT(r Request) {
	sr, ok := r.(*SubscribeNamespaceRequest)
	if !ok {
		DefaultHandler.ServeMOQT(r)
		return
	}
	w, err := sr.Accept(h.grant)
	if err != nil {
		return
	}
	if sr.Tracks && h.onTracks != nil {
		h.onTracks(sr, w)
	}
	h.reqs <- sr
	h.writers <- w
}

// next requires the next event of sub.
func next(t *testing.T, ctx context.Context, sub *NamespaceSubscription) NamespaceEvent {
	t.Helper()
	ev, err := sub.Next(ctx)
	require.NoError(t, err)
	return ev
}

func nsEvent(done bool, fields ...string) NamespaceEvent {
	return NamespaceEvent{Namespace: wire.NewNamespace(fields...), Done: done}
}

// SUBSCRIBE_NAMESPACE end to end: NAMESPACE and NAMESPACE_DONE for what
// falls under the prefix, a TRACK_NAMESPACE_PREFIX update (§9.5.2), and
// the stream's end reported as Done for every namespace still active
// (§9.15).
func TestNamespaceSubscribe(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newNSServer()
		p := connect(t, &Config{Handler: h}, nil)
		ctx := testCtx(t, 10*time.Second)

		sub, err := p.client.SubscribeNamespace(ctx, wire.NewNamespace("live"), wire.Params{})
		require.NoError(t, err)
		req, w := recvOrFail(t, h.reqs), recvOrFail(t, h.writers)
		assert.False(t, req.Tracks)
		assert.True(t, req.Prefix.Equal(wire.NewNamespace("live")))
		require.ErrorIs(t, w.Skip(wire.FullTrackName{Namespace: wire.NewNamespace("live"), Name: []byte("x")}), errNotTracks)

		require.ErrorIs(t, w.Publish(wire.NewNamespace(".session")), errSessionNamespacePublish)
		require.NoError(t, w.Publish(wire.NewNamespace("live", "a")))
		require.NoError(t, w.Publish(wire.NewNamespace("vod", "x"))) // not under the prefix: offered only
		require.NoError(t, w.Publish(wire.NewNamespace("live", "b")))
		require.NoError(t, w.Publish(wire.NewNamespace("live", "b"))) // idempotent
		require.NoError(t, w.Done(wire.NewNamespace("vod", "never-offered")))
		require.NoError(t, w.Done(wire.NewNamespace("live", "a")))
		assert.Equal(t, nsEvent(false, "live", "a"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(false, "live", "b"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(true, "live", "a"), next(t, ctx, sub))

		// The prefix moves to (vod): (live, b) is no longer under it, and
		// (vod, x), offered before, is sent now.
		require.NoError(t, sub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("vod"))}))
		assert.True(t, sub.Prefix().Equal(wire.NewNamespace("vod")))
		assert.True(t, w.Prefix().Equal(wire.NewNamespace("vod")))
		assert.Equal(t, nsEvent(true, "live", "b"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(false, "vod", "x"), next(t, ctx, sub))
		require.NoError(t, w.Publish(wire.NewNamespace("live", "c"))) // not under (vod)
		require.NoError(t, w.Publish(wire.NewNamespace("vod", "y", "z")))
		assert.Equal(t, nsEvent(false, "vod", "y", "z"), next(t, ctx, sub))

		// The responder ends it: every active namespace is reported Done,
		// then the reset.
		w.End(wire.ResetInternalError)
		assert.Equal(t, nsEvent(true, "vod", "x"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(true, "vod", "y", "z"), next(t, ctx, sub))
		_, err = sub.Next(ctx)
		var se *StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.ResetInternalError, se.Code)
		assert.Error(t, w.Publish(wire.NewNamespace("vod", "q")), "the writer is over")
		waitDone(t, ctx, req.Context().Done(), "the request's Context")
		settle(t, func() bool { return p.server.nsPrefixes.count() == 0 }, "prefix claim left")
	})
}

// Close cancels the request: the responder's writer ends, its request's
// Context with a cause wrapping ErrCancelled, and Next returns at once.
func TestNamespaceSubscribeClose(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newNSServer()
		p := connect(t, &Config{Handler: h}, nil)
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.SubscribeNamespace(ctx, nil, wire.Params{})
		require.NoError(t, err)
		req, w := recvOrFail(t, h.reqs), recvOrFail(t, h.writers)
		require.NoError(t, w.Publish(wire.NewNamespace("a")))
		assert.Equal(t, nsEvent(false, "a"), next(t, ctx, sub))

		nextErr := goErr(func() error { _, err := sub.Next(ctx); return err })
		require.NoError(t, sub.Close())
		assert.ErrorIs(t, recvOrFail(t, nextErr), ErrCancelled)
		waitDone(t, ctx, req.Context().Done(), "the request's Context")
		assert.ErrorIs(t, context.Cause(req.Context()), ErrCancelled)
		settle(t, func() bool { return w.Publish(wire.NewNamespace("b")) != nil }, "writer still usable")

		// The prefix is free again once the responder has seen the
		// cancellation (it travels on the old stream, the new request on
		// another: until then the claim stands).
		settle(t, func() bool { return p.server.nsPrefixes.count() == 0 }, "prefix claim left")
		sub, err = p.client.SubscribeNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
		require.NoError(t, err)
		require.NoError(t, sub.Close())
	})
}

// SUBSCRIBE_TRACKS end to end: the responder's handler sends a PUBLISH for
// a track under the prefix (LocalTrack.Publish on the request's Session),
// which reaches the requester's Handler, and a PUBLISH_SKIPPED for
// another.
func TestNamespaceSubscribeTracks(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track := wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}
		skipped := wire.FullTrackName{Namespace: wire.NewNamespace("live", "mic"), Name: []byte("audio")}
		h := newNSServer()
		published := make(chan error, 1)
		h.onTracks = func(r *SubscribeNamespaceRequest, w *NamespaceWriter) {
			lt, err := NewLocalTrack(track, nil)
			if err == nil {
				_, err = lt.Publish(r.Context(), r.Session(), wire.Params{}, AcceptOptions{})
			}
			published <- err
			assert.ErrorIs(t, w.Publish(track.Namespace), errNotNamespace)
			assert.ErrorIs(t, w.Done(track.Namespace), errNotNamespace)
			assert.Error(t, w.Skip(wire.FullTrackName{Namespace: wire.NewNamespace("vod"), Name: []byte("x")}), "not under the prefix")
			assert.NoError(t, w.Skip(skipped))
		}
		client := newAcceptAll()
		p := connect(t, &Config{Handler: h}, &Config{Handler: client})
		ctx := testCtx(t, 10*time.Second)

		sub, err := p.client.SubscribeTracks(ctx, wire.NewNamespace("live"), wire.Params{Forward: wire.Some(true)})
		require.NoError(t, err)
		req := recvOrFail(t, h.reqs)
		assert.True(t, req.Tracks)
		assert.Equal(t, wire.Some(true), req.Params.Forward)
		require.NoError(t, recvOrFail(t, published))
		got := recvOrFail(t, client.subs)
		assert.True(t, got.Track().Equal(track))
		ev := next(t, ctx, sub)
		assert.Equal(t, NamespaceEvent{Namespace: skipped.Namespace, Skipped: true, TrackName: skipped.Name}, ev)

		// SUBSCRIBE_TRACKS and SUBSCRIBE_NAMESPACE have separate overlap
		// spaces (§9.15, §9.18).
		nsub, err := p.client.SubscribeNamespace(ctx, wire.NewNamespace("live"), wire.Params{})
		require.NoError(t, err)
		require.NoError(t, nsub.Close())
		require.NoError(t, sub.Close())
	})
}

// The responder's FIN after REQUEST_OK ends the subscription: Done for
// every active namespace, then io.EOF.
func TestNamespaceSubscribeFIN(t *testing.T) {
	forClientSessions(t, "FIN", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		ctx := testCtx(t, 10*time.Second)
		fs, subc, _ := fakeNSRequest(t, s, fp, false, wire.NewNamespace("p"))
		fs.send(&wire.RequestOK{Parameters: wire.Params{Expires: wire.Some[uint64](5000)}})
		sub := recvOrFail(t, subc)
		assert.Equal(t, wire.Some[uint64](5000), sub.Params.Expires)
		fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")})
		fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("a")}) // a duplicate is no news
		fs.send(&wire.NamespaceMsg{TrackNamespaceSuffix: wire.NewNamespace("b")})
		fs.fin()
		assert.Equal(t, nsEvent(false, "p", "a"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(false, "p", "b"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(true, "p", "a"), next(t, ctx, sub))
		assert.Equal(t, nsEvent(true, "p", "b"), next(t, ctx, sub))
		_, err := sub.Next(ctx)
		assert.ErrorIs(t, err, io.EOF)
		fs.expectFIN()
		assert.NoError(t, s.Context().Err())
	})
}

// A SUBSCRIBE_NAMESPACE granted EXPIRES ends when it passes (§9.20.17)
// unless an update renews it; the requester sees the grant in Params.
func TestNamespaceSubscribeExpires(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newNSServer()
		h.grant = wire.Params{Expires: wire.Some[uint64](300)}
		p := connect(t, &Config{Handler: h}, nil)
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.SubscribeNamespace(ctx, wire.NewNamespace("a"), wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, wire.Some[uint64](300), sub.Params.Expires)
		req, w := recvOrFail(t, h.reqs), recvOrFail(t, h.writers)
		require.NoError(t, w.Publish(wire.NewNamespace("a", "1")))
		assert.Equal(t, nsEvent(false, "a", "1"), next(t, ctx, sub))
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, sub.Update(ctx, wire.Params{}))
		time.Sleep(200 * time.Millisecond) // past the first expiry, within the second
		assert.NoError(t, req.Context().Err())

		waitDone(t, ctx, req.Context().Done(), "the expired request")
		assert.ErrorIs(t, context.Cause(req.Context()), errExpired)
		assert.Equal(t, nsEvent(true, "a", "1"), next(t, ctx, sub))
		_, err = sub.Next(ctx)
		assert.ErrorIs(t, err, ErrCancelled)
	})
}

// ServeMux routes namespace requests by their namespace or prefix, field
// by field; what no prefix matches gets DefaultHandler's refusal.
func TestNamespaceRequestsRouted(t *testing.T) {
	forServerSessions(t, "mux", func(t *testing.T, connect fakeConnector) {
		live := newNSServer()
		ann := newAnnounceServer(wire.Params{})
		mux := NewServeMux()
		mux.HandleFunc(wire.NewNamespace("live"), func(r Request) {
			if _, ok := r.(*PublishNamespaceRequest); ok {
				ann.ServeMOQT(r)
				return
			}
			live.ServeMOQT(r)
		})
		_, fp := connect(t, &Config{Handler: mux})
		expect[*wire.RequestOK](fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("live", "a")}))
		expect[*wire.RequestOK](fp.open(&wire.SubscribeTracks{RequestID: 2, TrackNamespacePrefix: wire.NewNamespace("live")}))
		expect[*wire.RequestOK](fp.open(&wire.PublishNamespace{RequestID: 4, TrackNamespace: wire.NewNamespace("live", "b")}))
		for _, tc := range []struct {
			m    wire.Message
			code wire.RequestErrorCode
		}{
			{&wire.SubscribeNamespace{RequestID: 6, TrackNamespacePrefix: wire.NewNamespace("livestock")}, wire.ReqDoesNotExist},
			// The empty prefix overlaps (live, a): refused before routing.
			{&wire.SubscribeNamespace{RequestID: 8, TrackNamespacePrefix: nil}, wire.ReqPrefixOverlap},
			{&wire.SubscribeTracks{RequestID: 10, TrackNamespacePrefix: wire.NewNamespace("vod")}, wire.ReqDoesNotExist},
			{&wire.PublishNamespace{RequestID: 12, TrackNamespace: wire.NewNamespace("vod")}, wire.ReqUninterested},
		} {
			assert.Equal(t, tc.code, expect[*wire.RequestError](fp.open(tc.m)).ErrorCode, "%s", tc.m.Type())
		}
	})
}
