package moqt

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Dial connects to a MoQT server and completes the SETUP exchange (§6).
//
//   - "moqt://host:port/path?query": raw QUIC, offering the ALPNs of
//     cfg.Versions (moqt-21, moqt-20, moqt-19, moqt-18), with QUIC DATAGRAM; the authority and
//     the path and query travel in the AUTHORITY and PATH Setup Options
//     (§6.2.2, §9.1.1, §9.1.2).
//   - "https://host:port/path": WebTransport, offering the same identifiers
//     in WT-Available-Protocols (§6.2.1).
//
// TLS comes from cfg.TLSConfig, cloned, with the ALPNs added; to trust a
// server by its certificate's hash, as browsers do with a self-signed one,
// set cfg.ServerCertificateHashes. A server this end does not trust fails
// the dial with an error wrapping ErrUntrustedCertificate, which says why.
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
	tlsConf, refused := pinCertificates(cfg.TLSConfig, cfg.ServerCertificateHashes)
	dctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	conn, err := transport.Dial(dctx, rawURL, tlsConf, &transport.DialConfig{Protocols: cfg.alpns(), Windows: cfg.windows(),
		Options: cfg.transportOptions(), PacketConn: cfg.packetConn})
	if err != nil {
		if why := refused(); why != nil {
			return nil, fmt.Errorf("%w (%w)", why, publicError(err))
		}
		return nil, untrustedCertificate(publicError(err))
	}
	return startClient(dctx, conn, u, cfg)
}

// startClient runs the client's end of the SETUP exchange over conn, made
// for u: Dial's connections and the application's own. u is nil for a
// WebTransport session the application made, whose URL the session need
// not know: its CONNECT request carried it.
func startClient(ctx context.Context, conn transport.Conn, u *url.URL, cfg *Config) (*Session, error) {
	version, ok := wire.ParseALPN(conn.Protocol())
	if !ok {
		_ = conn.CloseWithError(uint64(wire.ProtocolViolation), "no MoQT version negotiated")
		return nil, fmt.Errorf("moqt: server chose protocol %q", conn.Protocol())
	}
	s := newSession(conn, version, true, cfg)
	setup := s.ownSetup()
	if u != nil {
		var authority string
		authority, s.path = transport.SetupOptions(u)
		s.authority = u.Host
		if u.Port() == "" {
			s.authority = net.JoinHostPort(u.Hostname(), transport.DefaultPort)
		}
		if !conn.WebTransport() {
			setup.Authority = wire.Some(authority)
			setup.Path = wire.Some(s.path)
		}
	}
	if err := s.handshake(ctx, setup); err != nil {
		return nil, err
	}
	return s, nil
}
