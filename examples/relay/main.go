// Command relay serves MoQT over raw QUIC (moqt-21, moqt-20) and WebTransport
// on one UDP port.
//
//	go run ./examples/relay -listen 127.0.0.1:4443
//
// Without -cert and -key it makes a fresh self-signed ECDSA certificate,
// valid for less than 14 days, and prints its SHA-256 for browsers'
// serverCertificateHashes. Requests are answered by moqt.DefaultHandler
// until routing lands. SIGINT or SIGTERM stops it cleanly: every session is
// sent GOAWAY and drained for a few seconds, then closed.
package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/moqt-go/moqt"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4443", "UDP address to serve raw QUIC and WebTransport on")
	certFile := flag.String("cert", "", "TLS certificate (PEM); a self-signed one is made when empty")
	keyFile := flag.String("key", "", "TLS key (PEM)")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Parse()

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, *certFile, *keyFile, log, nil); err != nil {
		log.Error("relay failed", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then drains every session. ready, if set,
// is called with the server's address once it listens.
func run(ctx context.Context, addr, certFile, keyFile string, log *slog.Logger, ready func(net.Addr)) error {
	cert, err := loadOrMakeCertificate(addr, certFile, keyFile, log)
	if err != nil {
		return err
	}
	srv, err := moqt.Listen(addr, &moqt.Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Logger: log},
		&moqt.ServerOptions{CheckOrigin: func(*http.Request) bool { return true }})
	if err != nil {
		return err
	}
	log.Info("serving", "addr", srv.Addr().String(),
		"raw_quic", "moqt://"+srv.Addr().String()+"/", "webtransport", "https://"+srv.Addr().String()+"/")
	if ready != nil {
		ready(srv.Addr())
	}

	var (
		mu       sync.Mutex
		sessions = map[*moqt.Session]struct{}{}
		wg       sync.WaitGroup
	)
	for {
		s, err := srv.Accept(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				break
			}
			return err
		}
		log.Info("session", "webtransport", s.WebTransport(),
			"version", s.Version().String(), "path", s.Path(), "peer", s.PeerSetup().MoqtImplementation.Value)
		mu.Lock()
		sessions[s] = struct{}{}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-s.Context().Done()
			mu.Lock()
			delete(sessions, s)
			mu.Unlock()
			log.Info("session ended", "cause", context.Cause(s.Context()))
		}()
	}

	log.Info("shutting down: sending GOAWAY")
	drain, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	mu.Lock()
	for s := range sessions {
		go s.Shutdown(drain, "")
	}
	mu.Unlock()
	wg.Wait()
	return srv.Close()
}

// loadOrMakeCertificate loads the given key pair, or makes a fresh
// self-signed certificate for the loopback addresses and prints its hash.
func loadOrMakeCertificate(addr, certFile, keyFile string, log *slog.Logger) (tls.Certificate, error) {
	if certFile != "" || keyFile != "" {
		return tls.LoadX509KeyPair(certFile, keyFile)
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	cert, sum, err := moqt.GenerateCertificate(hosts...)
	if err != nil {
		return tls.Certificate{}, err
	}
	log.Info("self-signed certificate", "sha256", hex.EncodeToString(sum[:]),
		"sha256_base64", base64.StdEncoding.EncodeToString(sum[:]))
	return cert, nil
}
