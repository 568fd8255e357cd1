package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// jsResult is what window.moqtInterop (js/client.js) resolves to.
type jsResult struct {
	Scenario              string    `json:"scenario"`
	WebTransportSupported bool      `json:"webTransportSupported"`
	Established           bool      `json:"established"`
	Error                 *string   `json:"error"`
	Version               string    `json:"version"`
	Transport             string    `json:"transport"`
	SubscribeClosed       bool      `json:"subscribeClosed"`
	SubscribeError        *string   `json:"subscribeError"`
	ClosedCleanly         bool      `json:"closedCleanly"`
	CloseError            *string   `json:"closeError"`
	Groups                []jsGroup `json:"groups"`
	// RequestedTracks are the tracks @moq/net was asked for as a
	// publisher (publish-broadcast).
	RequestedTracks []string `json:"requestedTracks"`
	// Published is how many groups the page wrote (publish-broadcast).
	Published int `json:"published"`
	// Announced are the namespace events @moq/net reported, in order
	// (discover-subscribe).
	Announced []jsAnnounce `json:"announced"`
}

// jsAnnounce is one event of @moq/net's announced(): a path relative to
// the prefix, and whether it became available or went away.
type jsAnnounce struct {
	Path   string `json:"path"`
	Active bool   `json:"active"`
}

// jsGroup is a group as @moq/net delivered it (client.js readGroup).
type jsGroup struct {
	Sequence uint64    `json:"sequence"`
	Frames   []jsFrame `json:"frames"`
	// Error is how the group ended: nil for a FIN, else the reset or
	// decoding error.
	Error *string `json:"error"`
}

// jsFrame is one object of a group: its index in the group and its
// payload, in hex.
type jsFrame struct {
	Index   uint64 `json:"index"`
	Payload string `json:"payload"`
}

// scenario is one run of the page, or of several pages at once, against a
// fresh moqt server.
type scenario struct {
	// name is the page's scenario (client.js).
	name string
	// namespace and track are what the page subscribes to. Default:
	// moqt-interop/missing and video.
	namespace, track string
	// params are more fields for the page's parameters.
	params map[string]any
	// browser, if set, is the draft the browser is held to by offering
	// only it (WebTransport protocols), for a server that offers more
	// (cfg.Versions). Default: the harness's draft, which the server alone
	// offers.
	browser *draft
	// pages, if set, replaces the fields above: one browser each, run at
	// the same time, each on its own path.
	pages []page
	// cfg is the server's Config; the harness sets its Logger, and its
	// Versions to the harness's draft alone unless set.
	cfg moqt.Config
	// onListen, if set, runs before the browser starts, with the server's
	// raw QUIC URL and the SHA-256 of its certificate, which the browser
	// pins too.
	onListen func(url string, certHash [32]byte)
	// onAccept, if set, runs in the accept goroutine with a browser's
	// session, while the browser is still connected.
	onAccept func(*moqt.Session)
	// kill, when it fires, SIGKILLs the driver and the browser.
	kill <-chan struct{}
	// sessionEnd bounds the wait for the browser's session to end once
	// the driver is gone. Default closeTimeout.
	sessionEnd time.Duration
	// beforeClose, if set, runs once the browsers' sessions have ended (or
	// the wait for them has), before the server closes, with the first
	// page's run.
	beforeClose func(r *run)
}

// page is one browser of a scenario.
type page struct {
	name             string // client.js scenario
	namespace, track string
	params           map[string]any
	// path is the URL path the browser connects to, by which the server
	// tells its session from the others'. Default serverPath.
	path string
	// held, if set, is the only draft the browser offers; else it offers
	// all its own and the server's offer decides.
	held *draft
}

// run is one browser's outcome on both sides.
type run struct {
	js      *jsResult
	session *moqt.Session // the session the server accepted, nil if none
	// closed is why that session ended.
	closed error
	// killedAt is when the browser was killed, zero if it was not.
	killedAt time.Time
	// endedAt is when the server saw the browser's session end.
	endedAt time.Time
}

// harness is what every scenario shares: the tools, the page and the
// browser, and the draft the scenarios run on.
type harness struct {
	tools
	pageURL    string
	pageOrigin string
	signals    *signals
	driver     *sharedDriver
	draft      draft
}

// goConfig is a Config for the test's Go peers, which speak the harness's
// draft.
func (h *harness) goConfig(certHash [32]byte, logger *slog.Logger, handler moqt.Handler) *moqt.Config {
	return &moqt.Config{ServerCertificateHashes: [][32]byte{certHash}, Logger: logger, Handler: handler,
		Versions: h.draft.versions()}
}

