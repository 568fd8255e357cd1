package interop

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/browsertools"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

const (
	// driverTimeout bounds one run of the Node driver, browser start included.
	driverTimeout = 60 * time.Second
	// closeTimeout bounds the wait for a session to end once the browser is gone.
	closeTimeout = 10 * time.Second
	// scenarioTimeout is the page's own bound on a scenario (client.js).
	scenarioTimeout = 15 * time.Second
	// serverPath is the path the browser connects to.
	serverPath = "/moqt-interop"
	// moqNetImplementation is the MOQT_IMPLEMENTATION @moq/net 0.3.4 sends
	// (connection/handshake.js).
	moqNetImplementation = "moq-lite-js"
	// moqNetVersion is what @moq/net's Connection.version reports for the
	// version moqt-20 selects.
	moqNetVersion = "moq-transport-20"
)

// tools are the external programs and files the harness runs.
type tools = browsertools.Tools

// findTools locates node, Chromium and interop/node_modules. Missing ones
// skip the test, or fail it under MOQT_INTEROP=1.
func findTools(t *testing.T) tools { return browsertools.Find(t, "interop", ".") }

// buildBundle bundles js/client.js and @moq/net into one ES module.
func buildBundle(t *testing.T, tl tools) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "client.js")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tl.Esbuild, "js/client.js",
		"--bundle", "--format=esm", "--target=es2022", "--log-level=warning", "--outfile="+out)
	cmd.Dir = tl.Interop
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "esbuild: %s", b)
	return out
}

// signals are the page's notices to the test: a POST to /signal/{name}
// fires the channel that signals.take(name) last handed out. They carry the
// test's notices to the page too: a GET of /gate/{name} returns once the
// gate that signals.gate(name) last handed out is opened.
type signals struct {
	mu    sync.Mutex
	ch    map[string]chan struct{}
	gates map[string]chan struct{}
}

// gate returns a fresh gate for name and the function that opens it.
func (s *signals) gate(name string) (open func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{})
	if s.gates == nil {
		s.gates = map[string]chan struct{}{}
	}
	s.gates[name] = c
	return sync.OnceFunc(func() { close(c) })
}

// waitGate returns the gate of that name, nil if there is none.
func (s *signals) waitGate(name string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gates[name]
}

// take returns a fresh channel for name, so that a notice from an earlier
// scenario is not mistaken for this one's.
func (s *signals) take(name string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(chan struct{}, 1)
	s.ch[name] = c
	return c
}

