package moqt

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// sessionQueue feeds serveSessions as a Server's Accept would.
type sessionQueue chan any // *Session, or an error to end accepting with

func (q sessionQueue) accept(ctx context.Context) (*Session, error) {
	select {
	case v := <-q:
		if err, ok := v.(error); ok {
			return nil, err
		}
		return v.(*Session), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// endedWith returns the code of the *SessionError that ended s and
// whether the peer closed it.
func closeOf(t *testing.T, s *Session) (wire.SessionErrorCode, bool) {
	t.Helper()
	var se *SessionError
	require.ErrorAs(t, context.Cause(s.Context()), &se)
	return se.Code, se.Remote
}

// TestServeDrains runs Serve's loop over in-memory sessions in a synctest
// bubble: when its context ends, an idle client gets GOAWAY and closes at
// once with NO_ERROR; a client whose subscription stays open is closed
// with GOAWAY_TIMEOUT after exactly the drain timeout; a session that
// ended before is left alone; and Serve returns nil once all are gone.
// Without open requests, it returns at once. The GOAWAY carries
// ServerOptions.NewSessionURI.
func TestServeDrains(t *testing.T) {
	const drain = 5 * time.Second
	for _, tr := range pipeTransports {
		pc := transport.PipeConfig{WebTransport: tr.wt}
		t.Run(tr.name+"/idle", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				q := make(sessionQueue, 2)
				a := newPipePair(t, pc, nil, nil)
				b := a.another(t, nil)
				q <- a.server
				q <- b.server
				ctx, cancel := context.WithCancel(t.Context())
				served := goErr(func() error { return serveSessions(ctx, q.accept, nil, drain, "", quietLogger) })
				synctest.Wait() // both accepted
				start := time.Now()
				cancel()
				require.NoError(t, <-served)
				assert.Less(t, time.Since(start), time.Second, "idle sessions drain at once")
				for _, p := range []*pair{a, b} {
					require.Error(t, p.client.Context().Err())
					assert.Equal(t, "", p.client.GoawayURI())
					code, remote := closeOf(t, p.client)
					assert.Equal(t, wire.NoError, code)
					assert.False(t, remote, "the client closes after GOAWAY")
					code, remote = closeOf(t, p.server)
					assert.Equal(t, wire.NoError, code)
					assert.True(t, remote)
				}
			})
		})
		t.Run(tr.name+"/busy", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newAcceptAll()
				q := make(sessionQueue, 3)
				idle := newPipePair(t, pc, &Config{Handler: h}, nil)
				busy := idle.another(t, nil)
				gone := idle.another(t, nil)
				for _, p := range []*pair{idle, busy, gone} {
					q <- p.server
				}
				ctx, cancel := context.WithCancel(t.Context())
				served := goErr(func() error { return serveSessions(ctx, q.accept, nil, drain, "", quietLogger) })
				_, err := busy.client.Subscribe(t.Context(), testTrack, wire.Params{})
				require.NoError(t, err)
				<-h.served
				require.NoError(t, gone.client.CloseWithError(wire.Unauthorized, "leaving"))
				synctest.Wait() // all three accepted, gone's end seen

				start := time.Now()
				cancel()
				require.NoError(t, <-served)
				assert.Equal(t, drain, time.Since(start), "the open subscription holds the drain to its bound")
				synctest.Wait() // the clients have seen the server's closes
				code, _ := closeOf(t, idle.client)
				assert.Equal(t, wire.NoError, code)
				code, remote := closeOf(t, busy.client)
				assert.Equal(t, wire.GoawayTimeout, code)
				assert.True(t, remote, "the server closed it")
				code, remote = closeOf(t, gone.server)
				assert.Equal(t, wire.Unauthorized, code, "ended before the drain, as its peer closed it")
				assert.True(t, remote)
			})
		})
		t.Run(tr.name+"/new session uri", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				q := make(sessionQueue, 1)
				p := newPipePair(t, pc, nil, nil)
				q <- p.server
				ctx, cancel := context.WithCancel(t.Context())
				const next = "moqt://127.0.0.1:4444/next"
				served := goErr(func() error { return serveSessions(ctx, q.accept, nil, drain, next, quietLogger) })
				synctest.Wait() // accepted
				cancel()
				require.NoError(t, <-served)
				assert.Equal(t, next, p.client.GoawayURI(), "ServerOptions.NewSessionURI")
				code, _ := closeOf(t, p.client)
				assert.Equal(t, wire.NoError, code)
			})
		})
		t.Run(tr.name+"/accept fails", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				q := make(sessionQueue, 2)
				p := newPipePair(t, pc, nil, nil)
				broken := errors.New("listener broken")
				q <- p.server
				q <- broken
				err := serveSessions(t.Context(), q.accept, nil, drain, "", quietLogger)
				assert.ErrorIs(t, err, broken)
				code, _ := closeOf(t, p.client)
				assert.Equal(t, wire.NoError, code, "drained all the same")
			})
		})
	}
}

// TestServeDrainsSessionsNotYetAccepted: a client whose SETUP exchange was
// over before Serve's drain began gets GOAWAY, though its session had not
// reached Accept yet (on a busy machine the Server's setup goroutine can
// lag the client's first answers). Before, Serve returned without it and
// Close then closed it with no GOAWAY.
func TestServeDrainsSessionsNotYetAccepted(t *testing.T) {
	for _, scheme := range []string{"moqt", "https"} {
		t.Run(scheme, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				over := make(chan struct{})
				release := make(chan struct{})
				cfg := &Config{hooks: &sessionHooks{setupOver: func() {
					close(over)
					<-release
				}}}
				ls := startPipeServer(t, cfg, &ServerOptions{DrainTimeout: 5 * time.Second})
				fp := ls.connect(scheme)
				<-over // SETUP is over; the session is not queued yet

				ctx, cancel := context.WithCancel(t.Context())
				served := goErr(func() error { return ls.srv.Serve(ctx) })
				synctest.Wait()
				cancel()
				synctest.Wait() // Serve waits for the session to settle
				close(release)
				g := expectControl[*wire.Goaway](t, fp)
				assert.Empty(t, g.NewSessionURI)
				fp.conn.CloseWithError(uint64(wire.NoError), "")
				require.NoError(t, <-served)
			})
		})
	}
}

