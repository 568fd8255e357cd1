package moqt

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/moqt-go/moqt/internal/transport"
)

// Sessions over connections the application made itself; doc.go's
// "Connections of your own" says what they share.

// NewClientSession runs a MoQT session as the client over conn, a raw QUIC
// connection the application dialed, and returns once the server's SETUP
// has arrived. rawURL is the moqt:// URL conn was dialed for: its
// authority, path and query go in the AUTHORITY and PATH Setup Options
// (§9.1.1, §9.1.2). ctx bounds the SETUP exchange.
func NewClientSession(ctx context.Context, conn *quic.Conn, rawURL string, cfg *Config) (*Session, error) {
	cfg, err := existingConfig(cfg)
	if err != nil {
		return nil, err
	}
	u, err := transport.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "moqt" {
		return nil, fmt.Errorf("moqt: NewClientSession needs a moqt:// URL, not %q", rawURL)
	}
	c, err := transport.WrapQUIC(conn, cfg.alpns())
	if err != nil {
		return nil, noVersion(err)
	}
	return startClient(ctx, c, u, cfg)
}

// NewServerSession runs a MoQT session as the server over conn, a raw QUIC
// connection the application accepted, and returns once the client's
// SETUP has arrived and been answered; the client's PATH and AUTHORITY
// are then the Session's Path and Authority. ctx bounds the SETUP
// exchange. Unlike a Server's sessions, it draws on no shared backlog
// budget unless cfg.SharedBacklog names one.
func NewServerSession(ctx context.Context, conn *quic.Conn, cfg *Config) (*Session, error) {
	cfg, err := existingConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := transport.WrapQUIC(conn, cfg.alpns())
	if err != nil {
		return nil, noVersion(err)
	}
	return startServer(ctx, c, transport.Info{}, cfg)
}

// NewWebTransportClientSession runs a MoQT session as the client over
// sess, a WebTransport session the application established, and returns
// once the server's SETUP has arrived. The session's Path and Authority
// are empty: the CONNECT request carried them. ctx bounds the SETUP
// exchange. A session from webtransport.Transport.Dial has its QUIC
// connection closed by webtransport-go as soon as it ends, which can
// discard the WT_CLOSE_SESSION carrying the session's code (the server
// then sees the connection lost); one from Transport.NewClientConn on a
// connection of the application's own leaves the timing to it.
func NewWebTransportClientSession(ctx context.Context, sess *webtransport.Session, cfg *Config) (*Session, error) {
	cfg, err := existingConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := transport.WrapWebTransport(sess, cfg.alpns())
	if err != nil {
		return nil, noVersion(err)
	}
	return startClient(ctx, c, nil, cfg)
}

// NewWebTransportServerSession runs a MoQT session as the server over
// sess, which the application's handler upgraded from r, and returns once
// the client's SETUP has arrived and been answered. r's Host and
// RequestURI are the Session's Authority and Path (§6.2.1). ctx bounds the
// SETUP exchange; it should not be r's context, which may end with the
// handler. As with NewServerSession, no shared backlog budget applies
// unless cfg.SharedBacklog names one.
func NewWebTransportServerSession(ctx context.Context, sess *webtransport.Session, r *http.Request, cfg *Config) (*Session, error) {
	if r == nil {
		return nil, errors.New("moqt: NewWebTransportServerSession needs the CONNECT request")
	}
	cfg, err := existingConfig(cfg)
	if err != nil {
		return nil, err
	}
	c, err := transport.WrapWebTransport(sess, cfg.alpns())
	if err != nil {
		return nil, noVersion(err)
	}
	return startServer(ctx, c, transport.Info{WebTransport: true, Authority: r.Host, Path: r.RequestURI}, cfg)
}

// existingConfig defaults and checks cfg, as Dial and Listen do.
func existingConfig(cfg *Config) (*Config, error) {
	cfg = cfg.withDefaults()
	if err := checkSetupTokens(cfg.AuthorizationTokens); err != nil {
		return nil, err
	}
	return cfg, nil
}

// noVersion says which protocols a connection should have negotiated.
func noVersion(err error) error {
	return fmt.Errorf("moqt: no MoQT version negotiated (offer wire.ALPNs(), or the ALPNs of Config.Versions): %w", err)
}

// startServer runs the server's end of the SETUP exchange over conn.
func startServer(ctx context.Context, conn transport.Conn, info transport.Info, cfg *Config) (*Session, error) {
	s := acceptedSession(conn, info, cfg)
	if s == nil {
		return nil, fmt.Errorf("moqt: client chose protocol %q", conn.Protocol())
	}
	if err := s.handshake(ctx, s.ownSetup()); err != nil {
		return nil, err
	}
	return s, nil
}