func (s *signals) fire(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.ch[name]
	if ok {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	return ok
}

// servePage serves the page and the bundle over plain HTTP on 127.0.0.1,
// which Chromium treats as a secure context. It returns the page's URL.
// The page's notices (POST /signal/{name}) go to sig; GET /gate/{name}
// waits for sig's gate of that name.
func servePage(t *testing.T, tl tools, bundle string, sig *signals) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /signal/{name}", func(w http.ResponseWriter, r *http.Request) {
		if !sig.fire(r.PathValue("name")) {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /gate/{name}", func(w http.ResponseWriter, r *http.Request) {
		c := sig.waitGate(r.PathValue("name"))
		if c == nil {
			http.NotFound(w, r)
			return
		}
		select {
		case <-c:
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		case <-time.After(scenarioTimeout):
			http.Error(w, "the test did not open the gate", http.StatusGatewayTimeout)
		}
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFile(w, r, filepath.Join(tl.Interop, "js", "index.html"))
	})
	mux.HandleFunc("GET /client.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		http.ServeFile(w, r, bundle)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// logWriter sends slog output to t.Log until the test ends, then drops it:
// a session goroutine may still log while it winds down.
type logWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func newLogWriter(t testing.TB) *logWriter {
	w := &logWriter{t: t}
	t.Cleanup(func() { // registered first, so it runs last
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log("go: " + strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// driverOutput is what js/driver.js prints.
type driverOutput struct {
	Chromium    string    `json:"chromium"`
	UserAgent   string    `json:"userAgent"`
	Result      *jsResult `json:"result"`
	Console     []string  `json:"console"`
	PageErrors  []string  `json:"pageErrors"`
	DriverError string    `json:"driverError"`
}

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

// scenario is one run of the page against a fresh moqt server.
type scenario struct {
	// name is the page's scenario (client.js).
	name string
	// namespace and track are what the page subscribes to. Default:
	// moqt-interop/missing and video.
	namespace, track string
	// params are more fields for the page's parameters.
	params map[string]any
	// cfg is the server's Config; the harness sets its Logger.
	cfg moqt.Config
	// onListen, if set, runs before the browser starts, with the server's
	// raw QUIC URL and the SHA-256 of its certificate, which the browser
	// pins too.
	onListen func(url string, certHash [32]byte)
	// onAccept, if set, runs in the accept goroutine with the browser's
	// session, while the browser is still connected.
	onAccept func(*moqt.Session)
	// kill, when it fires, SIGKILLs the driver and the browser.
	kill <-chan struct{}
	// sessionEnd bounds the wait for the browser's session to end once
	// the driver is gone. Default closeTimeout.
	sessionEnd time.Duration
	// beforeClose, if set, runs once the browser's session has ended (or
	// the wait for it has), before the server closes.
	beforeClose func(r *run)
}

// run is one scenario's outcome on both sides.
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

// harness is what every scenario shares: the tools and the page.
type harness struct {
	tools
	pageURL    string
	pageOrigin string
	signals    *signals
}

// runScenario starts a moqt server, runs the driver with sc and returns
// what both sides saw. Raw QUIC sessions (the test's own Go peers) are
// accepted alongside the browser's and closed with the server.
func (h *harness) runScenario(t *testing.T, sc scenario) run {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(newLogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))

	cert, hash, err := moqt.GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	cfg := sc.cfg
	cfg.Logger = logger
	cfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv, err := moqt.Listen("127.0.0.1:0", &cfg,
		&moqt.ServerOptions{CheckOrigin: func(r *http.Request) bool {
			origin := r.Header.Get("Origin")
			ok := origin == h.pageOrigin
			logger.Debug("WebTransport CONNECT", "origin", origin, "accepted", ok, "path", r.URL.Path,
				"wt-available-protocols", r.Header.Values("WT-Available-Protocols"))
			return ok
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })

	sessionEnd := sc.sessionEnd
	if sessionEnd == 0 {
		sessionEnd = closeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), driverTimeout+sessionEnd)
	defer cancel()
	// Every scenario opens exactly one WebTransport session; more would be
	// a finding.
	accepted := make(chan *moqt.Session, 1)
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
			select {
			case accepted <- s:
			default:
				extra = append(extra, s)
				_ = s.CloseWithError(wire.InternalError, "interop: one session per scenario")
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

	var r run
	serverURL := "https://" + srv.Addr().String() + serverPath
	out := h.runDriver(t, ctx, sc, serverURL, hex.EncodeToString(hash[:]), &r)
	r.js = out.Result
	select {
	case r.session = <-accepted:
	case <-time.After(closeTimeout):
	}
	if r.session != nil {
		// The browser has exited, which ends its WebTransport session:
		// at once when it closed it, after the idle timeout when it was
		// killed.
		select {
		case <-r.session.Context().Done():
			r.endedAt = time.Now()
			r.closed = context.Cause(r.session.Context())
			logger.Info("session ended", "cause", r.closed)
		case <-time.After(sessionEnd):
			r.closed = errors.New("session still open after the browser exited")
		}
	}
	if sc.beforeClose != nil {
		sc.beforeClose(&r)
	}
	if r.session != nil {
		_ = r.session.Close()
	}
	cancel()
	<-acceptDone
	require.NoError(t, srv.Close())
	assert.Empty(t, extra, "the browser opened more than one session")
	if r.killedAt.IsZero() {
		require.NotNil(t, r.js, "the driver produced no result: %s", out.DriverError)
	}
	return r
}

// runDriver runs js/driver.js and parses its JSON. When sc.kill fires it
// kills the driver and the browser instead, and notes when in r.
func (h *harness) runDriver(t *testing.T, ctx context.Context, sc scenario, serverURL, certHash string, r *run) driverOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, driverTimeout)
	defer cancel()
	namespace, track := sc.namespace, sc.track
	if namespace == "" {
		namespace = "moqt-interop/missing"
	}
	if track == "" {
		track = "video"
	}
	params, err := json.Marshal(sc.params)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, h.Node, "js/driver.js",
		"--chromium", h.Chromium,
		"--page", h.pageURL+"/",
		"--scenario", sc.name,
		"--server", serverURL,
		"--cert-hash", certHash,
		"--namespace", namespace,
		"--track", track,
		"--params", string(params),
		"--timeout-ms", "45000",
	)
	cmd.Dir = h.Interop
	cmd.WaitDelay = 5 * time.Second
	ownProcessGroup(cmd)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-sc.kill:
		r.killedAt = time.Now()
		require.NoError(t, killTree(cmd.Process.Pid), "killing the browser")
		waitErr = <-exited
		t.Logf("driver: killed after %v: %v", r.killedAt.Sub(start).Round(time.Millisecond), waitErr)
	}
	t.Logf("driver: %s in %v", sc.name, time.Since(start).Round(time.Millisecond))
	if stderr.Len() > 0 {
		t.Logf("driver stderr:\n%s", stderr.String())
	}
	if !r.killedAt.IsZero() {
		return driverOutput{DriverError: "killed"}
	}
	require.NoError(t, waitErr, "driver failed; stdout: %s", stdout.String())
	var out driverOutput
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), "driver output: %s", stdout.String())
	t.Logf("js: chromium %s, %s", out.Chromium, out.UserAgent)
	for _, line := range out.Console {
		t.Log("js console: " + line)
	}
	for _, e := range out.PageErrors {
		t.Log("js page error: " + e)
	}
	if out.Result != nil {
		// Payloads are logged by size only.
		logged := *out.Result
		logged.Groups = nil
		b, _ := json.Marshal(logged)
		t.Logf("js result: %s", b)
		for _, g := range out.Result.Groups {
			sizes := make([]int, len(g.Frames))
			for i, f := range g.Frames {
				sizes[i] = len(f.Payload) / 2
			}
			ended := "a FIN"
			if g.Error != nil {
				ended = *g.Error
			}
			t.Logf("js result: group %d: objects of %v bytes, ended by %s", g.Sequence, sizes, ended)
		}
	}
	return out
}

