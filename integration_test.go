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

var testTrack = wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam1"), Name: []byte("video")}

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

func TestIntegrationSubscribeUpdateDone(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			served := make(chan *ServedSubscription, 1)
			serverCfg := &Config{Handler: HandlerFunc(func(r Request) {
				sr, ok := r.(*SubscribeRequest)
				if !ok {
					_ = r.Reject(wire.ReqNotSupported, "")
					return
				}
				ss, err := acceptLocalAt(sr, wire.Some(wire.Location{Group: 4, Object: 2}), AcceptOptions{})
				if err == nil {
					served <- ss
				}
			})}
			p := newPair(t, tr.scheme, serverCfg, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{SubscriberPriority: wire.Some[uint8](7)})
			require.NoError(t, err)
			ss := <-served
			assert.Equal(t, stateEstablished, sub.current())
			assert.Equal(t, ss.TrackAlias(), sub.TrackAlias())
			largest, ok := sub.Largest()
			require.True(t, ok)
			assert.Equal(t, wire.Location{Group: 4, Object: 2}, largest)
			assert.True(t, ss.Forward())

			require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(false)}))
			assert.False(t, ss.Forward())
			assert.False(t, sub.forwardState())

			require.NoError(t, ss.End(wire.DoneTrackEnded, "bye"))
			select {
			case <-sub.Done():
			case <-ctx.Done():
				t.Fatal("subscription did not end")
			}
			var de *DoneError
			require.ErrorAs(t, sub.Err(), &de)
			assert.Equal(t, wire.DoneTrackEnded, de.Code)
			assert.Equal(t, uint64(0), de.StreamCount)
		})
	}
}

// acceptAll is a Handler that accepts every SUBSCRIBE and PUBLISH and hands
// the resulting ends to the test.
type acceptAll struct {
	served chan *ServedSubscription
	subs   chan *Subscription
}

func newAcceptAll() *acceptAll {
	return &acceptAll{served: make(chan *ServedSubscription, 4), subs: make(chan *Subscription, 4)}
}

func (a *acceptAll) ServeMOQT(r Request) {
	switch r := r.(type) {
	case *SubscribeRequest:
		if ss, err := acceptLocal(r, AcceptOptions{}); err == nil {
			a.served <- ss
		}
	case *PublishRequest:
		if sub, err := r.Accept(wire.Params{}); err == nil {
			a.subs <- sub
		}
	default:
		DefaultHandler.ServeMOQT(r)
	}
}

func waitDone(t *testing.T, ctx context.Context, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s did not end", what)
	}
}

// TestIntegrationPublish covers the publisher-initiated subscription:
// PUBLISH, PUBLISH_OK, an update from the subscriber, PUBLISH_DONE.
func TestIntegrationPublish(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h := newAcceptAll()
			p := newPair(t, tr.scheme, nil, &Config{Handler: h})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ss, err := publishLocal(ctx, p.server, testTrack, wire.Params{Forward: wire.Some(false),
				LargestObject: wire.Some(wire.Location{Group: 9, Object: 1})},
				wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 3}})
			require.NoError(t, err)
			assert.Equal(t, stateEstablished, ss.current())
			assert.False(t, ss.Forward())
			sub := <-h.subs
			assert.Equal(t, stateEstablished, sub.current())
			assert.True(t, sub.Track().Equal(testTrack))
			assert.Equal(t, ss.TrackAlias(), sub.TrackAlias())
			assert.False(t, sub.forwardState())
			largest, ok := sub.Largest()
			require.True(t, ok)
			assert.Equal(t, wire.Location{Group: 9, Object: 1}, largest)
			assert.Equal(t, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 3}}, sub.Properties())

			require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(true)}))
			assert.True(t, ss.Forward())

			require.NoError(t, ss.End(wire.DoneGoingAway, "moving"))
			waitDone(t, ctx, sub.Done(), "subscription")
			var de *DoneError
			require.ErrorAs(t, sub.Err(), &de)
			assert.Equal(t, wire.DoneGoingAway, de.Code)
			assert.Equal(t, "moving", de.Reason)
		})
	}
}

// TestIntegrationGoaway: the server drains with Shutdown; the client sees
// GOAWAY, cannot start new requests, and closes the session with NO_ERROR
// once its last subscription ends, which ends the server's Shutdown.
func TestIntegrationGoaway(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			h := newAcceptAll()
			p := newPair(t, tr.scheme, &Config{Handler: h}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			<-h.served

			shut := make(chan error, 1)
			go func() { shut <- p.server.Shutdown(ctx, "moqt://elsewhere.example/live") }()
			waitDone(t, ctx, p.client.GoingAway(), "GOAWAY")
			assert.Equal(t, "moqt://elsewhere.example/live", p.client.GoawayURI())
			_, err = p.client.Subscribe(ctx, testTrack, wire.Params{})
			assert.ErrorIs(t, err, ErrGoingAway)

			require.NoError(t, sub.Close()) // migrate away: the last request ends
			require.NoError(t, <-shut)
			waitDone(t, ctx, p.client.Context().Done(), "client session")
			var se *SessionError
			require.ErrorAs(t, context.Cause(p.client.Context()), &se)
			assert.Equal(t, wire.NoError, se.Code)
			assert.False(t, se.Remote, "the client closes")
			require.ErrorAs(t, context.Cause(p.server.Context()), &se)
			assert.Equal(t, wire.NoError, se.Code)
			assert.True(t, se.Remote)
		})
	}
}

// TestIntegrationCloseWithError: the peer sees the code and reason, and
// both Contexts carry the *SessionError.
func TestIntegrationCloseWithError(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := newPair(t, tr.scheme, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, p.client.CloseWithError(wire.Unauthorized, "token expired"))
			waitDone(t, ctx, p.server.Context().Done(), "server session")
			var se *SessionError
			require.ErrorAs(t, context.Cause(p.server.Context()), &se)
			assert.Equal(t, wire.Unauthorized, se.Code)
			assert.Equal(t, "token expired", se.Reason)
			assert.True(t, se.Remote)
			require.ErrorAs(t, context.Cause(p.client.Context()), &se)
			assert.False(t, se.Remote)
			_, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			assert.ErrorAs(t, err, &se)
		})
	}
}
