package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/moqt-go/moqt/internal/relayserve"
)

var relayCommand = &command{
	name:  "relay",
	args:  "",
	short: "run a relay: publishers and subscribers meet there (raw QUIC and WebTransport, one UDP port)",
	long: `
Runs a MoQT relay on one UDP port, serving raw QUIC (moqt://) and WebTransport
(https://, what browsers speak) side by side. Publishers announce to it or
publish through it, subscribers subscribe through it; it subscribes to a
publisher once someone wants the track, fans objects out to every subscriber,
and keeps recent objects for late joiners and FETCH.

Without -cert and -key it makes a fresh self-signed certificate, valid for
less than 14 days, and prints its SHA-256: the "pin". Clients trust the relay
by it (moqt's -sha256, a browser's serverCertificateHashes) instead of by a
certificate authority. It changes each time the relay starts.

It authorizes every request: it is for development and demos, not for an
open network. -upstream chains it to another relay: what no session here
publishes is asked for there.

-cluster nats://HOST:PORT joins a cluster of relays coordinated through NATS
(JetStream): a subscriber at any relay of it gets what is published at any
other, and SUBSCRIBE_NAMESPACE sees every relay's namespaces. -nats-embedded
runs the NATS server inside this relay, at that address, for a trial on one
host: start one relay with it, the others with the same -cluster. The relays
present -cluster-token to one another; give it on a real network.

-web ADDR serves a web page over HTTP, such as -web 127.0.0.1:8080, and the
banner prints its URL: open it in a browser. The page connects to the relay
over WebTransport (pinning the self-signed certificate for you), watches a
track, showing its objects as they come, and publishes what you type as a
track of its own, which another tab or moqt sub can watch. Over plain HTTP
browsers allow WebTransport only from 127.0.0.1 or localhost. The page's
script is @moq/net (JavaScript), which can only join a track before its
first object (see the page).

-metrics ADDR serves, over HTTP, /metrics (Prometheus text format: sessions,
requests by kind and outcome, objects and bytes in and out, drops by reason,
subscribers cut) and /healthz (200 while serving, 503 while draining).

Ctrl-C or SIGTERM stops it cleanly: every session gets GOAWAY and a few
seconds to leave, then it exits with status 0. With -goaway-uri the GOAWAY
sends clients to another relay (moqt sub follows it); without, they
reconnect to the URL they used.`,
	maxArgs: 0,
	setup:   relaySetup,
}

// defaultMaxSessionsPerSource is -max-sessions-per-source's default: far
// more than one host's subscribers need, and a bound on what a host that
// opens sessions and leaves them idle costs (about 140 KB each).
const defaultMaxSessionsPerSource = 1000

func relaySetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var o relayserve.Options
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:4443", "UDP `address` to serve raw QUIC and WebTransport on (:4443 for every interface)")
	fs.StringVar(&o.CertFile, "cert", "", "TLS certificate `file` (PEM); a self-signed one is made when empty")
	fs.StringVar(&o.KeyFile, "key", "", "TLS key `file` (PEM)")
	fs.StringVar(&o.Upstream, "upstream", "", "`URL` of a relay to chain to (moqt:// or https://)")
	upstreamPin := fs.String("upstream-sha256", "", "SHA-256 of the upstream relay's certificate, as it printed it (hex or base64), for a self-signed one")
	metricsAddr := fs.String("metrics", "", "TCP `address` to serve /metrics (Prometheus) and /healthz on over HTTP, such as 127.0.0.1:9090")
	webAddr := fs.String("web", "", "TCP `address` to serve the web page on over HTTP, such as 127.0.0.1:8080")
	fs.DurationVar(&o.DrainTimeout, "drain", relayserve.DefaultDrainTimeout, "how long sessions get to leave after GOAWAY when stopping")
	fs.StringVar(&o.NewSessionURI, "goaway-uri", "", "when stopping, send clients to this `URL` (the GOAWAY's New Session URI), such as another relay; empty: they reconnect to the URL they used")
	fs.IntVar(&o.MaxSessionsPerSource, "max-sessions-per-source", defaultMaxSessionsPerSource,
		"the most sessions one source (IPv4 address, IPv6 /64) may hold at once; 0 for no bound")
	var drafts draftFlag
	drafts.register(fs)
	var cl clusterFlags
	cl.register(fs)
	verbose := fs.Bool("v", false, "log every request (debug level)")
	quiet := fs.Bool("q", false, "log warnings and errors only")
	return func(ctx context.Context, e *env, _ []string) error {
		o.Versions = drafts.versions
		if *upstreamPin != "" {
			sum, err := parseCertificateHash(*upstreamPin)
			if err != nil {
				return usagef("-upstream-sha256: %v", err)
			}
			o.UpstreamCertHashes = [][32]byte{sum}
		}
		if o.Upstream != "" {
			if err := checkURL(o.Upstream); err != nil {
				return usagef("-upstream: %v", err)
			}
		}
		if o.NewSessionURI != "" {
			if err := checkURL(o.NewSessionURI); err != nil {
				return usagef("-goaway-uri: %v", err)
			}
		}
		if (o.CertFile == "") != (o.KeyFile == "") {
			return usagef("-cert and -key go together")
		}
		level := slog.LevelInfo
		switch {
		case *verbose:
			level = slog.LevelDebug
		case *quiet:
			level = slog.LevelWarn
		}
		o.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
		stop, err := cl.join(&o, o.Logger)
		if err != nil {
			return err
		}
		defer stop()
		return runRelay(ctx, e, o, *metricsAddr, *webAddr)
	}
}

