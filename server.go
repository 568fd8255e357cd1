package moqt

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Server accepts MoQT sessions over raw QUIC and WebTransport on one UDP
// port: ALPN moqt-21 or moqt-20 selects raw QUIC, ALPN h3 WebTransport,
// whose WT-Available-Protocols header then selects the version (§6.2).
// Each session is handed to the application by Accept once SETUP has been
// exchanged.
//
// Accepting is not optional: sessions wait for Accept in a bounded queue
// (ServerOptions.MaxPendingSessions), and a server that stops calling it
// refuses new connections once the queue is full.
type Server struct {
	ln     *transport.Listener
	cfg    *Config
	queue  acceptQueue
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ServerOptions are the parts of serving that only a server has.
type ServerOptions struct {
	// CheckOrigin decides whether a WebTransport request's Origin is
	// acceptable. Default: no Origin, or one whose host is the request's
	// :authority.
	CheckOrigin func(r *http.Request) bool
	// CheckSetup, if set, vets each client after its SETUP: the requested
	// Path and Authority, its AUTHORIZATION_TOKENs. A returned
	// *SessionError closes the session with its code (INVALID_PATH,
	// UNAUTHORIZED, …); any other error closes it with UNAUTHORIZED.
	// It runs on a goroutine of the session: to refuse, return an error
	// rather than call Session.Close, which would wait for it.
	CheckSetup func(s *Session, setup *wire.Setup) error
	// MaxPendingSessions bounds the sessions connected but not yet taken
	// by Accept: those in their SETUP exchange (at most SetupTimeout each)
	// and those waiting for Accept. Past it, new connections are refused
	// in the QUIC handshake with CONNECTION_REFUSED, which Dial reports as
	// ErrConnectionRefused; one that got past the handshake meanwhile is
	// closed with INTERNAL_ERROR "server busy" (MoQT has no session code
	// for load). A session that ends while it waits leaves the queue.
	// Default 64.
	MaxPendingSessions int
}

// Listen starts a Server on the UDP address addr. cfg configures every
// session; its TLSConfig must carry a certificate (see
// GenerateCertificate). opts may be nil.
func Listen(addr string, cfg *Config, opts *ServerOptions) (*Server, error) {
	if opts == nil {
		opts = &ServerOptions{}
	}
	cfg = cfg.withDefaults()
	if cfg.SharedBacklog == nil {
		cfg.SharedBacklog = NewBacklogBudget(0)
	}
	if err := checkServerTLS(cfg.TLSConfig); err != nil {
		return nil, err
	}
	if err := checkSetupTokens(cfg.AuthorizationTokens); err != nil {
		return nil, err
	}
	srv := &Server{cfg: cfg, queue: newAcceptQueue(opts.MaxPendingSessions)}
	ln, err := transport.Listen(addr, cfg.TLSConfig, &transport.ListenConfig{Protocols: cfg.alpns(), CheckOrigin: opts.CheckOrigin,
		Windows: cfg.windows(), Options: cfg.transportOptions(), Refuse: srv.queue.full})
	if err != nil {
		return nil, err
	}
	srv.ln = ln
	srv.ctx, srv.cancel = context.WithCancel(context.Background())
	srv.wg.Add(1)
	go srv.acceptLoop(opts.CheckSetup)
	return srv, nil
}

// checkServerTLS refuses a TLS configuration that cannot serve a
// certificate, before a client finds out in its handshake.
func checkServerTLS(c *tls.Config) error {
	if c == nil || (len(c.Certificates) == 0 && c.GetCertificate == nil && c.GetConfigForClient == nil) {
		return errors.New("moqt: Listen needs a certificate in Config.TLSConfig")
	}
	return nil
}

// Addr is the address the server listens on.
func (srv *Server) Addr() net.Addr { return srv.ln.Addr() }

// Accept returns the next session whose SETUP exchange has completed.
func (srv *Server) Accept(ctx context.Context) (*Session, error) {
	for {
		wake := srv.queue.waiter()
		if s := srv.queue.pop(); s != nil {
			return s, nil
		}
		select {
		case <-wake:
		case <-srv.ctx.Done():
			return nil, net.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Close stops listening and closes every connection the server accepted.
// Sessions should be closed first if their peers are to see a MoQT code;
// those still waiting for Accept are closed with NO_ERROR.
func (srv *Server) Close() error {
	srv.cancel()
	srv.wg.Wait() // no session joins the queue after this
	var wg sync.WaitGroup
	for _, s := range srv.queue.drain() {
		wg.Go(func() { _ = s.CloseWithError(wire.NoError, "server closed") })
	}
	wg.Wait()
	return srv.ln.Close()
}

func (srv *Server) acceptLoop(check func(*Session, *wire.Setup) error) {
	defer srv.wg.Done()
	for {
		conn, info, err := srv.ln.Accept(srv.ctx)
		if err != nil {
			return
		}
		srv.wg.Add(1)
		go func() {
			defer srv.wg.Done()
			srv.setup(conn, info, check)
		}()
	}
}

// setup runs one connection's SETUP exchange and hands the session over.
func (srv *Server) setup(conn transport.Conn, info transport.Info, check func(*Session, *wire.Setup) error) {
	if !srv.queue.reserve() {
		_ = conn.CloseWithError(uint64(wire.InternalError), "server busy")
		return
	}
	queued := false
	defer func() {
		if !queued {
			srv.queue.release()
		}
	}()
	version, ok := wire.ParseALPN(conn.Protocol())
	if !ok {
		_ = conn.CloseWithError(uint64(wire.ProtocolViolation), "no MoQT version negotiated")
		return
	}
	s := newSession(conn, version, false, srv.cfg)
	if info.WebTransport {
		s.path = info.Path
		s.authority = info.Authority
	}
	if check != nil {
		s.checkSetup = func(st *wire.Setup) error {
			err := check(s, st)
			var se *SessionError
			if err != nil && !errors.As(err, &se) {
				return &SessionError{Code: wire.Unauthorized, Reason: err.Error()}
			}
			return err
		}
	}
	if err := s.handshake(srv.ctx, s.ownSetup()); err != nil {
		return
	}
	srv.queue.push(s)
	queued = true
}

// acceptQueue holds the sessions that wait for Accept, and counts them
// with those in their SETUP exchange against a bound.
type acceptQueue struct {
	max int

	mu       sync.Mutex
	sessions []*Session    // set up, waiting for Accept; guarded by mu
	pending  int           // reserved places: len(sessions) plus those in SETUP; guarded by mu
	wake     chan struct{} // closed and replaced by push; guarded by mu
}

func newAcceptQueue(max int) acceptQueue {
	if max <= 0 {
		max = 64
	}
	return acceptQueue{max: max, wake: make(chan struct{})}
}

// full reports whether a new connection would find no place.
func (q *acceptQueue) full() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pending >= q.max
}

// reserve takes a place for a connection starting its SETUP exchange.
func (q *acceptQueue) reserve() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending >= q.max {
		return false
	}
	q.pending++
	return true
}

// release gives back a place whose session never joined the queue.
func (q *acceptQueue) release() {
	q.mu.Lock()
	q.pending--
	q.mu.Unlock()
}

// push queues s in its reserved place and wakes Accept. A session that
// ends while it waits leaves the queue and frees its place.
func (q *acceptQueue) push(s *Session) {
	q.mu.Lock()
	q.sessions = append(q.sessions, s)
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
	context.AfterFunc(s.ctx, func() { q.remove(s) })
}

// waiter returns a channel closed by the next push.
func (q *acceptQueue) waiter() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

// pop takes the oldest session, or returns nil.
func (q *acceptQueue) pop() *Session {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.sessions) == 0 {
		return nil
	}
	s := q.sessions[0]
	q.sessions = slices.Delete(q.sessions, 0, 1)
	q.pending--
	return s
}

// remove drops s if it still waits.
func (q *acceptQueue) remove(s *Session) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.sessions, s); i >= 0 {
		q.sessions = slices.Delete(q.sessions, i, i+1)
		q.pending--
	}
}

// drain empties the queue for Close.
func (q *acceptQueue) drain() []*Session {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.sessions
	q.sessions = nil
	q.pending -= len(out)
	return out
}
