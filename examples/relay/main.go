// Command relay is a MoQT relay: it serves raw QUIC (moqt-21 to moqt-18) and
// WebTransport on one UDP port and routes between the publishers and
// subscribers that connect to it, with the relay package. It is `moqt relay`
// (cmd/moqt) without metrics: both run internal/relayserve, whose Run shows
// how a relay.Relay is embedded (moqt.Listen, an accept loop, GOAWAY and a
// drain at the end).
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
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/relayserve"
)

// drainTimeout bounds how long sessions may take to leave after GOAWAY.
const drainTimeout = relayserve.DefaultDrainTimeout

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
	upstreamHash := flag.String("upstream-sha256", "", "SHA-256 (hex) of the upstream's certificate, for a self-signed one")
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
	return relayserve.Run(ctx, relayserve.Options{
		Listen:             o.listen,
		CertFile:           o.certFile,
		KeyFile:            o.keyFile,
		Upstream:           o.upstream,
		UpstreamCertHashes: o.upstreamCertHash,
		DrainTimeout:       drainTimeout,
		Logger:             log,
	}, func(info relayserve.Info) {
		if ready != nil {
			ready(info.Addr)
		}
	})
}