// runRelay serves until ctx ends, with the metrics and health endpoint on
// metricsAddr and the web page on webAddr, each if set.
func runRelay(ctx context.Context, e *env, o relayserve.Options, metricsAddr, webAddr string) (err error) {
	met := newRelayMetrics()
	o.Metrics = met
	var web *webServer
	if webAddr != "" {
		if web, err = listenWeb(webAddr); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, web.close()) }()
	}
	var httpSrv *http.Server
	var httpDone chan error
	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("-metrics: %w", err)
		}
		httpSrv = &http.Server{Handler: metricsHandler(met), ReadHeaderTimeout: 10 * time.Second}
		httpDone = make(chan error, 1)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = httpSrv.Shutdown(sctx)
			<-httpDone
		}()
		go func() { httpDone <- httpSrv.Serve(ln) }()
		o.Logger.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics", "health", "http://"+ln.Addr().String()+"/healthz")
	}
	// Health turns to 503 as soon as the relay starts draining.
	o.Draining = func() { met.draining.Store(true) }
	err = relayserve.Run(ctx, o, func(info relayserve.Info) {
		pageURL := ""
		if web != nil {
			web.start(info)
			pageURL = web.url()
		}
		printRelayBanner(e, info, pageURL)
	})
	if err != nil {
		return err
	}
	if httpDone != nil {
		select {
		case err := <-httpDone:
			httpDone <- err
			if !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("-metrics: %w", err)
			}
		default:
		}
	}
	return nil
}

// metricsHandler serves /metrics and /healthz.
func metricsHandler(m *relayMetrics) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = m.writeText(w)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if m.draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "draining")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// printRelayBanner tells, on stdout, where the relay is and how to use it,
// with commands ready to paste; pageURL is the web page's, if served.
func printRelayBanner(e *env, info relayserve.Info, pageURL string) {
	host := clientHost(info.Addr)
	pin := hex.EncodeToString(info.CertHash[:])
	w := e.stdout
	fmt.Fprintf(w, "moqt relay: serving on UDP %s\n", info.Addr)
	fmt.Fprintf(w, "  raw QUIC:     moqt://%s/\n  WebTransport: https://%s/\n", host, host)
	if pageURL != "" {
		fmt.Fprintf(w, "  web page:     %s  (open it in a browser: it watches a track and publishes what you type)\n", pageURL)
	}
	fmt.Fprintln(w)
	// Only a certificate made at start changes at the next: one from
	// -cert keeps its pin, which clients and -upstream-sha256 may keep.
	changes := ""
	if info.SelfSigned {
		fmt.Fprintf(w, "Its certificate is self-signed, made just now. Clients trust it by its SHA-256, the pin:\n")
		changes = " It changes when the relay restarts."
	} else {
		fmt.Fprintf(w, "Clients that do not trust its certificate through an authority can pin its SHA-256:\n")
	}
	fmt.Fprintf(w, "  -sha256 %s\n", pin)
	fmt.Fprintf(w, "(browsers: serverCertificateHashes, base64 %s).%s\n\n",
		base64.StdEncoding.EncodeToString(info.CertHash[:]), changes)
	fmt.Fprintf(w, "Try, each in a terminal of its own:\n")
	fmt.Fprintf(w, "  moqt clock -sha256 %s moqt://%s/\n", pin, host)
	fmt.Fprintf(w, "  moqt sub -lines -sha256 %s moqt://%s/ clock time\n", pin, host)
	fmt.Fprintf(w, "or publish a file and subscribe to it (start either first):\n")
	fmt.Fprintf(w, "  moqt pub -sha256 %s moqt://%s/ NAMESPACE TRACK < FILE\n", pin, host)
	fmt.Fprintf(w, "  moqt sub -sha256 %s moqt://%s/ NAMESPACE TRACK > COPY\n\n", pin, host)
}

// clientHost is the host:port a client on this machine dials: the
// loopback address for a relay serving every interface.
func clientHost(a net.Addr) string {
	ua, ok := a.(*net.UDPAddr)
	if !ok {
		return a.String()
	}
	ip := ua.IP
	if ip == nil || ip.IsUnspecified() {
		if ip.To4() == nil && ip != nil {
			ip = net.IPv6loopback
		} else {
			ip = net.IPv4(127, 0, 0, 1)
		}
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(ua.Port))
}
