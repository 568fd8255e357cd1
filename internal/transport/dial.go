package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/moqt-go/moqt/wire"
)

// DefaultPort is used when a URL names no port (§6.1.2).
const DefaultPort = "443"

// DialConfig configures Dial. The zero value and nil mean defaults.
type DialConfig struct {
	// Protocols are offered in preference order, as ALPN on raw QUIC and in
	// WT-Available-Protocols on WebTransport. Default: DefaultProtocols().
	Protocols []string
	// QUIC is the base QUIC configuration; it is copied, and QUIC DATAGRAM
	// (plus, for WebTransport, stream resets with partial delivery) is
	// always enabled. Nil means quic-go's defaults.
	QUIC *quic.Config
	// Windows, if set, fix the receive windows.
	Windows Windows
	// Options are applied over QUIC.
	Options Options
	// PacketConn, if set, carries the connection instead of a socket of
	// its own; it stays open when the connection closes.
	PacketConn net.PacketConn
	// Header holds extra header fields for the WebTransport CONNECT request,
	// such as Origin. Ignored on raw QUIC.
	Header http.Header
}

func (c *DialConfig) protocols() []string {
	if c == nil || len(c.Protocols) == 0 {
		return DefaultProtocols()
	}
	return slices.Clone(c.Protocols)
}

// ParseURL parses and checks a server URL: "moqt://authority/path?query"
// (§6.1) for raw QUIC or "https://authority/path?query" for WebTransport.
// The host must not be empty. The fragment, if any, is kept for the caller;
// it is never sent.
func ParseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("moqt transport: %w", err)
	}
	if u.Scheme != "moqt" && u.Scheme != "https" {
		return nil, fmt.Errorf("moqt transport: URL %q: scheme must be moqt or https", rawURL)
	}
	if u.Opaque != "" || u.Hostname() == "" {
		return nil, fmt.Errorf("moqt transport: URL %q: empty host", rawURL)
	}
	// Refused here what a server would close the session for (§6.1,
	// MALFORMED_AUTHORITY and MALFORMED_PATH): Go's parser lets through
	// characters RFC 3986 does not.
	authority, path := SetupOptions(u)
	if !wire.ValidAuthority(authority) {
		return nil, fmt.Errorf("moqt transport: URL %q: the authority does not follow RFC 3986", rawURL)
	}
	if !wire.ValidPath(path) {
		return nil, fmt.Errorf("moqt transport: URL %q: the path or query does not follow RFC 3986", rawURL)
	}
	return u, nil
}

// SetupOptions returns the AUTHORITY and PATH Setup Options for u
// (§9.1.1, §9.1.2): its authority, userinfo included, and its
// path-abempty, followed by "?" and the query when one is present, even
// an empty one.
func SetupOptions(u *url.URL) (authority, path string) {
	authority = u.Host
	if u.User != nil {
		authority = u.User.String() + "@" + authority
	}
	path = u.EscapedPath()
	if u.RawQuery != "" || u.ForceQuery {
		path += "?" + u.RawQuery
	}
	return authority, path
}

