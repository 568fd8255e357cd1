package moqt

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/wire"
)

// GOAWAY, Shutdown and closing (§6.6, §9.2).

// A GOAWAY on the control stream stops new requests to the peer; existing
// ones go on.
func TestGoawayReceivedRefusesNewRequests(t *testing.T) {
	// The fake's GOAWAY has no Request ID, which 18 requires
	// (TestGoawayRequestIDReceived).
	forDrafts(t, newerDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fp.sendControl(&wire.Goaway{NewSessionURI: "moqt://elsewhere/live", Timeout: 5000})
		closedOrFail(t, s.GoingAway(), "GOAWAY not seen")
		assert.Equal(t, "moqt://elsewhere/live", s.GoawayURI())

		ctx := fakeCtx(t)
		_, err := s.Subscribe(ctx, trackB, wire.Params{})
		assert.ErrorIs(t, err, ErrGoingAway)
		_, err = s.TrackStatus(ctx, trackB, wire.Params{})
		assert.ErrorIs(t, err, ErrGoingAway)
		_, err = publishLocal(ctx, s, trackB, wire.Params{}, nil)
		assert.ErrorIs(t, err, ErrGoingAway)

		// The existing subscription is unaffected.
		upd := goErr(func() error { return sub.Update(ctx, wire.Params{Forward: wire.Some(false)}) })
		expect[*wire.RequestUpdate](fs)
		fs.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, upd))
		assert.NoError(t, s.Context().Err())
	})
}

// Shutdown sends GOAWAY, refuses new requests with GOING_AWAY, and once
// the open requests are done waits for the peer to close the session.
func TestShutdownDrains(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		s, fp := serverSession(t, &Config{Handler: h})
		old := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](old)
		ss := recvOrFail(t, served)

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := goErr(func() error { return s.Shutdown(ctx, "moqt://next/live") })
		g, ok := fp.readControl().(*wire.Goaway)
		require.True(t, ok)
		assert.Equal(t, "moqt://next/live", g.NewSessionURI)
		assert.Greater(t, g.Timeout, uint64(0))
		assert.LessOrEqual(t, g.Timeout, uint64(5000))

		fs := fp.open(subscribeMsg(2, trackB, wire.Params{}))
		assert.Equal(t, wire.ReqGoingAway, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		fs.fin()

		require.NoError(t, ss.End(wire.DoneGoingAway, "bye"))
		// The last message reaches the subscriber before the close: the
		// request is open until the subscriber finishes its direction too.
		assert.Equal(t, wire.DoneGoingAway, expect[*wire.PublishDone](old).StatusCode)
		old.expectFIN()
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned with a request open: %v", err)
		default:
		}
		old.fin()
		fp.alive(4) // the session waits for the peer to close it
		fp.closeSession()
		assert.NoError(t, recvOrFail(t, done))
		se := expectSessionError(t, s, wire.NoError)
		assert.True(t, se.Remote)
	})
}

// With nothing open Shutdown still waits for the peer to close: closing
// first could cut the GOAWAY and its URI short, since a QUIC close
// discards stream data not yet read. A peer that does not close is closed
// with NO_ERROR, not GOAWAY_TIMEOUT, when the context ends.
func TestShutdownIdleWaitsForPeerClose(t *testing.T) {
	t.Run("peer closes", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			done := goErr(func() error { return s.Shutdown(fakeCtx(t), "moqt://next/") })
			g, ok := fp.readControl().(*wire.Goaway)
			require.True(t, ok)
			assert.Equal(t, "moqt://next/", g.NewSessionURI)
			fp.closeSession()
			assert.NoError(t, recvOrFail(t, done))
			expectSessionError(t, s, wire.NoError)
		})
	})
	t.Run("peer stays", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			ctx, cancel := context.WithCancel(fakeCtx(t))
			done := goErr(func() error { return s.Shutdown(ctx, "") })
			_, ok := fp.readControl().(*wire.Goaway)
			require.True(t, ok)
			cancel()
			assert.NoError(t, recvOrFail(t, done))
			fp.expectClose(wire.NoError)
			se := expectSessionError(t, s, wire.NoError)
			assert.False(t, se.Remote)
		})
	})
}

// An endpoint that receives GOAWAY closes the session with NO_ERROR once
// nothing is open (§6.6.1), so the peer's drain ends.
func TestGoawayReceiverClosesWhenIdle(t *testing.T) {
	forDrafts(t, newerDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		fp.sendControl(&wire.Goaway{NewSessionURI: "moqt://next/"})
		closedOrFail(t, s.GoingAway(), "GOAWAY not seen")
		fp.alive(1) // a subscription is open: the session stays
		assert.NoError(t, s.Context().Err())
		fs.send(&wire.PublishDone{StatusCode: wire.DoneGoingAway})
		fs.fin()
		fp.expectClose(wire.NoError)
		se := expectSessionError(t, s, wire.NoError)
		assert.False(t, se.Remote)
		assert.Equal(t, "moqt://next/", s.GoawayURI())
	})
}

// A subscriber's cancellation is the end of a request too.
func TestShutdownDrainsOnCancel(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		s, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		done := goErr(func() error { return s.Shutdown(fakeCtx(t), "") })
		_, ok := fp.readControl().(*wire.Goaway)
		require.True(t, ok)
		fs.cancel()
		fp.alive(2)
		fp.closeSession()
		assert.NoError(t, recvOrFail(t, done))
	})
}

// When the drain outlasts Shutdown's context the session closes with
// GOAWAY_TIMEOUT.
func TestShutdownTimeout(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		h, _ := servedCh(AcceptOptions{})
		s, fp := serverSession(t, &Config{Handler: h})
		expect[*wire.SubscribeOK](fp.open(subscribeMsg(0, trackA, wire.Params{})))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx, ""))
		// (TestShutdownDrains reads the GOAWAY; here the close may overtake
		// it on a slow machine.)
		fp.expectClose(wire.GoawayTimeout)
		expectSessionError(t, s, wire.GoawayTimeout)
	})
}

