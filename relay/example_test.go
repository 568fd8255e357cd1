package relay_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// counters is a relay.Metrics keeping counts in memory; a real one would
// feed Prometheus counters or OpenTelemetry instruments instead.
type counters struct {
	mu       sync.Mutex
	requests map[string]int // "kind/outcome"
	drops    map[string]int
	sessions int
	in, out  int
}

func (c *counters) SessionStarted(bool) { c.add(&c.sessions, 1) }
func (c *counters) SessionEnded(bool)   { c.add(&c.sessions, -1) }
func (c *counters) ObjectsIn(n, _ int)  { c.add(&c.in, n) }
func (c *counters) ObjectsOut(n, _ int) { c.add(&c.out, n) }

func (c *counters) Request(kind, outcome string) {
	c.mu.Lock()
	c.requests[kind+"/"+outcome]++
	c.mu.Unlock()
}

func (c *counters) Dropped(reason string, n int) {
	c.mu.Lock()
	c.drops[reason] += n
	c.mu.Unlock()
}

func (c *counters) add(v *int, n int) {
	c.mu.Lock()
	*v += n
	c.mu.Unlock()
}

// authorize lets sessions on path /live use the tracks under (live) with
// the token "secret" in the request (or in the session's SETUP). An
// update's refreshed tokens are checked as the request's were; an update
// that carries none keeps the request's authorization.
func authorize(req moqt.Request, update *wire.Params) error {
	if req.Session().Path() != "/live" {
		return &moqt.RequestError{Code: wire.ReqUnauthorized, Reason: "wrong path"}
	}
	var values [][]byte
	if update != nil {
		if len(update.AuthorizationTokens) == 0 {
			return nil
		}
		for _, tok := range update.AuthorizationTokens {
			values = append(values, tok.Value)
		}
	} else {
		for _, tok := range append(req.AuthorizationTokens(), req.Session().PeerAuthorizationTokens()...) {
			values = append(values, tok.Value)
		}
	}
	for _, v := range values {
		if bytes.Equal(v, []byte("secret")) {
			return nil
		}
	}
	return errors.New("no valid token") // refused with UNAUTHORIZED
}

// A relay that checks every request's token and path and counts what it
// does, composed with a moqt.ServeMux to serve one namespace itself: the
// tracks under (local) come from a LocalTrack of this process, the rest is
// relayed. Requests the mux sends elsewhere never reach the relay, so that
// handler authorizes them itself.
func Example() {
	met := &counters{requests: map[string]int{}, drops: map[string]int{}}
	r := relay.New(relay.Config{Authorize: authorize, Metrics: met, Logger: slog.New(slog.DiscardHandler)})
	defer r.Close()

	clockName := wire.FullTrackName{Namespace: wire.NewNamespace("local"), Name: []byte("clock")}
	clock, _ := moqt.NewLocalTrack(clockName, nil)
	mux := moqt.NewServeMux()
	mux.HandleFunc(wire.NewNamespace("local"), func(req moqt.Request) {
		sr, ok := req.(*moqt.SubscribeRequest)
		switch {
		case authorize(req, nil) != nil:
			_ = req.Reject(wire.ReqUnauthorized, "unauthorized")
		case ok && sr.Track.Equal(clockName):
			_, _ = clock.Accept(sr, moqt.AcceptOptions{})
		default:
			_ = req.Reject(wire.ReqDoesNotExist, "no such track")
		}
	})
	mux.Handle(wire.Namespace{}, r) // everything else: the relay

	cert, hash, _ := moqt.GenerateCertificate()
	srv, err := moqt.Listen("127.0.0.1:0", &moqt.Config{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler:   mux,
		Logger:    slog.New(slog.DiscardHandler),
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serving, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serving) }() // accepts every session
	defer func() {
		stop() // GOAWAY to every session, then Serve returns once they are gone
		<-served
	}()

	c, err := moqt.Dial(ctx, "moqt://"+srv.Addr().String()+"/live", &moqt.Config{
		ServerCertificateHashes: [][32]byte{hash},
		Logger:                  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	secret := wire.Params{AuthorizationTokens: []wire.Token{wire.UseToken(wire.TokenTypeOutOfBand, []byte("secret"))}}

	// Relayed, without the token: refused by Authorize.
	_, err = c.Subscribe(ctx, wire.FullTrackName{Namespace: wire.NewNamespace("live"), Name: []byte("cam")}, wire.Params{})
	fmt.Println("relayed, no token:", codeOf(err))
	// Relayed, with it: allowed, but nobody publishes the track.
	_, err = c.Subscribe(ctx, wire.FullTrackName{Namespace: wire.NewNamespace("live"), Name: []byte("cam")}, secret)
	fmt.Println("relayed, token:", codeOf(err))
	// Served locally.
	sub, err := c.Subscribe(ctx, clockName, secret)
	if err != nil {
		fmt.Println(err)
		return
	}
	w := clock.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
	_ = w.WriteObject(moqt.Object{Payload: []byte("12:00")})
	_ = w.Close()
	obj, err := sub.ReadObject(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("local: %s\n", obj.Payload)
	// Output:
	// relayed, no token: UNAUTHORIZED
	// relayed, token: DOES_NOT_EXIST
	// local: 12:00
}

// codeOf is the REQUEST_ERROR code of err.
func codeOf(err error) string {
	var re *moqt.RequestError
	if errors.As(err, &re) {
		return re.Code.String()
	}
	return fmt.Sprint(err)
}
