// Package relayserve runs a relay.Relay on one UDP port, raw QUIC and
// WebTransport, until its context ends, then drains it with GOAWAY: what
// `moqt relay` (cmd/moqt) and examples/relay both run. It takes no flags and
// exports no metrics format; the commands do that.
package relayserve

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// DefaultDrainTimeout bounds how long sessions may take to leave after
// GOAWAY.
const DefaultDrainTimeout = 3 * time.Second

// Options configure Run. Zero fields mean the documented defaults.
type Options struct {
	// Listen is the UDP address to serve raw QUIC and WebTransport on.
	Listen string
	// CertFile and KeyFile are a PEM key pair. Both empty: a fresh
	// self-signed certificate (moqt.GenerateCertificate) for the loopback
	// addresses and Listen's host.
	CertFile, KeyFile string
	// Upstream, if set, is the URL of a relay to chain to: what no session
	// here publishes is asked for there. UpstreamCertHashes pin its
	// certificate when it is self-signed.
	Upstream           string
	UpstreamCertHashes [][32]byte
	// Metrics receives the relay's counters. Default: none kept.
	Metrics relay.Metrics
	// DrainTimeout bounds the drain after ctx ends. Default
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// NewSessionURI, if set, is the New Session URI of the drain's GOAWAY:
	// where the clients are to go on (moqt.ServerOptions.NewSessionURI).
	NewSessionURI string
	// MaxSessionsPerSource bounds the sessions one source holds at once
	// (moqt.ServerOptions.MaxSessionsPerSource). Default 0: no bound.
	MaxSessionsPerSource int
	// Logger receives the relay's and its sessions' logs. Default:
	// slog.Default().
	Logger *slog.Logger
	// Versions are the MoQT drafts served, and offered upstream, preferred
	// first. Default: every draft the library speaks.
	Versions []wire.Version
	// Draining, if set, is called once ctx has ended, before the sessions
	// are sent GOAWAY: a health check turns unhealthy then.
	Draining func()
	// Join, if set, joins the relay to something larger, such as a
	// cluster: it gets the relay's configuration and certificate hash
	// before the relay is made, and returns the configuration to make it
	// with and start, called with the relay once it serves. An error stops
	// Run.
	Join func(cfg relay.Config, certHash [32]byte) (relay.Config, func(*relay.Relay), error)
}

// Info is what Run reports once it serves.
type Info struct {
	// Addr is the UDP address served.
	Addr net.Addr
	// CertHash is the SHA-256 of the served certificate's DER encoding:
	// what a client pins (moqt.Config.ServerCertificateHashes, a browser's
	// serverCertificateHashes) to trust a self-signed one.
	CertHash [32]byte
	// SelfSigned reports a certificate Run made itself.
	SelfSigned bool
}

// Run serves a relay that authorizes every request (relay.AllowAll: a demo,
// not for an open network) until ctx ends, then sends every session GOAWAY,
// waits up to DrainTimeout for them to leave, and returns nil once they
// are gone. ready, if set, is called once it serves.
func Run(ctx context.Context, o Options, ready func(Info)) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	cert, selfSigned, err := loadOrMakeCertificate(o.Listen, o.CertFile, o.KeyFile)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(cert.Certificate[0])
	if selfSigned {
		log.Info("self-signed certificate", "sha256", hex.EncodeToString(sum[:]),
			"sha256_base64", base64.StdEncoding.EncodeToString(sum[:]))
	}
	cfg := relay.Config{
		// A demo authorizes everything; a real relay decides each request,
		// and each of its updates, from its tokens and the session's path.
		Authorize: relay.AllowAll,
		Logger:    log,
		Metrics:   o.Metrics,
	}
	var upCfg *moqt.Config
	if o.Upstream != "" {
		upCfg = &moqt.Config{ServerCertificateHashes: o.UpstreamCertHashes, Logger: log.With("upstream", o.Upstream), Versions: o.Versions}
		up := relay.DialUpstream(o.Upstream, upCfg)
		defer up.Close()
		cfg.Upstream = up
		log.Info("chaining", "upstream", o.Upstream)
	}
	var start func(*relay.Relay)
	if o.Join != nil {
		if cfg, start, err = o.Join(cfg, sum); err != nil {
			return err
		}
	}
	r := relay.New(cfg)
	if upCfg != nil {
		// The upstream's requests this way (the PUBLISHes of a
		// SUBSCRIBE_TRACKS) are the relay's too.
		upCfg.Handler = r
	}
	srv, err := moqt.Listen(o.Listen, &moqt.Config{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Logger:    log,
		Handler:   r,
		Versions:  o.Versions,
	}, &moqt.ServerOptions{CheckOrigin: func(*http.Request) bool { return true }, DrainTimeout: o.DrainTimeout,
		NewSessionURI: o.NewSessionURI, MaxSessionsPerSource: o.MaxSessionsPerSource,
		// Counted from setup, not from a first request: idle sessions too.
		CheckSetup: func(s *moqt.Session, _ *wire.Setup) error { r.Watch(s); return nil }})
	if err != nil {
		_ = r.Close()
		return err
	}
	drafts := o.Versions
	if len(drafts) == 0 {
		drafts = wire.Versions
	}
	log.Info("serving", "addr", srv.Addr().String(), "drafts", fmt.Sprint(drafts),
		"raw_quic", "moqt://"+srv.Addr().String()+"/", "webtransport", "https://"+srv.Addr().String()+"/")
	if start != nil {
		start(r)
	}
	if ready != nil {
		ready(Info{Addr: srv.Addr(), CertHash: sum, SelfSigned: selfSigned})
	}
	serveCtx := ctx
	if o.Draining != nil {
		// Draining runs before the drain begins, not beside it: a health
		// check says 503 by the time sessions get GOAWAY.
		var cancel context.CancelFunc
		serveCtx, cancel = context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		stop := context.AfterFunc(ctx, func() {
			o.Draining()
			cancel()
		})
		defer stop()
	}
	// Serve accepts every session; when ctx ends it sends each GOAWAY,
	// gives it DrainTimeout to leave, then closes it.
	err = srv.Serve(serveCtx)
	return errors.Join(err, r.Close(), srv.Close())
}

// loadOrMakeCertificate loads the given key pair, or makes a fresh
// self-signed certificate for the loopback addresses and addr's host.
func loadOrMakeCertificate(addr, certFile, keyFile string) (cert tls.Certificate, selfSigned bool, err error) {
	if certFile != "" || keyFile != "" {
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
		return cert, false, err
	}
	hosts := []string{"127.0.0.1", "::1", "localhost"}
	if host, _, err := net.SplitHostPort(addr); err == nil && host != "" && !slices.Contains(hosts, host) {
		hosts = append(hosts, host)
	}
	cert, _, err = moqt.GenerateCertificate(hosts...)
	return cert, true, err
}
