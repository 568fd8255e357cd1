package moqt

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/pending"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Server accepts MoQT sessions over raw QUIC and WebTransport on one UDP
// port: an ALPN moqt-NN of Config.Versions selects raw QUIC, ALPN h3 WebTransport,
// whose WT-Available-Protocols header then selects the version (§6.2).
// Each session is handed to the application by Accept once SETUP has been
// exchanged.
//
// Accepting is not optional: sessions wait for Accept in a bounded pool
// (ServerOptions.MaxPendingSessions), and a server that stops calling it
// refuses new connections once the pool is full of them. A server whose
// Config.Handler does all the work calls Serve, which accepts for it.
type Server struct {
	ln     listener
	cfg    *Config
	queue  acceptQueue
	drain  time.Duration // ServerOptions.DrainTimeout, defaulted
	uri    string        // ServerOptions.NewSessionURI
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// setups are the sessions in setup, each with a channel closed when
	// setup returns: Serve's drain waits for those whose SETUP exchange
	// is over to be queued (settle).
	setupsMu sync.Mutex
	setups   map[*Session]chan struct{}

	sources sourceCounts // ServerOptions.MaxSessionsPerSource

	// draining is set when Serve's drain begins: sessions that set up
	// from then on send GOAWAY right after their SETUP (goawayFirst).
	draining atomic.Pointer[goawayFirst]
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
	// MaxPendingSessions bounds the connections the server holds before
	// Accept takes them: those setting up, from the end of their QUIC
	// handshake through WebTransport's CONNECT and the SETUP exchange
	// (Config.SetupTimeout bounds each step), and sessions set up and
	// waiting for Accept. When it is reached, a new connection takes the
	// place of one still setting up: the oldest one of the source (IPv4
	// address, or IPv6 /64 prefix) that holds the most such places, closed
	// with INTERNAL_ERROR "server busy" (MoQT has no session code for
	// load; H3_EXCESSIVE_LOAD before its CONNECT). So a host that opens
	// connections and never sets them up cannot lock other clients out:
	// one that completes SETUP promptly gets in, even from that host,
	// unless as many connections as the bound arrive meanwhile. Only when
	// every place is taken by a session waiting for Accept are new
	// connections refused, in the QUIC handshake with CONNECTION_REFUSED,
	// which Dial reports as ErrConnectionRefused. A session that ends while
	// it waits gives its place back. Default 64.
	MaxPendingSessions int
	// MaxSessionsPerSource bounds the sessions one source (IPv4 address,
	// or IPv6 /64 prefix, as for MaxPendingSessions) holds at once, from
	// the end of a connection's QUIC handshake until its session ends,
	// Accepted or not. A connection past it is closed before its SETUP with
	// INTERNAL_ERROR "server busy". Sessions that set up and then stay idle
	// cost a few goroutines and about 140 KB each: without a bound, one host
	// can open them until the server runs out of memory. Default 0: no
	// bound, since clients behind one NAT share an address.
	MaxSessionsPerSource int
	// DrainTimeout is how long Serve gives each session, once its context
	// is done, to end after GOAWAY before closing it; it is the Timeout
	// the GOAWAY announces (§9.2). Default 5s; negative sends GOAWAY and
	// closes at once.
	DrainTimeout time.Duration
	// NewSessionURI is the New Session URI of the GOAWAY Serve sends when
	// it drains (§9.2): where clients are to go on, such as another
	// server. Default "": clients reuse the URI they dialed (§6.6.1).
	NewSessionURI string
}

// defaultDrainTimeout is ServerOptions.DrainTimeout's default: time for a
// client to finish what it is reading and move on.
const defaultDrainTimeout = 5 * time.Second

// Listen starts a Server on the UDP address addr. cfg configures every
// session; its TLSConfig must carry a certificate (see
// GenerateCertificate). opts may be nil.
func Listen(addr string, cfg *Config, opts *ServerOptions) (*Server, error) {
	if opts == nil {
		opts = &ServerOptions{}
	}
	cfg = cfg.withDefaults()
	if len(opts.NewSessionURI) > wire.MaxURILen {
		return nil, fmt.Errorf("moqt: ServerOptions.NewSessionURI is %d bytes, more than %d (§9.2)", len(opts.NewSessionURI), wire.MaxURILen)
	}
	if err := checkServerTLS(cfg.TLSConfig); err != nil {
		return nil, err
	}
	if err := checkSetupTokens(cfg.AuthorizationTokens); err != nil {
		return nil, err
	}
	pool := pending.NewPool(cmp.Or(max(opts.MaxPendingSessions, 0), defaultMaxPendingSessions))
	ln, err := transport.Listen(addr, cfg.TLSConfig, &transport.ListenConfig{Protocols: cfg.alpns(), CheckOrigin: opts.CheckOrigin,
		Windows: cfg.windows(), Options: cfg.transportOptions(), Pool: pool, ConnectTimeout: cfg.SetupTimeout})
	if err != nil {
		return nil, err
	}
	return newServer(ln, cfg, opts), nil
}