// runScenario runs a scenario of one page; see runPages.
func (h *harness) runScenario(t *testing.T, sc scenario) run {
	t.Helper()
	require.Empty(t, sc.pages, "runScenario runs one page")
	return h.runPages(t, sc)[0]
}

// runPages starts a moqt server, runs the scenario's pages, each in a
// browser of its own and all at once, and returns what both sides saw of
// each. Raw QUIC sessions (the test's own Go peers) are accepted alongside
// the browsers' and closed with the server.
func (h *harness) runPages(t *testing.T, sc scenario) []run {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(newLogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	pages := sc.pages
	if len(pages) == 0 {
		pages = []page{{name: sc.name, namespace: sc.namespace, track: sc.track, params: sc.params, held: sc.browser}}
	}
	byPath := map[string]int{}
	for i := range pages {
		if pages[i].path == "" {
			pages[i].path = serverPath
		}
		byPath[pages[i].path] = i
	}
	require.Len(t, byPath, len(pages), "two pages on one path")

	cert, hash, err := moqt.GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	cfg := sc.cfg
	cfg.Logger = logger
	if cfg.Versions == nil {
		cfg.Versions = h.draft.versions()
	}
	cfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	// set up gets each page's first session once its SETUP is done: one
	// the browser closes at once can end before Accept hands it over (the
	// server drops a session that ends while it waits for Accept), as a
	// page's 8 ms session did on a loaded machine.
	setUp := make([]chan *moqt.Session, len(pages))
	for i := range setUp {
		setUp[i] = make(chan *moqt.Session, 1)
	}
	srv, err := moqt.Listen("127.0.0.1:0", &cfg,
		&moqt.ServerOptions{CheckOrigin: func(r *http.Request) bool {
			origin := r.Header.Get("Origin")
			ok := origin == h.pageOrigin
			logger.Debug("WebTransport CONNECT", "origin", origin, "accepted", ok, "path", r.URL.Path,
				"wt-available-protocols", r.Header.Values("WT-Available-Protocols"))
			return ok
		}, CheckSetup: func(s *moqt.Session, _ *wire.Setup) error {
			if i, ok := byPath[s.Path()]; ok && s.WebTransport() {
				select {
				case setUp[i] <- s:
				default:
				}
			}
			return nil
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	sessionEnd := sc.sessionEnd
	if sessionEnd == 0 {
		sessionEnd = closeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), driverTimeout+sessionEnd)
	defer cancel()
	// Every page opens exactly one WebTransport session; more would be a
	// finding.
	accepted := make([]chan *moqt.Session, len(pages))
	for i := range accepted {
		accepted[i] = make(chan *moqt.Session, 1)
	}
	var extra []*moqt.Session // owned by the accept goroutine until acceptDone
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		for {
			s, err := srv.Accept(ctx)
			if err != nil {
				return
			}
			logger.Info("session accepted", "version", s.Version().String(), "path", s.Path(), "webtransport", s.WebTransport())
			if !s.WebTransport() {
				continue // a Go peer of the test's; the server closes it
			}
			i, ok := byPath[s.Path()]
			if ok {
				select {
				case accepted[i] <- s:
				default:
					ok = false
				}
			}
			if !ok {
				extra = append(extra, s)
				_ = s.CloseWithError(wire.InternalError, "interop: one session per page")
				continue
			}
			if sc.onAccept != nil {
				sc.onAccept(s)
			}
		}
	}()

	if sc.onListen != nil {
		sc.onListen("moqt://"+srv.Addr().String()+serverPath, hash)
	}

	runs := make([]run, len(pages))
	outs := make([]driverOutput, len(pages))
	errs := make([]error, len(pages))
	var wg sync.WaitGroup
	took := make([]time.Duration, len(pages))
	for i, p := range pages {
		wg.Go(func() {
			start := time.Now()
			serverURL := "https://" + srv.Addr().String() + p.path
			outs[i], errs[i] = h.runDriver(ctx, sc.kill, p, serverURL, hex.EncodeToString(hash[:]), &runs[i])
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i, p := range pages {
		t.Logf("driver: %s on %s in %v", p.name, p.path, took[i].Round(time.Millisecond))
		logDriverOutput(t, p, outs[i])
		require.NoError(t, errs[i], "the driver of %s", p.path)
		runs[i].js = outs[i].Result
	}
	for i := range runs {
		r := &runs[i]
		select {
		case r.session = <-accepted[i]:
		case s := <-setUp[i]:
			select {
			case r.session = <-accepted[i]:
			case <-s.Context().Done():
				r.session = s // ended before Accept took it
			case <-time.After(closeTimeout):
			}
		case <-time.After(closeTimeout):
		}
		if r.session == nil {
			continue
		}
		// The browser has exited, or closed the page's context, which
		// ends its WebTransport session: at once when it closed it, after
		// the idle timeout when it was killed.
		select {
		case <-r.session.Context().Done():
			r.endedAt = time.Now()
			r.closed = context.Cause(r.session.Context())
			logger.Info("session ended", "path", pages[i].path, "cause", r.closed)
		case <-time.After(sessionEnd):
			r.closed = errors.New("session still open after the browser exited")
		}
	}
	if sc.beforeClose != nil {
		sc.beforeClose(&runs[0])
	}
	for _, r := range runs {
		if r.session != nil {
			_ = r.session.Close()
		}
	}
	cancel()
	<-acceptDone
	require.NoError(t, srv.Close())
	assert.Empty(t, extra, "a browser opened more than one session")
	for i, p := range pages {
		r := runs[i]
		if r.killedAt.IsZero() {
			require.NotNil(t, r.js, "the driver of %s produced no result: %s", p.path, outs[i].DriverError)
		}
		// Both sides speak the draft the browser was held to.
		want := h.draft
		if p.held != nil {
			want = *p.held
		}
		if r.session != nil {
			assert.Equal(t, want.version, r.session.Version(), "the version the server negotiated on %s", p.path)
		}
		if r.js != nil && r.js.Version != "" {
			assert.Equal(t, want.moqNet, r.js.Version, "@moq/net's Connection.version on %s", p.path)
		}
	}
	return runs
}

// runDriver runs one page's scenario on the shared driver, or, for a
// scenario that kills its browser, on a driver of its own, which it kills
// when kill fires, noting when in r.
func (h *harness) runDriver(ctx context.Context, kill <-chan struct{}, p page, serverURL, certHash string, r *run) (driverOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, driverTimeout)
	defer cancel()
	namespace, track := p.namespace, p.track
	if namespace == "" {
		namespace = "moqt-interop/missing"
	}
	if track == "" {
		track = "video"
	}
	params := map[string]any{}
	maps.Copy(params, p.params)
	maps.Copy(params, map[string]any{
		"scenario":  p.name,
		"url":       serverURL,
		"certHash":  certHash,
		"namespace": strings.Split(namespace, "/"),
		"track":     track,
	})
	if p.held != nil {
		// The browser offers only this draft (client.js connect).
		params["protocols"] = []string{p.held.version.ALPN()}
	}
	if kill == nil {
		return h.driver.run(ctx, h.pageURL+"/", params)
	}

	req, err := json.Marshal(driverRequest{Page: h.pageURL + "/", Params: params})
	if err != nil {
		return driverOutput{}, err
	}
	cmd := exec.CommandContext(ctx, h.Node, driverArgs(h.tools, "--request", string(req))...)
	cmd.Dir = h.Interop
	cmd.WaitDelay = 5 * time.Second
	ownProcessGroup(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return driverOutput{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-kill:
		r.killedAt = time.Now()
		if err := killTree(cmd.Process.Pid); err != nil {
			<-exited
			return driverOutput{}, errors.Join(errors.New("killing the browser"), err)
		}
		<-exited
		return driverOutput{DriverError: "killed: " + stderr.String()}, nil
	}
	if err != nil {
		return driverOutput{}, errors.Join(err, errors.New("driver stdout: "+stdout.String()+"; stderr: "+stderr.String()))
	}
	var out driverOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return driverOutput{}, errors.Join(err, errors.New("driver output: "+stdout.String()))
	}
	return out, nil
}

// logDriverOutput logs what the driver reported for p.
func logDriverOutput(t *testing.T, p page, out driverOutput) {
	t.Helper()
	who := p.name
	if p.path != serverPath {
		who += " on " + p.path
	}
	if out.DriverError != "" {
		t.Logf("driver: %s: %s", who, out.DriverError)
	}
	if out.Chromium != "" {
		t.Logf("js: %s: chromium %s, %s", who, out.Chromium, out.UserAgent)
	}
	for _, line := range out.Console {
		t.Logf("js console (%s): %s", who, line)
	}
	for _, e := range out.PageErrors {
		t.Logf("js page error (%s): %s", who, e)
	}
	if out.Result == nil {
		return
	}
	// Payloads are logged by size only.
	logged := *out.Result
	logged.Groups = nil
	b, _ := json.Marshal(logged)
	t.Logf("js result (%s): %s", who, b)
	for _, g := range out.Result.Groups {
		sizes := make([]int, len(g.Frames))
		for i, f := range g.Frames {
			sizes[i] = len(f.Payload) / 2
		}
		ended := "a FIN"
		if g.Error != nil {
			ended = *g.Error
		}
		t.Logf("js result (%s): group %d: objects of %v bytes, ended by %s", who, g.Sequence, sizes, ended)
	}
}
