// Command relay is a MoQT relay: it serves raw QUIC (moqt-21, moqt-20) and
// WebTransport on one UDP port and routes between the publishers and
// subscribers that connect to it, with the relay package.
//
//	go run ./examples/relay -listen 127.0.0.1:4443
//	go run ./examples/relay -listen 127.0.0.1:4444 -upstream moqt://127.0.0.1:4443/ -upstream-sha256 HEX
//
// Without -cert and -key it makes a fresh self-signed ECDSA certificate,
// valid for less than 14 days, and prints its SHA-256 for browsers'
// serverCertificateHashes (and for another relay's -upstream-sha256).
// With -upstream it chains to another relay: what no session here
// publishes is asked for there.
//
// It is a demo: every request is authorized (relay.AllowAll). A real relay
// decides each one, and each of its updates, in its Authorize hook, from
// the request's authorization tokens and the session's PATH and AUTHORITY.
//
// SIGINT or SIGTERM stops it cleanly: every session is sent GOAWAY and
// drained for a few seconds, then closed.
package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
)

// drainTimeout bounds how long sessions may take to leave after GOAWAY.
const drainTimeout = 3 * time.Second

// options are the command line's.
type options struct {
	listen           string
	certFile         string
	keyFile          string
	upstream         string     // URL of the relay to chain to; empty for none
	upstreamCertHash [][32]byte // pinned certificates of the upstream, if self-signed
}

func main() {
	var o options
	flag.StringVar(&o.listen, "listen", "127.0.0.1:4443", "UDP address to serve raw QUIC and WebTransport on")
	flag.StringVar(&o.certFile, "cert", "", "TLS certificate (PEM); a self-signed one is made when empty")
	flag.StringVar(&o.keyFile, "key", "", "TLS key (PEM)")
	flag.StringVar(&o.upstream, "upstream", "", "relay to chain to (moqt:// or https:// URL); none when empty")
	upstreamHash := flag.String("upstream-sha256", "", "SHA-256 (hex or base64) of the upstream's certificate, for a self-signed one")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\n"+
			"A MoQT relay on one UDP port (raw QUIC and WebTransport).\n"+
			"Every request is authorized (allow-all): it is a demo, not for an open network.\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *upstreamHash != "" {
		sum, err := moqt.ParseCertificateHash(*upstreamHash)
		if err != nil {
			fmt.Fprintln(os.Stderr, "-upstream-sha256:", err)
			os.Exit(2)
		}
		o.upstreamCertHash = [][32]byte{sum}
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log, nil); err != nil {
		log.Error("relay failed", "err", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then drains every session. ready, if set,
// is called with the server's address once it listens.
func run(ctx context.Context, o options, log *slog.Logger, ready func(net.Addr)) error {
	cert, err := loadOrMakeCertificate(o.listen, o.certFile, o.keyFile, log)
	if err != nil {
		return err
	}
	cfg := relay.Config{
		// The demo authorizes everything; see the package comment.
		Authorize: relay.AllowAll,
		Logger:    log,
	}
	var upCfg *moqt.Config
	if o.upstream != "" {
		upCfg = &moqt.Config{ServerCertificateHashes: o.upstreamCertHash, Logger: log.With("upstream", o.upstream)}
		up := relay.DialUpstream(o.upstream, upCfg)
		defer up.Close()
		cfg.Upstream = up
		log.Info("chaining", "upstream", o.upstream)
	}
	r := relay.New(cfg)
	if upCfg != nil {
		// The upstream's requests this way (the PUBLISHes of a
		// SUBSCRIBE_TRACKS) are the relay's too.
		upCfg.Handler = r
	}
	srv, err := moqt.Listen(o.listen, &moqt.Config{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Logger:    log,
		Handler:   r,
	}, &moqt.ServerOptions{CheckOrigin: func(*http.Request) bool { return true }, DrainTimeout: drainTimeout})
	if err != nil {
		return err
	}
	log.Info("serving", "addr", srv.Addr().String(),
		"raw_quic", "moqt://"+srv.Addr().String()+"/", "webtransport", "https://"+srv.Addr().String()+"/")
	if ready != nil {
		ready(srv.Addr())
	}

	// Serve accepts every session; when ctx ends it sends each GOAWAY,
	// gives it ServerOptions.DrainTimeout to leave, then closes it.
	err = srv.Serve(ctx)
	return errors.Join(err, r.Close(), srv.Close())
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
