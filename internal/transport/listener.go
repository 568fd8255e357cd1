package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/moqt-go/moqt/internal/pending"
)

// ListenConfig configures Listen. The zero value and nil mean defaults.
type ListenConfig struct {
	// Protocols are the identifiers accepted, in the server's preference
	// order for ALPN. Default: DefaultProtocols(). On WebTransport the first
	// of the client's WT-Available-Protocols that is in this list wins.
	Protocols []string
	// QUIC is the base QUIC configuration; it is copied, and QUIC DATAGRAM
	// and stream resets with partial delivery (needed by WebTransport) are
	// always enabled. Nil means quic-go's defaults.
	QUIC *quic.Config
	// Windows, if set, fix the receive windows.
	Windows Windows
	// Options are applied over QUIC.
	Options Options
	// Pool, if set, holds a place for each connection from the end of its
	// handshake until the receiver of Accept is done with it (see
	// Info.Ticket). While the pool is Full, new connections are refused
	// before their handshake with QUIC's CONNECTION_REFUSED, which is what
	// a busy server sends (RFC 9000 §20.1); one that finds no place after
	// its handshake is closed as busy: raw QUIC with MoQT's INTERNAL_ERROR,
	// HTTP/3 with H3_EXCESSIVE_LOAD. The Listener closes an HTTP/3
	// connection whose place a newcomer took before its WebTransport
	// CONNECT with H3_EXCESSIVE_LOAD too.
	Pool *pending.Pool
	// ConnectTimeout, if positive, bounds how long an HTTP/3 connection
	// may go without a WebTransport session after its handshake; past it,
	// it is closed with H3_NO_ERROR. Without it a connection that never
	// sends CONNECT stays as long as it answers QUIC's keep-alives.
	ConnectTimeout time.Duration
	// CheckOrigin decides whether a WebTransport request's Origin is
	// acceptable. Default: accept a request with no Origin or whose
	// Origin's host equals its :authority. Refused requests get 403.
	CheckOrigin func(r *http.Request) bool
}

// errServerBusy makes quic-go refuse a connection with CONNECTION_REFUSED;
// the client sees only the code.
var errServerBusy = errors.New("moqt transport: server busy")

// A Listener accepts raw QUIC connections and WebTransport sessions on one
// UDP port: ALPN moqt-* yields a raw QUIC Conn, ALPN h3 is served as HTTP/3
// where any path accepts a WebTransport session.
type Listener struct {
	udp            net.PacketConn
	tr             *quic.Transport
	ln             *quic.Listener
	wt             *webtransport.Server
	protocols      []string
	checkOrigin    func(*http.Request) bool
	pool           *pending.Pool // nil: no bound
	connectTimeout time.Duration
	qlogs          *qlogDir // nil: no qlog

	// incoming hands accepted connections to Accept. Unbuffered: a
	// connection is either taken by Accept or closed by its sender.
	incoming chan accepted
	ctx      context.Context // done once Close starts
	cancel   context.CancelFunc
	wg       sync.WaitGroup // every goroutine the Listener starts

	mu      sync.Mutex
	conns   map[*quic.Conn]uint64       // open connections, with the code Close uses; guarded by mu
	waiting map[*quic.Conn]*connectWait // HTTP/3 connections before their session; guarded by mu
	closed  bool                        // guarded by mu

	closeOnce sync.Once
	closeErr  error
}

type accepted struct {
	conn Conn
	info Info
}

// qconnKey is the request context key under which the HTTP/3 server stores
// the request's *quic.Conn.
type qconnKey struct{}

