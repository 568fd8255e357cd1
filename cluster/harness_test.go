package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// testTTL is the registry's TTL in tests: short, so that failures show
// within seconds.
const testTTL = 2 * time.Second

// token is the test cluster's.
var token = []byte("test-cluster-token")

var quiet = slog.New(slog.DiscardHandler)

// natsServer is an embedded NATS server a test can stop and start again
// on the same port.
type natsServer struct {
	t    *testing.T
	dir  string
	port int
	s    *server.Server
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	ns := &natsServer{t: t, dir: t.TempDir(), port: -1}
	ns.start()
	ns.port = ns.s.Addr().(*net.TCPAddr).Port
	t.Cleanup(ns.stop)
	return ns
}

func (ns *natsServer) start() {
	s, err := RunNATS("127.0.0.1", ns.port, ns.dir)
	require.NoError(ns.t, err)
	ns.s = s
}

func (ns *natsServer) stop() {
	if ns.s != nil {
		ns.s.Shutdown()
		ns.s.WaitForShutdown()
		ns.s = nil
	}
}

func (ns *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", ns.port) }

// testNode is a relay on 127.0.0.1 that is a cluster node, its peers
// reaching it through a UDP proxy that a test can cut, as a host dies.
type testNode struct {
	t     *testing.T
	name  string
	relay *relay.Relay
	srv   *moqt.Server
	node  *Node
	proxy *udpProxy
	hash  [32]byte
	done  chan struct{} // Serve returned
	stop  context.CancelFunc

	mu       sync.Mutex
	peerSubs int // SUBSCRIBEs from other nodes
	closed   bool
	// answered counts the relay's Upstream answers per track; asked is
	// closed and replaced at each.
	answered map[wire.TrackKey]int
	asked    chan struct{}
}

func startTestNode(t *testing.T, name, natsURL string) *testNode {
	t.Helper()
	return startTestNodeWith(t, name, natsURL, testTTL, nil)
}

// startTestNodeWith is startTestNode with the registry's TTL ttl and the
// relay's counters told to metrics (nil: none kept).
func startTestNodeWith(t *testing.T, name, natsURL string, ttl time.Duration, metrics relay.Metrics) *testNode {
	t.Helper()
	cert, hash, err := moqt.GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	tn := &testNode{t: t, name: name, hash: hash, done: make(chan struct{}), answered: map[wire.TrackKey]int{}, asked: make(chan struct{})}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := pc.LocalAddr().String()
	require.NoError(t, pc.Close())
	tn.proxy = startProxy(t, addr)
	tn.node, err = New(Config{NATS: natsURL, TTL: ttl, URL: "moqt://" + tn.proxy.addr() + "/",
		CertHash: hash, Token: token, MoQT: &moqt.Config{Logger: quiet}, Logger: quiet})
	require.NoError(t, err)
	cfg := tn.node.RelayConfig(relay.Config{Authorize: relay.AllowAll, Logger: quiet, Metrics: metrics})
	inner := cfg.Authorize
	cfg.Authorize = func(req moqt.Request, u *wire.Params) error {
		if _, ok := req.(*moqt.SubscribeRequest); ok && u == nil && tn.node.IsPeer(req.Session()) {
			tn.mu.Lock()
			tn.peerSubs++
			tn.mu.Unlock()
		}
		return inner(req, u)
	}
	cfg.Upstream = countingUpstream{tn}
	tn.relay = relay.New(cfg)
	tn.srv, err = moqt.Listen(addr, &moqt.Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: tn.relay, Logger: quiet}, &moqt.ServerOptions{DrainTimeout: -1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	tn.stop = cancel
	go func() {
		defer close(tn.done)
		_ = tn.srv.Serve(ctx)
	}()
	tn.node.Start(tn.relay)
	t.Cleanup(tn.close)
	return tn
}

// countingUpstream is the node as the relay's Upstream, counting its
// answers per track (waitAnswered).
type countingUpstream struct{ tn *testNode }

func (u countingUpstream) Session(ctx context.Context, ns wire.Namespace) (*moqt.Session, error) {
	ss, err := u.Sessions(ctx, ns)
	if len(ss) == 0 {
		return nil, err
	}
	return ss[0], nil
}

func (u countingUpstream) Sessions(ctx context.Context, ns wire.Namespace) ([]*moqt.Session, error) {
	ss, err := u.tn.node.Sessions(ctx, ns)
	if name, ok := relay.RequestTrack(ctx); ok {
		u.tn.mu.Lock()
		u.tn.answered[name.Key()]++
		close(u.tn.asked)
		u.tn.asked = make(chan struct{})
		u.tn.mu.Unlock()
	}
	return ss, err
}

// close stops the node cleanly: it leaves the registry.
func (tn *testNode) close() {
	tn.mu.Lock()
	if tn.closed {
		tn.mu.Unlock()
		return
	}
	tn.closed = true
	tn.mu.Unlock()
	_ = tn.node.Close()
	tn.stop()
	<-tn.done
	_ = tn.relay.Close()
	_ = tn.srv.Close()
	tn.proxy.close()
}

// kill plays a host that dies: its peers' packets are dropped and its
// registry entries are left to expire; nothing says goodbye.
func (tn *testNode) kill() {
	tn.proxy.cut()
	tn.node.cancel()
	tn.node.wg.Wait()
	tn.node.nc.Close()
}

func (tn *testNode) peerSubscribes() int {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.peerSubs
}

// waitAnswered waits until tn's relay has had n answers from its Upstream
// for name, within bound.
func (tn *testNode) waitAnswered(name wire.FullTrackName, n int, bound time.Duration) {
	tn.t.Helper()
	timeout := time.After(bound)
	for {
		tn.mu.Lock()
		got, asked := tn.answered[name.Key()], tn.asked
		tn.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-asked:
		case <-timeout:
			tn.t.Fatalf("%s: %d Upstream answers for %s within %v, want %d", tn.name, got, name, bound, n)
		}
	}
}

// client dials the node directly, as a publisher or subscriber does.
func (tn *testNode) client(h moqt.Handler) *moqt.Session {
	tn.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := moqt.Dial(ctx, "moqt://"+tn.srv.Addr().String()+"/", &moqt.Config{Handler: h, Logger: quiet,
		ServerCertificateHashes: [][32]byte{tn.hash}})
	require.NoError(tn.t, err)
	tn.t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitRoute waits until tn's view routes name to want's node (nil: to
// none, and current), within bound.
func (tn *testNode) waitRoute(name wire.FullTrackName, want *testNode, bound time.Duration) {
	tn.t.Helper()
	timeout := time.After(bound)
	for {
		targets, wait, changed := tn.node.view.route(name)
		if want == nil && wait == 0 && len(targets) == 0 || want != nil && len(targets) > 0 && targets[0].node == want.node.ID() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			tn.t.Fatalf("%s: no route for %s to %v within %v (have %v)", tn.name, name, want, bound, targets)
		}
	}
}

// waitNamespace waits until tn's view offers ns (or no longer does).
func (tn *testNode) waitOffered(ns wire.Namespace, want bool, bound time.Duration) {
	tn.t.Helper()
	timeout := time.After(bound)
	for {
		tn.node.view.mu.Lock()
		_, has := tn.node.view.offers[ns.Key()]
		changed := tn.node.view.changed.wait()
		tn.node.view.mu.Unlock()
		if has == want {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			tn.t.Fatalf("%s: namespace %s offered %v, want %v", tn.name, ns, has, want)
		}
	}
}

// publisher serves one track to the SUBSCRIBEs it gets, counting them,
// and answers its TRACK_STATUS and FETCH from its cache.
type publisher struct {
	track *moqt.LocalTrack
	mu    sync.Mutex
	subs  int
	// asked is closed once the first SUBSCRIBE is accepted: an object
	// written before then reaches no one, as it should (the relay's
	// subscription starts at the Next Object).
	asked chan struct{}
}

func newPublisher(t *testing.T, name wire.FullTrackName) *publisher {
	tr, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	tr.SetCache(moqt.CacheLimits{Bytes: 1 << 20})
	return &publisher{track: tr, asked: make(chan struct{})}
}

func (p *publisher) ServeMOQT(r moqt.Request) {
	switch r := r.(type) {
	case *moqt.TrackStatusRequest:
		if r.Track.Equal(p.track.Name()) {
			_ = p.track.Status(r)
			return
		}
	case *moqt.FetchRequest:
		if r.Track.Equal(p.track.Name()) {
			_ = p.track.Fetch(r)
			return
		}
	}
	sr, ok := r.(*moqt.SubscribeRequest)
	if !ok || !sr.Track.Equal(p.track.Name()) {
		moqt.DefaultHandler.ServeMOQT(r)
		return
	}
	_, _ = p.track.Accept(sr, moqt.AcceptOptions{})
	p.mu.Lock()
	if p.subs++; p.subs == 1 {
		close(p.asked)
	}
	p.mu.Unlock()
}

func (p *publisher) subscribes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.subs
}

// announce publishes p's namespace at tn and returns the announcement.
func (p *publisher) announce(t *testing.T, tn *testNode) (*moqt.Session, *moqt.Announcement) {
	t.Helper()
	s := tn.client(p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := s.PublishNamespace(ctx, p.track.Name().Namespace, wire.Params{})
	require.NoError(t, err)
	return s, a
}

// writeGroup writes group g of n objects, payload "g/i", on subgroup 0.
func writeGroup(t *testing.T, tr *moqt.LocalTrack, g uint64, n int) {
	t.Helper()
	w := tr.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
	for i := 0; i < n; i++ {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: uint64(i)}, Payload: []byte(fmt.Sprintf("%d/%d", g, i))}))
	}
	require.NoError(t, w.Close())
}

// subscribe subscribes through s, within a few seconds.
func subscribe(t *testing.T, s *moqt.Session, name wire.FullTrackName) (*moqt.Subscription, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return s.Subscribe(ctx, name, wire.Params{})
}

// readObjects reads n objects of sub and returns their payloads.
func readObjects(t *testing.T, sub *moqt.Subscription, n int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []string
	for len(out) < n {
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err, "after %d objects", len(out))
		out = append(out, string(o.Payload))
	}
	return out
}

// ended waits for sub to end within bound and returns its error.
func ended(t *testing.T, sub *moqt.Subscription, bound time.Duration) error {
	t.Helper()
	select {
	case <-sub.Done():
		return sub.Err()
	case <-time.After(bound):
		t.Fatalf("subscription did not end within %v", bound)
		return nil
	}
}

var errCut = errors.New("cut")