// listener is where a Server takes its connections from: a
// transport.Listener, or in tests one handing over Pipes.
type listener interface {
	Accept(ctx context.Context) (transport.Conn, transport.Info, error)
	Addr() net.Addr
	Close() error
}

// newServer serves the connections ln accepts. cfg has its defaults;
// opts is not nil.
func newServer(ln listener, cfg *Config, opts *ServerOptions) *Server {
	if cfg.SharedBacklog == nil {
		cfg.SharedBacklog = NewBacklogBudget(0)
	}
	srv := &Server{ln: ln, cfg: cfg, queue: newAcceptQueue(), drain: cmp.Or(opts.DrainTimeout, defaultDrainTimeout),
		uri:     opts.NewSessionURI,
		sources: sourceCounts{limit: opts.MaxSessionsPerSource}}
	srv.ctx, srv.cancel = context.WithCancel(context.Background())
	srv.wg.Add(1)
	go srv.acceptLoop(opts.CheckSetup)
	return srv
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

// Serve accepts every session and holds it until it ends, for a server
// whose Config.Handler does all the work: it is the Accept loop such a
// server must otherwise write. When ctx is done, it stops accepting and
// drains the sessions it accepted: each gets GOAWAY with
// ServerOptions.NewSessionURI (Session.Shutdown) and
// ServerOptions.DrainTimeout to end, after which
// it is closed, with GOAWAY_TIMEOUT if requests are still open. So is a
// session whose SETUP exchange was over when the drain began but which
// had not reached Accept yet. Serve returns once all of them have ended
// and their closes are on the wire: nil after a drain, or the error that
// stopped Accept (net.ErrClosed once Close is called; the sessions are
// drained all the same). While it drains it goes on accepting: a client
// that sets up meanwhile gets GOAWAY right after the server's SETUP, with
// the same New Session URI, before any of its requests is answered (they
// are refused with GOING_AWAY), so that it goes elsewhere rather than
// wait, and is drained within the same time. It does not close the
// Server: sessions that complete SETUP once Serve has returned get that
// GOAWAY too, and wait for Accept or Close.
func (srv *Server) Serve(ctx context.Context) error {
	srv.draining.Store(nil)
	begin := func(dctx context.Context) {
		end, _ := dctx.Deadline()
		srv.draining.Store(&goawayFirst{uri: srv.uri, deadline: end})
		srv.settle(dctx)
	}
	return serveSessions(ctx, srv.Accept, begin, srv.drain, srv.uri, srv.cfg.Logger)
}

// settle waits, within ctx, until every session whose SETUP exchange is
// over has left setup: queued for Accept, or closed. A client whose
// requests were answered before the drain began must get GOAWAY, though
// its session may not have reached the queue yet.
func (srv *Server) settle(ctx context.Context) {
	srv.setupsMu.Lock()
	var wait []chan struct{}
	for s, done := range srv.setups {
		select {
		case <-s.setupDone:
			wait = append(wait, done)
		default: // still setting up: it waits for Accept or Close
		}
	}
	srv.setupsMu.Unlock()
	for _, done := range wait {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// trackSetup records s as in setup until the returned func is called.
func (srv *Server) trackSetup(s *Session) (untrack func()) {
	done := make(chan struct{})
	srv.setupsMu.Lock()
	if srv.setups == nil {
		srv.setups = map[*Session]chan struct{}{}
	}
	srv.setups[s] = done
	srv.setupsMu.Unlock()
	return func() {
		srv.setupsMu.Lock()
		delete(srv.setups, s)
		srv.setupsMu.Unlock()
		close(done)
	}
}

// serveSessions is Serve over accept: it holds each session accept
// returns until the session ends or ctx is done, then drains those left
// within drain, with those settle (if set) lets reach the queue once ctx is
// done, each with a GOAWAY carrying uri. It goes on accepting while it
// drains, so that a client arriving meanwhile gets GOAWAY at once and is
// drained with the rest, until nothing is left to drain or the drain's
// time is over. accept with a done ctx must still return the sessions
// queued.
func serveSessions(ctx context.Context, accept func(context.Context) (*Session, error), settle func(context.Context),
	drain time.Duration, uri string, log *slog.Logger) error {
	// wg counts the held sessions. Add runs only on this goroutine and
	// never after Wait: the loops that call hold end before it.
	var (
		wg       sync.WaitGroup
		live     atomic.Int64
		draining = make(chan struct{})
		// Set before draining is closed and begun set: dctx bounds the
		// drain; quiet ends accepting during it, once its time is over or
		// no session is left (live reaches 0 once begun).
		dctx, quiet   context.Context
		stopAccepting context.CancelFunc
		begun         atomic.Bool
		err           error
	)
	hold := func(s *Session) {
		live.Add(1)
		wg.Go(func() {
			defer func() {
				if live.Add(-1) == 0 && begun.Load() {
					stopAccepting()
				}
			}()
			select {
			case <-s.Context().Done():
				return
			case <-draining:
			}
			// The session logs how it ended; nothing is left to report.
			_ = s.Shutdown(dctx, uri)
		})
	}
	for {
		s, aerr := accept(ctx)
		if aerr != nil {
			if ctx.Err() == nil {
				err = aerr
			}
			break
		}
		hold(s)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(drain, 0))
	defer cancel()
	quiet, stopAccepting = context.WithCancel(dctx)
	defer stopAccepting()
	if settle != nil && err == nil {
		settle(dctx)
	}
	log.Info("moqt: server", "event", "drain", "sessions", live.Load(), "timeout", max(drain, 0))
	begun.Store(true)
	close(draining)
	if live.Load() == 0 {
		stopAccepting() // nothing accepted yet: only what is queued is drained
	}
	for err == nil {
		// Once quiet is done, only what is queued: a session that reached
		// the queue as the last one left is drained all the same.
		s, aerr := accept(quiet)
		if aerr != nil {
			break
		}
		hold(s)
	}
	wg.Wait()
	return err
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

// defaultMaxPendingSessions is ServerOptions.MaxPendingSessions' default.
const defaultMaxPendingSessions = 64

// setup runs one connection's SETUP exchange and hands the session over.
// Until the exchange completes, a newcomer may take the connection's place
// in the pool (info.Ticket): the session is then closed as busy.
func (srv *Server) setup(conn transport.Conn, info transport.Info, check func(*Session, *wire.Setup) error) {
	ticket := info.Ticket
	queued := false
	defer func() {
		if !queued {
			ticket.Release()
		}
	}()
	s := acceptedSession(conn, info, srv.cfg)
	if s == nil {
		return
	}
	release, ok := srv.sources.take(conn.RemoteAddr())
	if !ok {
		s.fail(errServerBusy())
		return
	}
	context.AfterFunc(s.Context(), release)
	defer srv.trackSetup(s)()
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
	evicted := make(chan struct{})
	stop := context.AfterFunc(ticket.Context(), func() {
		defer close(evicted)
		s.fail(errServerBusy())
	})
	// A client arriving while Serve drains is told where to go before
	// any of its requests is answered.
	s.goawayFirst = srv.draining.Load()
	err := s.handshake(srv.ctx, s.ownSetup())
	if !stop() {
		<-evicted // the close is on the wire
		return
	}
	if err != nil {
		return
	}
	s.hook(func(h *sessionHooks) func() { return h.setupOver })
	if !ticket.Ready() {
		s.fail(errServerBusy()) // displaced after the handshake returned
		return
	}
	srv.queue.push(s, ticket)
	queued = true
}

// acceptedSession wraps conn, a client's connection, for the server's end
// of the SETUP exchange: the Server's connections and the application's
// own. info has what a WebTransport request asked for. It closes conn and
// returns nil if conn's protocol names no version (a guard: the transport
// accepts only the protocols of cfg).
func acceptedSession(conn transport.Conn, info transport.Info, cfg *Config) *Session {
	version, ok := wire.ParseALPN(conn.Protocol())
	if !ok {
		_ = conn.CloseWithError(uint64(wire.ProtocolViolation), "no MoQT version negotiated")
		return nil
	}
	s := newSession(conn, version, false, cfg)
	if info.WebTransport {
		s.path = info.Path
		s.authority = info.Authority
	}
	return s
}

// errServerBusy closes a session whose place a newcomer took. MoQT has no
// session code for load.
func errServerBusy() *SessionError {
	return &SessionError{Code: wire.InternalError, Reason: "server busy"}
}

// acceptQueue holds the sessions that wait for Accept, each with its place
// in the server's pool, which it gives back when it leaves the queue.
type acceptQueue struct {
	mu       sync.Mutex
	sessions []waiting     // set up, waiting for Accept; guarded by mu
	wake     chan struct{} // closed and replaced by push; guarded by mu
}

type waiting struct {
	s      *Session
	ticket *pending.Ticket
}

func newAcceptQueue() acceptQueue {
	return acceptQueue{wake: make(chan struct{})}
}

// push queues s, holding ticket, and wakes Accept. A session that ends
// while it waits leaves the queue and gives its place back.
func (q *acceptQueue) push(s *Session, ticket *pending.Ticket) {
	q.mu.Lock()
	q.sessions = append(q.sessions, waiting{s, ticket})
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
	if len(q.sessions) == 0 {
		q.mu.Unlock()
		return nil
	}
	w := q.sessions[0]
	q.sessions = slices.Delete(q.sessions, 0, 1)
	q.mu.Unlock()
	w.ticket.Release()
	return w.s
}

// remove drops s if it still waits.
func (q *acceptQueue) remove(s *Session) {
	q.mu.Lock()
	i := slices.IndexFunc(q.sessions, func(w waiting) bool { return w.s == s })
	if i < 0 {
		q.mu.Unlock()
		return
	}
	w := q.sessions[i]
	q.sessions = slices.Delete(q.sessions, i, i+1)
	q.mu.Unlock()
	w.ticket.Release()
}

// drain empties the queue for Close.
func (q *acceptQueue) drain() []*Session {
	q.mu.Lock()
	out := q.sessions
	q.sessions = nil
	q.mu.Unlock()
	sessions := make([]*Session, 0, len(out))
	for _, w := range out {
		w.ticket.Release()
		sessions = append(sessions, w.s)
	}
	return sessions
}