// hostPort returns the address to dial for u, with the default port.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = DefaultPort
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// Dial connects to rawURL: raw QUIC for moqt://, WebTransport for https://.
// tlsConf may be nil; it is copied and its NextProtos replaced. The returned
// Conn has negotiated one of the offered protocols and QUIC DATAGRAM.
//
// On raw QUIC the URL's authority, path and query are not sent; the session
// carries them in SETUP (§6.2.2). On WebTransport they form the CONNECT
// request (§6.2.1).
func Dial(ctx context.Context, rawURL string, tlsConf *tls.Config, cfg *DialConfig) (Conn, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if tlsConf == nil {
		tlsConf = &tls.Config{}
	}
	tlsConf = tlsConf.Clone()
	quicConf := &quic.Config{}
	if cfg != nil && cfg.QUIC != nil {
		quicConf = cfg.QUIC.Clone()
	}
	var dial dialer = quic.DialAddr
	if cfg != nil {
		cfg.Windows.apply(quicConf)
		cfg.Options.apply(quicConf)
		q, err := newQlogDir(cfg.Options)
		if err != nil {
			return nil, err
		}
		q.apply(quicConf)
		if pc := cfg.PacketConn; pc != nil {
			dial = func(ctx context.Context, addr string, tlsConf *tls.Config, conf *quic.Config) (*quic.Conn, error) {
				udpAddr, err := net.ResolveUDPAddr("udp", addr)
				if err != nil {
					return nil, err
				}
				return quic.Dial(ctx, pc, udpAddr, tlsConf, conf)
			}
		}
	}
	quicConf.EnableDatagrams = true
	// RESET_STREAM_AT lets a publisher reset a subgroup stream without
	// discarding the objects it did send (§11.3.2).
	quicConf.EnableStreamResetPartialDelivery = true
	if u.Scheme == "moqt" {
		return dialQUIC(ctx, dial, hostPort(u), tlsConf, quicConf, cfg.protocols())
	}
	target := *u
	target.Fragment, target.RawFragment = "", ""
	var header http.Header
	if cfg != nil {
		header = cfg.Header
	}
	return dialWebTransport(ctx, dial, hostPort(u), target.String(), tlsConf, quicConf, cfg.protocols(), header)
}

// dialer makes a QUIC connection, as quic.DialAddr does.
type dialer func(ctx context.Context, addr string, tlsConf *tls.Config, conf *quic.Config) (*quic.Conn, error)

func dialQUIC(ctx context.Context, dial dialer, addr string, tlsConf *tls.Config, quicConf *quic.Config, protocols []string) (Conn, error) {
	tlsConf.NextProtos = protocols
	qconn, err := dial(ctx, addr, tlsConf, quicConf)
	if err != nil {
		return nil, fromQUIC(err)
	}
	// crypto/tls only lets a server pick an offered protocol; the check
	// guards against a server that picked none.
	if reason, err := checkQUIC(qconn, protocols); err != nil {
		_ = qconn.CloseWithError(codeProtocolViolation, reason)
		return nil, err
	}
	return newQUICConn(qconn), nil
}

func dialWebTransport(ctx context.Context, dial dialer, addr, target string, tlsConf *tls.Config, quicConf *quic.Config,
	protocols []string, header http.Header,
) (Conn, error) {
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	quicConf.EnableStreamResetPartialDelivery = true // required by webtransport-go
	qconn, err := dial(ctx, addr, tlsConf, quicConf)
	if err != nil {
		return nil, fromQUIC(err)
	}
	tr := &webtransport.Transport{ApplicationProtocols: protocols}
	defer tr.Close() // only ends waiting in Dial; sessions are unaffected
	cc, err := tr.NewClientConn(qconn)
	if err != nil {
		_ = qconn.CloseWithError(codeH3NoError, "")
		return nil, passThrough(err)
	}
	rsp, sess, err := cc.Dial(ctx, target, header)
	if e, ok := connError(err); ok {
		// The connection ended before the session was made, closed by
		// the server (as busy, say) or lost: report how, with its code.
		_ = qconn.CloseWithError(codeH3NoError, "")
		return nil, e
	}
	if err != nil {
		code := quic.ApplicationErrorCode(codeH3NoError)
		if _, ok := errors.AsType[*webtransport.RequirementsNotMetError](err); ok {
			code = webtransport.WTRequirementsNotMetErrorCode
		}
		_ = qconn.CloseWithError(code, "")
		if rsp != nil && (rsp.StatusCode < 200 || rsp.StatusCode > 299) {
			return nil, fmt.Errorf("moqt transport: WebTransport request to %s refused with status %d", target, rsp.StatusCode)
		}
		return nil, passThrough(err)
	}
	c := newWTConn(sess, qconn)
	if err := checkWebTransport(sess, protocols); err != nil {
		// A MoQT server must pick one of the offered identifiers (§6.2).
		_ = c.CloseWithError(codeProtocolViolation, "no protocol negotiated")
		return nil, err
	}
	return c, nil
}
