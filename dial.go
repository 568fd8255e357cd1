package moqt

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Dial connects to a MoQT server and completes the SETUP exchange (§6).
//
//   - "moqt://host:port/path?query": raw QUIC, offering the ALPNs of
//     cfg.Versions (moqt-21, moqt-20), with QUIC DATAGRAM; the authority and
//     the path and query travel in the AUTHORITY and PATH Setup Options
//     (§6.2.2, §9.1.1, §9.1.2).
//   - "https://host:port/path": WebTransport, offering the same identifiers
//     in WT-Available-Protocols (§6.2.1).
//
// The default port is 443. Dial returns once the server's SETUP has
// arrived. A connection that fails without a MoQT close is reported as a
// *TransportError: a server too busy to take it refuses it, which matches
// ErrConnectionRefused.
func Dial(ctx context.Context, rawURL string, cfg *Config) (*Session, error) {
	cfg = cfg.withDefaults()
	if err := checkSetupTokens(cfg.AuthorizationTokens); err != nil {
		return nil, err
	}
	u, err := transport.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var tlsConf *tls.Config
	if cfg.TLSConfig != nil {
		tlsConf = cfg.TLSConfig.Clone()
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	conn, err := transport.Dial(dctx, rawURL, tlsConf, &transport.DialConfig{Protocols: cfg.alpns(), Windows: cfg.windows(),
		Options: cfg.transportOptions(), PacketConn: cfg.packetConn})
	if err != nil {
		return nil, publicError(err)
	}
	version, ok := wire.ParseALPN(conn.Protocol())
	if !ok {
		_ = conn.CloseWithError(uint64(wire.ProtocolViolation), "no MoQT version negotiated")
		return nil, fmt.Errorf("moqt: server chose protocol %q", conn.Protocol())
	}
	s := newSession(conn, version, true, cfg)
	s.path = u.EscapedPath()
	if u.RawQuery != "" {
		s.path += "?" + u.RawQuery
	}
	setup := s.ownSetup()
	if !conn.WebTransport() {
		s.authority = u.Host
		if u.Port() == "" {
			s.authority = net.JoinHostPort(u.Hostname(), transport.DefaultPort)
		}
		setup.Authority = wire.Some(u.Host)
		setup.Path = wire.Some(s.path)
	}
	if err := s.handshake(dctx, setup); err != nil {
		return nil, err
	}
	return s, nil
}
