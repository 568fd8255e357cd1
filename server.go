package moqt

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Server accepts MoQT sessions over raw QUIC and WebTransport on one UDP
// port: ALPN moqt-21 or moqt-20 selects raw QUIC, ALPN h3 WebTransport,
// whose WT-Available-Protocols header then selects the version (§6.2).
// Each session is handed to the application by Accept once SETUP has been
// exchanged.
type Server struct {
	ln     *transport.Listener
	cfg    *Config
	ready  chan *Session
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
	CheckSetup func(s *Session, setup *wire.Setup) error
}

// Listen starts a Server on the UDP address addr. tlsConf must carry a
// certificate (see GenerateCertificate); cfg configures every session.
func Listen(addr string, tlsConf *tls.Config, cfg *Config, opts *ServerOptions) (*Server, error) {
	if opts == nil {
		opts = &ServerOptions{}
	}
	cfg = cfg.withDefaults()
	if err := checkSetupTokens(cfg.AuthorizationTokens); err != nil {
		return nil, err
	}
	ln, err := transport.Listen(addr, tlsConf, &transport.ListenConfig{Protocols: cfg.alpns(), CheckOrigin: opts.CheckOrigin, Windows: cfg.windows()})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &Server{ln: ln, cfg: cfg, ready: make(chan *Session), ctx: ctx, cancel: cancel}
	srv.wg.Add(1)
	go srv.acceptLoop(opts.CheckSetup)
	return srv, nil
}

// Addr is the address the server listens on.
func (srv *Server) Addr() net.Addr { return srv.ln.Addr() }

// Accept returns the next session whose SETUP exchange has completed.
func (srv *Server) Accept(ctx context.Context) (*Session, error) {
	select {
	case s := <-srv.ready:
		return s, nil
	case <-srv.ctx.Done():
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening and closes every connection the server accepted.
// Sessions should be closed first if their peers are to see a MoQT code.
func (srv *Server) Close() error {
	srv.cancel()
	err := srv.ln.Close()
	srv.wg.Wait()
	return err
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
	select {
	case srv.ready <- s:
	case <-srv.ctx.Done():
		s.CloseWithError(wire.NoError, "server closed")
	}
}