// Listen listens on the UDP address addr (such as "127.0.0.1:0"). tlsConf
// must hold a certificate; it is copied and its NextProtos replaced.
func Listen(addr string, tlsConf *tls.Config, cfg *ListenConfig) (*Listener, error) {
	if tlsConf == nil {
		return nil, errors.New("moqt transport: Listen needs a TLS configuration")
	}
	if cfg == nil {
		cfg = &ListenConfig{}
	}
	protocols := slices.Clone(cfg.Protocols)
	if len(protocols) == 0 {
		protocols = DefaultProtocols()
	}
	if slices.Contains(protocols, http3.NextProtoH3) {
		return nil, errors.New("moqt transport: h3 is not a MoQT protocol")
	}
	quicConf := &quic.Config{}
	if cfg.QUIC != nil {
		quicConf = cfg.QUIC.Clone()
	}
	cfg.Windows.apply(quicConf)
	cfg.Options.apply(quicConf)
	qlogs, err := newQlogDir(cfg.Options)
	if err != nil {
		return nil, err
	}
	qlogs.apply(quicConf)
	quicConf.EnableDatagrams = true
	quicConf.EnableStreamResetPartialDelivery = true
	if pool := cfg.Pool; pool != nil {
		// What GetConfigForClient returns replaces the whole
		// configuration, so by default it returns a copy of this one.
		base, get := quicConf.Clone(), quicConf.GetConfigForClient
		quicConf.GetConfigForClient = func(info *quic.ClientInfo) (*quic.Config, error) {
			if pool.Full() {
				return nil, errServerBusy
			}
			if get != nil {
				return get(info)
			}
			return base, nil
		}
	}

	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, passThrough(err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, passThrough(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(withALPN(tlsConf, slices.Concat(protocols, []string{http3.NextProtoH3})), quicConf)
	if err != nil {
		_ = tr.Close()
		_ = udp.Close()
		return nil, passThrough(err)
	}

	l := &Listener{
		udp:            udp,
		tr:             tr,
		ln:             ln,
		protocols:      protocols,
		checkOrigin:    cfg.CheckOrigin,
		pool:           cfg.Pool,
		connectTimeout: cfg.ConnectTimeout,
		qlogs:          qlogs,
		incoming:       make(chan accepted),
		conns:          make(map[*quic.Conn]uint64),
		waiting:        make(map[*quic.Conn]*connectWait),
	}
	if l.checkOrigin == nil {
		l.checkOrigin = sameOrigin
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wt = &webtransport.Server{
		H3: &http3.Server{
			Handler: http.HandlerFunc(l.serveHTTP),
			ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
				return context.WithValue(ctx, qconnKey{}, c)
			},
		},
		ApplicationProtocols: protocols,
		// serveHTTP has called l.checkOrigin already.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	l.wg.Go(l.acceptLoop)
	return l, nil
}

// withALPN copies tlsConf with NextProtos set, also on the configurations
// its GetConfigForClient returns.
func withALPN(tlsConf *tls.Config, protos []string) *tls.Config {
	c := tlsConf.Clone()
	c.NextProtos = protos
	if get := c.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			conf, err := get(hello)
			if conf == nil || err != nil {
				return conf, err
			}
			return withALPN(conf, protos), nil
		}
	}
	return c
}

// Addr returns the bound UDP address.
func (l *Listener) Addr() net.Addr { return l.udp.LocalAddr() }

// Accept waits for the next raw QUIC connection or WebTransport session.
// After Close it returns ErrListenerClosed.
func (l *Listener) Accept(ctx context.Context) (Conn, Info, error) {
	select {
	case a := <-l.incoming:
		return a.conn, a.info, nil
	case <-l.ctx.Done():
		return nil, Info{}, ErrListenerClosed
	case <-ctx.Done():
		return nil, Info{}, ctx.Err()
	}
}

// Close stops listening and closes every connection accepted through the
// Listener, which share its UDP socket and cannot outlive it: raw QUIC ones
// with MoQT's NO_ERROR, the ones carrying WebTransport with H3_NO_ERROR. A
// session that wants its peer to see a code closes itself first. Close
// returns once every goroutine the Listener started has ended.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		conns := l.conns
		l.conns = nil
		l.mu.Unlock()

		l.cancel()
		err := l.ln.Close()
		var wg sync.WaitGroup
		for c, code := range conns {
			wg.Go(func() { _ = c.CloseWithError(quic.ApplicationErrorCode(code), "server closed") })
		}
		wg.Wait()
		err = errors.Join(err, l.wt.Close())
		l.wg.Wait()
		err = errors.Join(err, l.tr.Close(), l.udp.Close())
		l.qlogs.wait()
		l.closeErr = passThrough(err)
	})
	return l.closeErr
}

// track records an accepted connection; it reports false once Close has
// started.
func (l *Listener) track(c *quic.Conn, code uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = code
	context.AfterFunc(c.Context(), func() {
		l.mu.Lock()
		delete(l.conns, c) // no-op once Close took the map
		l.mu.Unlock()
	})
	return true
}

func (l *Listener) acceptLoop() {
	for {
		qconn, err := l.ln.Accept(l.ctx)
		if err != nil {
			return // the Listener is closing
		}
		state := qconn.ConnectionState()
		// Otherwise a MoQT ALPN: crypto/tls only negotiates offered protocols.
		h3 := state.TLS.NegotiatedProtocol == http3.NextProtoH3
		if !h3 && !state.SupportsDatagrams.Remote {
			_ = qconn.CloseWithError(codeProtocolViolation, "QUIC DATAGRAM not negotiated")
			continue
		}
		code, busy := quic.ApplicationErrorCode(codeNoError), quic.ApplicationErrorCode(codeInternalError)
		if h3 {
			code, busy = codeH3NoError, codeH3ExcessiveLoad
		}
		var ticket *pending.Ticket
		if l.pool != nil {
			if ticket = l.pool.Admit(qconn.RemoteAddr()); ticket == nil {
				_ = qconn.CloseWithError(busy, "server busy")
				continue
			}
		}
		if !l.track(qconn, uint64(code)) {
			ticket.Release()
			_ = qconn.CloseWithError(code, "server closed")
			continue
		}
		if !h3 {
			c := newQUICConn(qconn)
			info := Info{ServerName: state.TLS.ServerName, Ticket: ticket}
			l.wg.Go(func() { l.handOff(c, info) })
			continue
		}
		w := &connectWait{ticket: ticket, claimed: make(chan struct{})}
		l.mu.Lock()
		l.waiting[qconn] = w
		l.mu.Unlock()
		l.wg.Go(func() { l.awaitConnect(qconn, w) })
		l.wg.Go(func() {
			if err := l.wt.ServeQUICConn(qconn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				_ = qconn.CloseWithError(codeH3InternalError, err.Error())
			}
		})
	}
}

