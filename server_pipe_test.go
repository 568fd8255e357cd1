package moqt

import (
	"context"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The library's Server and Dial over Pipes, in a synctest bubble: the
// Server takes its connections from a pipeListener rather than a UDP
// port, and Dial's end of SETUP runs over a Pipe as it does once QUIC or
// WebTransport is up. What the Server adds to a session (CheckSetup, the
// accept queue) and what Dial puts in SETUP are tested so; the pool,
// which lives in the transport's Listener, only over the real ones.

// pipeListener hands a Server the server ends of the Pipes its dial
// makes, as a transport.Listener hands over QUIC connections and
// WebTransport sessions.
type pipeListener struct {
	cfg      *Config // the Server's, which shapes the Pipes
	incoming chan transport.Conn
	ctx      context.Context // done once Close starts
	cancel   context.CancelFunc

	mu    sync.Mutex
	conns []transport.Conn // handed over; guarded by mu
}

func newPipeListener(cfg *Config) *pipeListener {
	l := &pipeListener{cfg: cfg, incoming: make(chan transport.Conn)}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	return l
}

// dial makes a Pipe shaped by pc and the Server's Config and hands its
// server end to Accept, from a goroutine as the Listener does. A
// WebTransport client's CONNECT asked for /live.
func (l *pipeListener) dial(pc transport.PipeConfig) transport.Conn {
	cc, sc := transport.Pipe(pipeConfig(pc, l.cfg))
	go func() {
		select {
		case l.incoming <- sc:
		case <-l.ctx.Done():
			_ = sc.CloseWithError(uint64(wire.NoError), "server closed")
		case <-sc.Context().Done():
		}
	}()
	return cc
}

// Accept takes the next connection; after Close it reports
// transport.ErrListenerClosed.
func (l *pipeListener) Accept(ctx context.Context) (transport.Conn, transport.Info, error) {
	select {
	case c := <-l.incoming:
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
		return c, pipeInfo(transport.PipeConfig{WebTransport: c.WebTransport()}, "/live"), nil
	case <-l.ctx.Done():
		return nil, transport.Info{}, transport.ErrListenerClosed
	case <-ctx.Done():
		return nil, transport.Info{}, ctx.Err()
	}
}

// Addr is named as the authority pipe clients ask for.
func (l *pipeListener) Addr() net.Addr { return pipeListenerAddr{} }

// Close closes every connection it handed over with NO_ERROR, as the
// Listener does.
func (l *pipeListener) Close() error {
	l.cancel()
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.CloseWithError(uint64(wire.NoError), "server closed")
	}
	return nil
}

type pipeListenerAddr struct{}

func (pipeListenerAddr) Network() string { return "pipe" }
func (pipeListenerAddr) String() string  { return pipeAuthority }

// startPipeServer is startLibServer over Pipes: a Server with cfg and
// opts whose fake clients dial in memory. Call it inside inBubble.
func startPipeServer(t *testing.T, cfg *Config, opts *ServerOptions) *libServer {
	t.Helper()
	if opts == nil {
		opts = &ServerOptions{}
	}
	cfg = quietConfig(cfg).withDefaults()
	ln := newPipeListener(cfg)
	srv := newServer(ln, cfg, opts)
	t.Cleanup(func() { _ = srv.Close() })
	return &libServer{t: t, srv: srv, pipes: ln}
}

// dialLib starts the library's Dial of scheme://pipe.test:443/live?x=1
// towards the fake server, over a Pipe imitating raw QUIC ("moqt") or
// WebTransport ("https"): Dial's end of SETUP, as it runs once its
// transport is up. It returns the fake's end of the connection with the
// Dial still waiting for SETUP.
func (fs *fakeServer) dialLib(scheme string, cfg *Config) (*fakePeer, *pendingDial) {
	fs.t.Helper()
	cfg = quietConfig(cfg).withDefaults()
	cc, sc := transport.Pipe(pipeConfig(transport.PipeConfig{WebTransport: scheme == "https"}, cfg))
	u, err := url.Parse(scheme + "://" + pipeAuthority + pipePath)
	require.NoError(fs.t, err)
	d := &pendingDial{t: fs.t, ch: make(chan dialResult, 1)}
	go func() {
		s, err := startClient(context.Background(), cc, u, cfg)
		d.ch <- dialResult{s, err}
	}()
	fp := newFakePeer(fs.t, sc)
	fs.t.Cleanup(func() {
		if s, _ := d.result(); s != nil {
			_ = s.CloseWithError(wire.NoError, "")
		}
	})
	return fp, d
}
