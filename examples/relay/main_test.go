package main

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRelayServesAndDrains: the relay serves raw QUIC and WebTransport on
// one port with the given key pair, answers a SUBSCRIBE for a track nobody
// publishes with DOES_NOT_EXIST (the relay has no publisher for it), and
// on shutdown sends every session GOAWAY, then returns once they are gone.
func TestRelayServesAndDrains(t *testing.T) {
	cert, hash, err := moqt.GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	defer stop()
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(serveCtx, options{listen: "127.0.0.1:0", certFile: certFile, keyFile: keyFile}, slog.New(slog.DiscardHandler), func(a net.Addr) { addrs <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-addrs:
	case err := <-done:
		require.FailNow(t, "the relay did not start", "%v", err)
	}

	track := wire.FullTrackName{Namespace: wire.NewNamespace("demo"), Name: []byte("clock")}
	var sessions []*moqt.Session
	for _, scheme := range []string{"moqt", "https"} {
		s, err := moqt.Dial(ctx, scheme+"://"+addr.String()+"/", &moqt.Config{
			ServerCertificateHashes: [][32]byte{hash},
			Logger:                  slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err, scheme)
		assert.Equal(t, scheme == "https", s.WebTransport())
		_, err = s.Subscribe(ctx, track, wire.Params{})
		var re *moqt.RequestError
		require.ErrorAs(t, err, &re, scheme)
		assert.Equal(t, wire.ReqDoesNotExist, re.Code)
		sessions = append(sessions, s)
	}

	// On shutdown each session gets GOAWAY and, with nothing open, closes
	// itself with NO_ERROR, which lets the relay's drain end.
	stop()
	waitGoAway(t, ctx, sessions)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		require.FailNow(t, "the relay did not stop")
	}
}

// waitGoAway asserts that each session gets GOAWAY, then ends with
// NO_ERROR: with nothing open it closes itself, or the relay closes it
// after its drain.
func waitGoAway(t *testing.T, ctx context.Context, sessions []*moqt.Session) {
	t.Helper()
	for _, s := range sessions {
		select {
		case <-s.GoingAway():
		case <-s.Context().Done():
			// Say how it ended, rather than wait for ctx.
			select {
			case <-s.GoingAway():
			default:
				require.FailNow(t, "the session ended without GOAWAY", "%v", context.Cause(s.Context()))
			}
		case <-ctx.Done():
			require.FailNow(t, "no GOAWAY")
		}
		select {
		case <-s.Context().Done():
		case <-ctx.Done():
			require.FailNow(t, "the session did not close after GOAWAY")
		}
		var se *moqt.SessionError
		require.ErrorAs(t, context.Cause(s.Context()), &se)
		assert.Equal(t, wire.NoError, se.Code)
	}
}