// handOff passes c to Accept. If the Listener closes first, Close closes
// c's connection; if c ends first, it is dropped; if a newcomer takes its
// place first, it is closed as busy.
func (l *Listener) handOff(c Conn, info Info) {
	select {
	case l.incoming <- accepted{c, info}:
		return
	case <-info.Ticket.Context().Done():
		_ = c.CloseWithError(codeInternalError, "server busy")
	case <-l.ctx.Done():
	case <-c.Context().Done():
	}
	info.Ticket.Release()
}

// connectWait is an HTTP/3 connection's wait for the WebTransport CONNECT
// that takes its place in the pool.
type connectWait struct {
	ticket  *pending.Ticket
	claimed chan struct{} // closed once a session took ticket
}

// awaitConnect closes an HTTP/3 connection that has no WebTransport
// session within connectTimeout, or whose place a newcomer took before it
// had one, and gives back the place of one that ends before.
func (l *Listener) awaitConnect(qconn *quic.Conn, w *connectWait) {
	var timeout <-chan time.Time
	if l.connectTimeout > 0 {
		t := time.NewTimer(l.connectTimeout)
		defer t.Stop()
		timeout = t.C
	}
	var code quic.ApplicationErrorCode
	var reason string
	select {
	case <-w.claimed:
		return
	case <-w.ticket.Context().Done():
		code, reason = codeH3ExcessiveLoad, "server busy"
	case <-timeout:
		code, reason = codeH3NoError, "no WebTransport session"
	case <-qconn.Context().Done():
	case <-l.ctx.Done(): // Close closes the connection
	}
	if l.takeWait(qconn) == nil {
		return // a session claimed the place meanwhile: it is the session's now
	}
	w.ticket.Release()
	if reason != "" {
		_ = qconn.CloseWithError(code, reason)
	}
}

// takeWait removes and returns qconn's wait for a session, nil if it has
// none: a session claimed it, or awaitConnect gave it up. Whoever takes it
// owns its ticket.
func (l *Listener) takeWait(qconn *quic.Conn) *connectWait {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.waiting[qconn]
	delete(l.waiting, qconn)
	return w
}

// serveHTTP answers every HTTP/3 request: a WebTransport CONNECT on any path
// that offers one of our protocols becomes a session; anything else is
// refused.
func (l *Listener) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if !l.checkOrigin(r) {
		w.WriteHeader(http.StatusForbidden)
		return
	}
	proto := selectProtocol(r.Header.Values("WT-Available-Protocols"), l.protocols)
	if proto == "" {
		// §6.2: MoQT over WebTransport negotiates its version here;
		// accepting a session with no protocol would leave it unknown.
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	qconn, ok := r.Context().Value(qconnKey{}).(*quic.Conn)
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	sess, err := l.wt.Upgrade(w, r)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	c := newWTConn(sess, qconn)
	if c.protocol != proto {
		_ = c.CloseWithError(codeProtocolViolation, "protocol negotiation failed")
		return
	}
	wait := l.takeWait(qconn)
	if wait == nil {
		// awaitConnect is closing the connection, as busy or for its
		// timeout; webtransport-go allows no second session on it.
		_ = c.CloseWithError(codeInternalError, "server busy")
		return
	}
	close(wait.claimed)
	var serverName string
	if r.TLS != nil {
		serverName = r.TLS.ServerName
	}
	l.handOff(c, Info{
		WebTransport: true,
		Authority:    r.Host,
		Path:         r.RequestURI,
		Header:       r.Header.Clone(),
		ServerName:   serverName,
		Ticket:       wait.ticket,
	})
}

// selectProtocol returns the first identifier of a WT-Available-Protocols
// field (a structured-field list of strings, RFC 9651) that is in ours, or
// "" if there is none. Like webtransport-go, which writes the response's
// WT-Protocol, it treats a list with a member that is not a string as
// offering nothing.
func selectProtocol(field []string, ours []string) string {
	if len(field) == 0 {
		return ""
	}
	list, err := httpsfv.UnmarshalList(field)
	if err != nil {
		return ""
	}
	offered := make([]string, 0, len(list))
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			return ""
		}
		s, ok := item.Value.(string)
		if !ok {
			return ""
		}
		offered = append(offered, s)
	}
	for _, p := range offered {
		if slices.Contains(ours, p) {
			return p
		}
	}
	return ""
}

// sameOrigin accepts a request without Origin, or whose Origin's host
// (with port) equals the request's :authority, ignoring ASCII case.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}