func TestBrowserMoqNet(t *testing.T) {
	tl := findTools(t)
	t.Logf("@moq/net %s, Chromium %s, node %s", tl.MoqNet, tl.Chromium, tl.Node)
	bundle := buildBundle(t, tl)
	sig := &signals{ch: map[string]chan struct{}{}}
	h := &harness{tools: tl, pageURL: servePage(t, tl, bundle, sig), signals: sig}
	h.pageOrigin = h.pageURL // httptest's URL is scheme://host:port, an origin

	t.Run("setup-only", func(t *testing.T) {
		// Once the SETUPs are exchanged the server ends the session; the
		// browser waits for that, so its SETUP is sure to have arrived. The
		// server waits in turn for the page to say it has read the
		// server's SETUP: a close can discard stream data not yet read.
		established := h.signals.take("established")
		r := h.runScenario(t, scenario{name: "setup-only", onAccept: func(s *moqt.Session) {
			select {
			case <-established:
			case <-s.Context().Done():
				return
			case <-time.After(scenarioTimeout):
			}
			_ = s.CloseWithError(wire.NoError, "interop: setup done")
		}})

		// The browser's view.
		assert.True(t, r.js.WebTransportSupported, "WebTransport is missing in the page")
		assert.Nil(t, r.js.Error, "js error")
		assert.True(t, r.js.Established, "@moq/net did not establish the session")
		assert.Equal(t, moqNetVersion, r.js.Version)
		assert.Equal(t, "webtransport", r.js.Transport)

		// The server's view.
		require.NotNil(t, r.session, "the server accepted no session")
		assert.True(t, r.session.WebTransport())
		assert.Equal(t, wire.Draft20, r.session.Version(), "@moq/net speaks moqt-20")
		assert.Equal(t, serverPath, r.session.Path())
		peer := r.session.PeerSetup()
		require.NotNil(t, peer)
		assert.Equal(t, wire.Some(moqNetImplementation), peer.MoqtImplementation)
		assert.False(t, peer.Path.Set, "PATH must not be sent over WebTransport")
		assert.False(t, peer.Authority.Set, "AUTHORITY must not be sent over WebTransport")
		for _, kv := range peer.Unknown {
			t.Logf("go: peer sent Setup Option 0x%x (not in draft-21, ignored): value %d, bytes %x", kv.Type, kv.Value, kv.Bytes)
		}

		// The server closed the session with NO_ERROR, and the browser saw
		// a clean close (WT_CLOSE_SESSION), not an abrupt one.
		var se *moqt.SessionError
		require.ErrorAs(t, r.closed, &se)
		assert.False(t, se.Remote, "the server should have ended the session: %v", se)
		assert.Equal(t, wire.NoError, se.Code, "session close code")
		assert.True(t, r.js.ClosedCleanly, "the browser did not see a clean close")
		assert.Nil(t, r.js.CloseError, "the browser saw an abrupt close")
	})

	t.Run("subscribe-error", func(t *testing.T) {
		type seen struct {
			track []string
		}
		var mu sync.Mutex
		var subscribes []seen
		handler := moqt.HandlerFunc(func(r moqt.Request) {
			if sr, ok := r.(*moqt.SubscribeRequest); ok {
				var track []string
				for _, f := range sr.Track.Namespace {
					track = append(track, string(f))
				}
				mu.Lock()
				subscribes = append(subscribes, seen{track: append(track, string(sr.Track.Name))})
				mu.Unlock()
				t.Logf("go: SUBSCRIBE for %s %q, parameters %+v", sr.Track.Namespace, sr.Track.Name, sr.Params)
			}
			moqt.DefaultHandler.ServeMOQT(r)
		})
		r := h.runScenario(t, scenario{name: "subscribe-error", cfg: moqt.Config{Handler: handler}})

		// The browser's view: the subscription ended with REQUEST_ERROR
		// DOES_NOT_EXIST (0x10) and our reason.
		assert.Nil(t, r.js.Error, "js error")
		assert.True(t, r.js.Established, "@moq/net did not establish the session")
		assert.True(t, r.js.SubscribeClosed, "the subscription did not end")
		require.NotNil(t, r.js.SubscribeError, "the subscription ended without an error")
		assert.Contains(t, *r.js.SubscribeError, "SUBSCRIBE error: code=16 reason=no such track")

		// The server's view: one SUBSCRIBE for that track, with the
		// client's first Request ID.
		require.NotNil(t, r.session, "the server accepted no session")
		assert.Equal(t, wire.Draft20, r.session.Version())
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, subscribes, 1, "SUBSCRIBEs the server saw")
		// The session checked its Request ID (a client's parity, never
		// reused); a bad one would have closed the session, not reached
		// the Handler.
		assert.Equal(t, []string{"moqt-interop", "missing", "video"}, subscribes[0].track)

		// The browser then closed the session, without an error.
		var se *moqt.SessionError
		require.ErrorAs(t, r.closed, &se)
		assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
		assert.Equal(t, wire.NoError, se.Code, "session close code")
	})

	t.Run("subscribe-objects", func(t *testing.T) { testSubscribeObjects(t, h) })
	t.Run("largest-object", func(t *testing.T) { testLargestObject(t, h) })
	t.Run("object-status", func(t *testing.T) { testObjectStatus(t, h) })
	t.Run("browser-killed", func(t *testing.T) { testBrowserKilled(t, h) })
	t.Run("relay-browser-publishes", func(t *testing.T) { testBrowserPublishes(t, h) })
	t.Run("relay-browser-publishes-early", func(t *testing.T) { testBrowserPublishesEarly(t, h) })
	t.Run("relay-browser-subscribes", func(t *testing.T) { testBrowserSubscribes(t, h, false) })
	t.Run("relay-browser-subscribes-published", func(t *testing.T) { testBrowserSubscribes(t, h, true) })
}
