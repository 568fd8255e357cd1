package moqt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// pair is a client and a server session connected over real loopback QUIC
// or WebTransport.
type pair struct {
	client, server *Session
	srv            *Server
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
	cert, _, err := GenerateCertificate()
	require.NoError(t, err)
	srv, err := Listen("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}}, serverCfg, nil)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	if clientCfg == nil {
		clientCfg = &Config{}
	}
	clientCfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan *Session, 1)
	go func() {
		s, err := srv.Accept(ctx)
		if err == nil {
			accepted <- s
		}
		close(accepted)
	}()
	client, err := Dial(ctx, scheme+"://"+srv.Addr().String()+"/live?x=1", clientCfg)
	require.NoError(t, err)
	server, ok := <-accepted
	require.True(t, ok, "server accepted no session")
	p := &pair{client: client, server: server, srv: srv}
	t.Cleanup(func() {
		client.Close()
		server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
		srv.Close()
	})
	return p
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

func TestIntegrationSubscribeDefaultRejects(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			p := newPair(t, tr.scheme, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			var re *RequestError
			require.ErrorAs(t, err, &re)
			assert.Equal(t, wire.ReqDoesNotExist, re.Code)
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
				ss, err := sr.Accept(AcceptOptions{Largest: wire.Some(wire.Location{Group: 4, Object: 2})})
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
			assert.Equal(t, StateEstablished, sub.State())
			assert.Equal(t, ss.TrackAlias(), sub.TrackAlias())
			largest, ok := sub.Largest()
			require.True(t, ok)
			assert.Equal(t, wire.Location{Group: 4, Object: 2}, largest)
			assert.True(t, ss.Forward())

			require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(false)}))
			assert.False(t, ss.Forward())
			assert.False(t, sub.Forward())

			require.NoError(t, ss.Done(wire.DoneTrackEnded, "bye"))
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

func TestIntegrationSubscriberCancel(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			served := make(chan *ServedSubscription, 1)
			serverCfg := &Config{Handler: HandlerFunc(func(r Request) {
				ss, err := r.(*SubscribeRequest).Accept(AcceptOptions{})
				if err == nil {
					served <- ss
				}
			})}
			p := newPair(t, tr.scheme, serverCfg, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			ss := <-served
			require.NoError(t, sub.Close())
			select {
			case <-ss.Context().Done():
			case <-ctx.Done():
				t.Fatal("publisher did not see the cancellation")
			}
			assert.Equal(t, StateTerminated, ss.State())
			assert.True(t, errors.Is(ss.Err(), ErrCancelled))
		})
	}
}
