package main

import (
	"context"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/moqt-go/moqt/internal/relayserve"
)

// webFiles are the web page of moqt relay -web and moqt demo -web: the
// page, its script (interop/js/web.js bundled with @moq/net by `npm run
// build:web` in interop/, committed so that the command builds without npm)
// and the licenses of the packages the script holds.
//
//go:embed web/index.html web/moqt-web.js web/moqt-web.js.LICENSE.txt
var webFiles embed.FS

// webConfig is what the page is told of the relay, as /config.json.
type webConfig struct {
	// URL is the relay's WebTransport URL.
	URL string `json:"url"`
	// CertHash is the SHA-256 of the relay's certificate, hex, when it is
	// self-signed: the page pins it (serverCertificateHashes). Empty for a
	// certificate the browser trusts through an authority.
	CertHash string `json:"certHash"`
	// RawURL and Pin are the relay's raw QUIC URL and certificate pin, for
	// the command lines the page shows.
	RawURL string `json:"rawURL"`
	Pin    string `json:"pin"`
}

func newWebConfig(info relayserve.Info) webConfig {
	host := clientHost(info.Addr)
	pin := hex.EncodeToString(info.CertHash[:])
	c := webConfig{URL: "https://" + host + "/", RawURL: "moqt://" + host + "/", Pin: pin}
	if info.SelfSigned {
		c.CertHash = pin
	}
	return c
}

// webHandler serves the page, its script, the script's licenses and the
// page's configuration for the relay info describes.
func webHandler(info relayserve.Info) http.Handler {
	cfg := newWebConfig(info)
	serve := func(name, contentType string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := webFiles.ReadFile("web/" + name)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", contentType)
			// The relay's address and certificate change when it restarts,
			// and the page with the binary.
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(b)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", serve("index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /moqt-web.js", serve("moqt-web.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /moqt-web.js.LICENSE.txt", serve("moqt-web.js.LICENSE.txt", "text/plain; charset=utf-8"))
	mux.HandleFunc("GET /config.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_ = json.NewEncoder(w).Encode(cfg)
	})
	return mux
}

// webServer serves the web page over HTTP. Its listener is bound by
// listenWeb, so that a bad address fails before the relay starts; it
// serves once start knows the relay.
type webServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan error // Serve's return, once started
}

func listenWeb(addr string) (*webServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-web: %w", err)
	}
	return &webServer{ln: ln}, nil
}

// url is the page's URL, as a browser on this machine opens it.
func (w *webServer) url() string {
	a, ok := w.ln.Addr().(*net.TCPAddr)
	if !ok {
		return "http://" + w.ln.Addr().String() + "/"
	}
	// clientHost's rule for a UDP address: the loopback address for every
	// interface. Over plain HTTP only the loopback addresses (and
	// localhost) make a secure context, which WebTransport needs.
	return "http://" + clientHost(&net.UDPAddr{IP: a.IP, Port: a.Port}) + "/"
}

// start serves the page for the relay info describes.
func (w *webServer) start(info relayserve.Info) {
	w.srv = &http.Server{Handler: webHandler(info), ReadHeaderTimeout: 10 * time.Second}
	w.done = make(chan error, 1)
	go func() { w.done <- w.srv.Serve(w.ln) }()
}

// close stops serving and reports why serving failed, if it did.
func (w *webServer) close() error {
	if w.srv == nil {
		return w.ln.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
	if err := <-w.done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("-web: %w", err)
	}
	return nil
}
