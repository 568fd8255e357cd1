package interop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/browsertools"
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

func TestBrowserMoqNet(t *testing.T) {
	tl := findTools(t)
	t.Logf("@moq/net %s, Chromium %s, node %s", tl.MoqNet, tl.Chromium, tl.Node)
	bundle := buildBundle(t, tl)
	sig := &signals{ch: map[string]chan struct{}{}}
	base := harness{tools: tl, pageURL: servePage(t, tl, bundle, sig), signals: sig, driver: startSharedDriver(t, tl)}
	base.pageOrigin = base.pageURL // httptest's URL is scheme://host:port, an origin

	// Every case on each draft: our side offers only that one, so the
	// browser, which offers them all, is held to it.
	for _, d := range drafts {
		h := base
		h.draft = d
		t.Run(d.name(), func(t *testing.T) {
			t.Run("setup-only", func(t *testing.T) { testSetupOnly(t, &h) })
			t.Run("subscribe-error", func(t *testing.T) { testSubscribeError(t, &h) })
			t.Run("subscribe-objects", func(t *testing.T) { testSubscribeObjects(t, &h) })
			t.Run("largest-object", func(t *testing.T) { testLargestObject(t, &h) })
			t.Run("object-status", func(t *testing.T) { testObjectStatus(t, &h) })
			t.Run("subscribe-unsent", func(t *testing.T) { testSubscribeUnsent(t, &h) })
			t.Run("browser-killed", func(t *testing.T) { testBrowserKilled(t, &h) })
			t.Run("relay-browser-publishes", func(t *testing.T) { testBrowserPublishes(t, &h) })
			t.Run("relay-browser-publishes-early", func(t *testing.T) { testBrowserPublishesEarly(t, &h) })
			t.Run("relay-browser-subscribes", func(t *testing.T) { testBrowserSubscribes(t, &h, false, d) })
			t.Run("relay-browser-subscribes-published", func(t *testing.T) { testBrowserSubscribes(t, &h, true, d) })
		})
	}

	// One relay carries a track between peers on different drafts.
	t.Run("cross-draft", func(t *testing.T) {
		h := base
		h.draft = draft20
		t.Run("relay-browser18-to-browser20", func(t *testing.T) { testBrowserToBrowser(t, &h, draft18, draft20) })
		t.Run("relay-browser20-to-browser18", func(t *testing.T) { testBrowserToBrowser(t, &h, draft20, draft18) })
		t.Run("relay-go18-to-browser20", func(t *testing.T) { testBrowserSubscribes(t, &h, false, draft18) })
	})
}
