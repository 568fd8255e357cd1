package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/moqt-go/moqt"
)

// clientFlags are the flags of every command that dials.
type clientFlags struct {
	pin    string
	quiet  bool
	debug  bool
	drafts draftFlag
	// closeTimeout, when set, is the session's Config.CloseTimeout.
	closeTimeout time.Duration
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.pin, "sha256", "", "trust the server by its certificate's SHA-256, `HASH`, as moqt relay prints it (hex or base64);\nneeded for a self-signed certificate, such as the one moqt relay makes;\nseveral, comma-separated, trust any of them (relays a GOAWAY may send to)")
	fs.BoolVar(&f.quiet, "q", false, "say nothing on stderr but errors")
	fs.BoolVar(&f.debug, "debug", false, "log the library's debug messages on stderr")
	f.drafts.register(fs)
}

// narrator writes a command's running commentary on stderr, one line each.
type narrator struct {
	w      io.Writer
	prefix string
	quiet  bool
}

func (n *narrator) say(format string, args ...any) {
	if n.quiet {
		return
	}
	fmt.Fprintf(n.w, n.prefix+format+"\n", args...)
}

// warn is said even with -q.
func (n *narrator) warn(format string, args ...any) {
	fmt.Fprintf(n.w, n.prefix+format+"\n", args...)
}

// dial checks rawURL, dials it and explains a failure in terms of what to
// do. h serves the requests the server opens (nil: refuse them).
func (f *clientFlags) dial(ctx context.Context, e *env, rawURL string, h moqt.Handler) (*moqt.Session, error) {
	if err := checkURL(rawURL); err != nil {
		return nil, err
	}
	cfg := &moqt.Config{Handler: h, Logger: f.logger(e.stderr),
		// A publisher that writes many small groups at once opens a stream
		// for each: room for many, so that a burst does not leave it more
		// streams waiting for credit than it may (and end the subscription
		// as too far behind).
		MaxIncomingUniStreams: 1000,
		Versions:              f.drafts.versions,
		CloseTimeout:          f.closeTimeout}
	if f.pin != "" {
		// Several, comma-separated: the servers a GOAWAY may send to.
		for pin := range strings.SplitSeq(f.pin, ",") {
			sum, err := parseCertificateHash(pin)
			if err != nil {
				return nil, usagef("-sha256: %v", err)
			}
			cfg.ServerCertificateHashes = append(cfg.ServerCertificateHashes, sum)
		}
	}
	s, err := moqt.Dial(ctx, rawURL, cfg)
	if err != nil {
		return nil, explainDialError(err, rawURL, f.pin != "")
	}
	return s, nil
}

// logger is the library's: warnings and errors only, unless -debug.
func (f *clientFlags) logger(w io.Writer) *slog.Logger {
	level := slog.LevelError
	if f.debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// urlForms names the two kinds of URL, for error messages.
const urlForms = "moqt://HOST:PORT/ (raw QUIC) or https://HOST:PORT/ (WebTransport)"

// checkURL refuses a URL Dial cannot use, saying what would do.
func checkURL(rawURL string) error {
	if !strings.Contains(rawURL, "://") {
		return usagef("URL %q has no scheme: write %s, such as moqt://%s/", rawURL, urlForms, strings.TrimSuffix(rawURL, "/"))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return usagef("URL %q: %v; write %s", rawURL, err, urlForms)
	}
	if u.Scheme != "moqt" && u.Scheme != "https" {
		return usagef("URL %q: scheme %q is neither: write %s", rawURL, u.Scheme, urlForms)
	}
	if u.Hostname() == "" {
		return usagef("URL %q has no host: write %s", rawURL, urlForms)
	}
	return nil
}

// parseCertificateHash reads a certificate's SHA-256 as moqt relay prints
// it: 64 hex digits (colons allowed, as openssl prints them), or base64.
// moqt.ParseCertificateHash will replace it.
func parseCertificateHash(s string) ([32]byte, error) {
	sum, err := moqt.ParseCertificateHash(s)
	if err != nil {
		return sum, fmt.Errorf("%w: want the SHA-256 moqt relay prints (64 hex digits, or base64)", err)
	}
	return sum, nil
}

// explainDialError says why Dial failed and what to do about it, in the
// command's words (-sha256).
func explainDialError(err error, rawURL string, pinned bool) error {
	host := rawURL
	if u, perr := url.Parse(rawURL); perr == nil {
		host = u.Host
	}
	var te *moqt.TransportError
	switch {
	case pinned && errors.Is(err, moqt.ErrUntrustedCertificate):
		return fmt.Errorf("%s's certificate is not the one -sha256 pins: a relay with a self-signed certificate makes a new one each time it starts, "+
			"so use the -sha256 it printed last (%w)", host, err)
	case errors.Is(err, moqt.ErrUntrustedCertificate):
		return fmt.Errorf("%s's certificate is not trusted (it is self-signed, or signed by an unknown authority): "+
			"pin it with -sha256 HASH, the SHA-256 that moqt relay printed when it started (%w)", host, err)
	case errors.As(err, &te) && strings.Contains(err.Error(), "timeout"):
		return fmt.Errorf("no answer from %s: is a relay running there, on that UDP port? (%w)", host, err)
	case errors.Is(err, moqt.ErrConnectionRefused):
		return fmt.Errorf("%s refused the connection: it is too busy (%w)", host, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s in time: is a relay running there? (%w)", host, err)
	}
	return fmt.Errorf("connecting to %s: %w", host, err)
}

// transportName says which transport a session runs on.
func transportName(s *moqt.Session) string {
	if s.WebTransport() {
		return "WebTransport"
	}
	return "raw QUIC"
}

// timeText renders d for people: 1.5s, 250ms.
func timeText(d time.Duration) string { return d.Round(time.Millisecond).String() }