// TestServeDrainsLateArrivals: a client that connects while Serve drains
// (a moqt sub moving after a GOAWAY with no New Session URI, or any new
// client) gets GOAWAY at once, with ServerOptions.NewSessionURI, and is
// drained with the others: one that closes then is gone at once, one that
// ignores the GOAWAY is closed at the drain's bound with the others, and
// Serve returns then. When every session, the late one too, leaves at
// once, Serve returns at once rather than after DrainTimeout. Before, the
// late client completed SETUP and waited for Accept, with no GOAWAY, until
// Close closed it "server closed".
func TestServeDrainsLateArrivals(t *testing.T) {
	const (
		drain = 5 * time.Second
		next  = "moqt://next.test/"
	)
	opts := &ServerOptions{DrainTimeout: drain, NewSessionURI: next}
	for _, scheme := range []string{"moqt", "https"} {
		t.Run(scheme+"/ignored", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				ls := startPipeServer(t, nil, opts)
				old := ls.connect(scheme) // ignores the GOAWAY: the drain runs its time
				ctx, cancel := context.WithCancel(t.Context())
				served := goErr(func() error { return ls.srv.Serve(ctx) })
				synctest.Wait()             // old accepted
				time.Sleep(2 * time.Second) // the drain's time counts from its start, not Serve's
				start := time.Now()
				cancel()
				assert.Equal(t, next, expectControl[*wire.Goaway](t, old).NewSessionURI)

				late := ls.connect(scheme)
				g := expectControl[*wire.Goaway](t, late)
				assert.Equal(t, next, g.NewSessionURI, "sent where the others go")
				assert.Equal(t, uint64(drain.Milliseconds()), g.Timeout, "what is left of the drain")
				assert.Zero(t, time.Since(start), "at once")
				later := ls.connect(scheme) // ignores it too
				expectControl[*wire.Goaway](t, later)
				late.closeSession()

				require.NoError(t, <-served)
				assert.Equal(t, drain, time.Since(start), "the ignored GOAWAYs hold the drain to its bound, no more")
				for _, fp := range []*fakePeer{old, later} {
					fp.expectClose(wire.NoError) // nothing was open
				}
			})
		})
		t.Run(scheme+"/nothing left", func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				ls := startPipeServer(t, nil, opts)
				old := ls.connect(scheme)
				ctx, cancel := context.WithCancel(t.Context())
				served := goErr(func() error { return ls.srv.Serve(ctx) })
				synctest.Wait() // old accepted
				start := time.Now()
				cancel()
				expectControl[*wire.Goaway](t, old)
				late := ls.connect(scheme)
				assert.Equal(t, next, expectControl[*wire.Goaway](t, late).NewSessionURI)
				old.closeSession()
				late.closeSession()
				require.NoError(t, <-served)
				assert.Zero(t, time.Since(start), "both gone: no wait for the drain's bound")
			})
		})
	}
}

// TestServeLateArrivalToldFirst: a client that sets up while Serve drains
// gets GOAWAY right after the server's SETUP, and a request it sends at
// once is refused with GOING_AWAY (§9.2: a publisher MAY reject new
// requests after sending a GOAWAY), though Serve has not reached its
// session yet. Before, the request was served (here: DOES_NOT_EXIST from
// the default handler) and GOAWAY came only once Serve accepted the
// session.
func TestServeLateArrivalToldFirst(t *testing.T) {
	const next = "moqt://next.test/"
	for _, scheme := range []string{"moqt", "https"} {
		t.Run(scheme, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				var hold atomic.Bool
				release := make(chan struct{})
				cfg := &Config{hooks: &sessionHooks{setupOver: func() {
					if hold.Load() {
						<-release // the late session is not queued yet
					}
				}}}
				ls := startPipeServer(t, cfg, &ServerOptions{DrainTimeout: 5 * time.Second, NewSessionURI: next})
				old := ls.connect(scheme) // holds the drain open
				ctx, cancel := context.WithCancel(t.Context())
				served := goErr(func() error { return ls.srv.Serve(ctx) })
				synctest.Wait()
				cancel()
				expectControl[*wire.Goaway](t, old)

				hold.Store(true)
				late := ls.connect(scheme)
				req := late.open(subscribeMsg(0, trackA, wire.Params{}))
				g := expectControl[*wire.Goaway](t, late)
				assert.Equal(t, next, g.NewSessionURI)
				assert.Equal(t, uint64(5000), g.Timeout, "what is left of the drain")
				assert.Equal(t, wire.ReqGoingAway, expect[*wire.RequestError](req).ErrorCode)
				close(release)
				old.closeSession()
				late.closeSession()
				require.NoError(t, <-served)
			})
		})
	}
}

// connect is a fake client of ls that completes SETUP.
func (ls *libServer) connect(scheme string) *fakePeer {
	ls.t.Helper()
	fp := ls.dial(scheme)
	st := &wire.Setup{} // WebTransport's path and authority are the CONNECT's
	if scheme == "moqt" {
		st = ls.clientSetup()
	}
	fp.sendSetup(st)
	fp.readPeerSetup()
	return fp
}
