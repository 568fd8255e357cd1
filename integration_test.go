package moqt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/wire"
)

// pair is a client and a server session connected over real loopback QUIC
// or WebTransport, or over a transport.Pipe (srv nil).
type pair struct {
	client, server *Session
	srv            *Server
	roots          *x509.CertPool // trusts srv's certificate
	scheme         string         // how the client reached srv
	// pipe, for a pair over a Pipe, connects more clients to servers like
	// this one's: same configuration, same Handler.
	pipe func(t *testing.T, clientCfg *Config) *pair
}

// transports are the two ways a session can run; every integration test
// runs over both.
var transports = []struct {
	name   string
	scheme string
}{
	{"quic", "moqt"},
	{"webtransport", "https"},
}

// newPair starts a Server on 127.0.0.1 and dials it. serverCfg.Handler
// serves the client's requests; clientCfg.Handler the server's.
func newPair(t *testing.T, scheme string, serverCfg, clientCfg *Config) *pair {
	t.Helper()
	// Registered first, so it runs after the sessions are closed: every
	// goroutine of both sessions and the server must be gone.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	if serverCfg == nil {
		serverCfg = &Config{}
	}
	if serverCfg.Logger == nil {
		serverCfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, _ := listenLoopback(t, serverCfg)
	return p.connect(t, scheme, clientCfg)
}

// listenLoopback starts a Server on 127.0.0.1 with a fresh certificate,
// closed when the test ends. It returns the pair to connect clients with
// and the certificate (DER), for clients in other processes.
func listenLoopback(t *testing.T, serverCfg *Config) (*pair, []byte) {
	t.Helper()
	cert, _, err := GenerateCertificate()
	require.NoError(t, err)
	cfg := *serverCfg
	cfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv, err := Listen("127.0.0.1:0", &cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &pair{srv: srv, roots: roots}, cert.Certificate[0]
}

// another connects one more client the way p's was, to a server like p's.
func (p *pair) another(t *testing.T, clientCfg *Config) *pair {
	t.Helper()
	return p.connect(t, p.scheme, clientCfg)
}

// connect dials p's server with a new client session: another pair on the
// same Server, closed when the test ends, before the Server. Over a Pipe
// it is a new pair whose server session shares p's configuration, and
// scheme is ignored.
func (p *pair) connect(t *testing.T, scheme string, clientCfg *Config) *pair {
	t.Helper()
	if p.pipe != nil {
		return p.pipe(t, clientCfg)
	}
	if clientCfg == nil {
		clientCfg = &Config{}
	}
	clientCfg.TLSConfig = &tls.Config{RootCAs: p.roots, ServerName: "127.0.0.1"}
	if clientCfg.Logger == nil {
		clientCfg.Logger = slog.New(slog.DiscardHandler)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan *Session, 1)
	go func() {
		s, err := p.srv.Accept(ctx)
		if err == nil {
			accepted <- s
		}
		close(accepted)
	}()
	client, err := Dial(ctx, scheme+"://"+p.srv.Addr().String()+"/live?x=1", clientCfg)
	require.NoError(t, err)
	server, ok := <-accepted
	require.True(t, ok, "server accepted no session")
	t.Cleanup(func() {
		client.Close()
		server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
	})
	return &pair{client: client, server: server, srv: p.srv, roots: p.roots, scheme: scheme}
}

// TestIntegrationSetup: Dial and a Server's Accept connect over loopback
// QUIC and WebTransport: the version comes from ALPN or
// WT-Available-Protocols, the path and authority from the URL. The
// session's behaviour past SETUP is tested over Pipes.
func TestIntegrationSetup(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := newPair(t, tr.scheme, nil, nil)
			assert.Equal(t, wire.Draft21, p.client.Version())
			assert.Equal(t, wire.Draft21, p.server.Version())
			assert.Equal(t, tr.scheme == "https", p.server.WebTransport())
			assert.Equal(t, "/live?x=1", p.server.Path())
			assert.Equal(t, "moqt-go", p.server.PeerSetup().MoqtImplementation.Value)
			assert.Equal(t, "moqt-go", p.client.PeerSetup().MoqtImplementation.Value)
			if tr.scheme == "moqt" {
				assert.Equal(t, p.srv.Addr().String(), p.server.Authority())
			}
		})
	}
}