// A client always sends an empty New Session URI (§9.2).
func TestGoawayClientSendsEmptyURI(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		done := goErr(func() error { return s.Shutdown(fakeCtx(t), "moqt://ignored/") })
		g, ok := fp.readControl().(*wire.Goaway)
		require.True(t, ok)
		assert.Empty(t, g.NewSessionURI)
		fs.send(&wire.PublishDone{StatusCode: wire.DoneGoingAway})
		fs.fin()
		fs.expectFIN()
		fp.closeSession()
		assert.NoError(t, recvOrFail(t, done))
	})
}

// A New Session URI too long for a GOAWAY (§9.2) fails Shutdown before the
// session counts as going away: the peer's requests are served as before,
// and a Shutdown with a good URI still sends its GOAWAY.
func TestShutdownURITooLong(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := serverSession(t, &Config{Handler: HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqDoesNotExist, "") })})
		assert.Error(t, s.Shutdown(fakeCtx(t), "moqt://next/"+strings.Repeat("x", wire.MaxURILen)))
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode, "not GOING_AWAY")
		go func() { _ = s.Shutdown(fakeCtx(t), "moqt://next/") }()
		g, ok := fp.readControl().(*wire.Goaway)
		require.True(t, ok)
		assert.Equal(t, "moqt://next/", g.NewSessionURI)
	})
}

func TestGoawayProtocolViolations(t *testing.T) {
	t.Run("second GOAWAY on the control stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			// An open subscription keeps the session from closing itself
			// after the first GOAWAY.
			establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fp.sendControl(&wire.Goaway{})
			closedOrFail(t, s.GoingAway(), "GOAWAY not seen")
			fp.sendControl(&wire.Goaway{})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("client GOAWAY with a URI on the control stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fp.sendControl(&wire.Goaway{NewSessionURI: "moqt://x/"})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("client GOAWAY with a URI on a request stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.Goaway{NewSessionURI: "moqt://x/"})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("second GOAWAY on one request stream, from the subscriber", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.Goaway{})
			fp.alive(2) // one is fine
			fs.send(&wire.Goaway{})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("second GOAWAY on one request stream, from the publisher", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			_, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			fs.send(&wire.Goaway{NewSessionURI: "moqt://y/", Timeout: 10})
			fp.alive(1)
			fs.send(&wire.Goaway{})
			fp.expectClose(wire.ProtocolViolation)
		})
	})
	t.Run("GOAWAY on different request streams", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			s, fp := serverSession(t, &Config{Handler: h})
			for _, id := range []uint64{0, 2} {
				fs := fp.open(subscribeMsg(id, trackA, wire.Params{}))
				expect[*wire.SubscribeOK](fs)
				fs.send(&wire.Goaway{})
			}
			fp.alive(4)
			assert.NoError(t, s.Context().Err())
		})
	})
}

// A close by the peer is the cause too, and pending calls return it.
func TestPeerCloseEndsSession(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
		fp.acceptSubscribe()
		require.NoError(t, fp.conn.CloseWithError(uint64(wire.ExpiredAuthToken), "bye"))
		se := expectSessionError(t, s, wire.ExpiredAuthToken)
		assert.True(t, se.Remote)
		assert.Equal(t, "bye", se.Reason)
		var got *SessionError
		require.ErrorAs(t, recvOrFail(t, res).err, &got)
		assert.Equal(t, wire.ExpiredAuthToken, got.Code)
	})
}

// Every goroutine a session starts ends once it closes.
func TestSessionGoroutinesEnd(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// Over a Pipe in a bubble: nothing waits on the network to end.
	inBubble(t, func(t *testing.T) {
		func() {
			h, served := servedCh(AcceptOptions{Expires: time.Hour})
			ls, s, fp := serverSessionNoCleanup(t, &Config{Handler: h})
			defer ls.srv.Close()
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			recvOrFail(t, served)
			fs.send(&wire.RequestUpdate{RequestID: 2})
			expect[*wire.RequestOK](fs)
			ts := fp.open(&wire.TrackStatus{RequestID: 4, TrackNamespace: trackB.Namespace, TrackName: trackB.Name})
			expect[*wire.RequestError](ts)
			pub := startPublish(fakeCtx(t), s, trackB, wire.Params{}, nil)
			pfs := fp.accept()
			expect[*wire.Publish](pfs)
			pfs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, pub).err)

			// The fake finishes none of its streams: Close gives up on it.
			require.ErrorIs(t, s.Close(), ErrCloseTimeout)
			fp.expectClose(wire.NoError)
			_ = fp.conn.CloseWithError(0, "")
		}()
		// The goroutine synctest.Test runs the bubble from waits for this one.
		goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("testing/synctest.testingSynctestTest"))
	})
}

// serverSessionNoCleanup is serverSession for a test that closes the
// server (ls.srv) itself before checking goroutines: a Server over Pipes
// (startPipeServer) without the cleanup that would close it. Call it
// inside inBubble.
func serverSessionNoCleanup(t *testing.T, cfg *Config) (*libServer, *Session, *fakePeer) {
	t.Helper()
	cfg = quietConfig(cfg).withDefaults()
	ln := newPipeListener(cfg)
	ls := &libServer{t: t, srv: newServer(ln, cfg, &ServerOptions{}), pipes: ln}
	fp := ls.dial("moqt")
	fp.sendSetup(ls.clientSetup())
	s, err := ls.srv.Accept(fakeCtx(t))
	require.NoError(t, err)
	fp.readPeerSetup()
	return ls, s, fp
}
