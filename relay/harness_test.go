package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/moqttest"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// schemes are the transports end-to-end tests run over: raw QUIC's and
// WebTransport's imitations by the in-memory transport, or, in
// integration_test.go, the real ones.
var schemes = []string{"moqt", "https"}

// forSchemes runs f over both pipe flavours, each in a synctest bubble.
func forSchemes(t *testing.T, f func(t *testing.T, scheme string)) {
	for _, sc := range schemes {
		t.Run(sc, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, sc) })
		})
	}
}

var quiet = slog.New(slog.DiscardHandler)

// node is a relay and the sessions it serves, by the path their clients
// asked for. Its sessions are pipe pairs (moqttest), in the test's
// synctest bubble, unless it listens on loopback (startNetNode).
type node struct {
	t      *testing.T
	relay  *Relay
	scheme string
	cfg    *moqt.Config // the relay's sessions'

	mu       sync.Mutex
	sessions map[string]*moqt.Session // by path
	arrived  chan struct{}            // closed and replaced when a session arrives

	srv  *moqt.Server // startNetNode's
	hash [32]byte
	// reliable gives the node's raw-QUIC pipes RESET_STREAM_AT.
	reliable bool
}

// startNode starts a relay with cfg (Authorize defaults to AllowAll, Logger
// to quiet) whose sessions are pipes of scheme's flavour; everything ends
// with the test. Call it inside a synctest bubble.
func startNode(t *testing.T, scheme string, cfg Config, sessCfg *moqt.Config) *node {
	t.Helper()
	if cfg.Authorize == nil {
		cfg.Authorize = AllowAll
	}
	return startNodeAuth(t, scheme, cfg, sessCfg)
}

// startNodeAuth is startNode keeping cfg.Authorize as it is, nil included.
func startNodeAuth(t *testing.T, scheme string, cfg Config, sessCfg *moqt.Config) *node {
	t.Helper()
	n := newNode(t, scheme, cfg, sessCfg)
	t.Cleanup(func() { _ = n.relay.Close() }) // after the sessions' cleanups
	return n
}

// newNode makes a node's relay and its sessions' Config.
func newNode(t *testing.T, scheme string, cfg Config, sessCfg *moqt.Config) *node {
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	n := &node{t: t, scheme: scheme, sessions: map[string]*moqt.Session{}, arrived: make(chan struct{})}
	n.relay = New(cfg)
	mc := moqt.Config{}
	if sessCfg != nil {
		mc = *sessCfg
	}
	mc.Handler = n.relay
	if mc.Logger == nil {
		mc.Logger = quiet
	}
	n.cfg = &mc
	return n
}

// pipeConfig is the pipe flavour of the node's scheme.
func (n *node) pipeConfig() transport.PipeConfig {
	return transport.PipeConfig{WebTransport: n.scheme == "https", ReliableReset: n.reliable && n.scheme == "moqt"}
}

// clientConfig is a client's, h serving what the relay asks of it.
func (n *node) clientConfig(h moqt.Handler) *moqt.Config {
	cfg := &moqt.Config{Handler: h, Logger: quiet}
	if n.srv != nil {
		cfg.ServerCertificateHashes = [][32]byte{n.hash}
	}
	return cfg
}

// dial connects a client with path (unique per client) and returns its
// session and the relay's end of it.
func (n *node) dial(path string, h moqt.Handler) (client, server *moqt.Session) {
	n.t.Helper()
	return n.dialConfig(path, n.clientConfig(h))
}

// dialConfig is dial with cfg (clientConfig's, changed).
func (n *node) dialConfig(path string, cfg *moqt.Config) (client, server *moqt.Session) {
	n.t.Helper()
	if n.srv != nil {
		return n.netDial(path, cfg)
	}
	pc := n.pipeConfig()
	if len(cfg.Versions) > 0 {
		// The draft the client prefers, as ALPN would choose it from the
		// relay's (every one).
		pc.Protocol = cfg.Versions[0].ALPN()
	}
	client, server = moqttest.PairAt(n.t, pc, path, n.cfg, cfg)
	n.arrive(path, server)
	return client, server
}

// arrive records the relay's session with the client at path.
func (n *node) arrive(path string, s *moqt.Session) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sessions[path] = s
	close(n.arrived)
	n.arrived = make(chan struct{})
}

func (n *node) session(path string) *moqt.Session {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sessions[path]
}

// publisher is a client serving one LocalTrack to the SUBSCRIBEs it gets.
type publisher struct {
	track  *moqt.LocalTrack
	client *moqt.Session // its session to the relay
	server *moqt.Session // the relay's end
	mu     sync.Mutex
	subs   []*moqt.SubscribeRequest // SUBSCRIBEs received
	served []*moqt.ServedSubscription
	refuse wire.RequestErrorCode // if set, SUBSCRIBEs are refused with it
	hold   chan struct{}         // if set, SUBSCRIBEs wait for it
}

func (p *publisher) ServeMOQT(r moqt.Request) {
	sr, ok := r.(*moqt.SubscribeRequest)
	if !ok {
		moqt.DefaultHandler.ServeMOQT(r)
		return
	}
	p.mu.Lock()
	p.subs = append(p.subs, sr)
	refuse, hold := p.refuse, p.hold
	p.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if refuse != 0 {
		_ = r.Reject(refuse, "refused by test publisher")
		return
	}
	ss, err := p.track.Accept(sr, moqt.AcceptOptions{})
	if err == nil {
		p.mu.Lock()
		p.served = append(p.served, ss)
		p.mu.Unlock()
	}
}

// setHold makes SUBSCRIBEs wait until the returned channel is closed.
func (p *publisher) setHold() chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.hold = ch
	p.mu.Unlock()
	return ch
}

func (p *publisher) setRefuse(code wire.RequestErrorCode) {
	p.mu.Lock()
	p.refuse = code
	p.mu.Unlock()
}

func (p *publisher) subscribes() []*moqt.SubscribeRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*moqt.SubscribeRequest(nil), p.subs...)
}

func (p *publisher) servedSubs() []*moqt.ServedSubscription {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*moqt.ServedSubscription(nil), p.served...)
}

// newPublisher connects a publisher of name at path, its track with props.
func (n *node) newPublisher(path string, name wire.FullTrackName, props wire.KVList) *publisher {
	n.t.Helper()
	return n.newPublisherConfig(path, name, props, func(*moqt.Config) {})
}

// newPublisherConfig is newPublisher with the client's Config changed by
// set.
func (n *node) newPublisherConfig(path string, name wire.FullTrackName, props wire.KVList, set func(*moqt.Config)) *publisher {
	n.t.Helper()
	tr, err := moqt.NewLocalTrack(name, props)
	require.NoError(n.t, err)
	p := &publisher{track: tr}
	cfg := n.clientConfig(p)
	set(cfg)
	p.client, p.server = n.dialConfig(path, cfg)
	return p
}

// announce registers p's relay session as publishing ns, as an accepted
// PUBLISH_NAMESPACE does.
func (n *node) announce(p *publisher, ns wire.Namespace) func() {
	return n.relay.reg.addAnnouncer(p.server, ns)
}

// upstreamTo makes Config.Upstream resolve every namespace to the relay's
// session with the client at path.
func upstreamTo(n **node, path string) Upstream {
	return UpstreamFunc(func(ctx context.Context, _ wire.Namespace) (*moqt.Session, error) {
		return (*n).session(path), nil
	})
}

// twoPublishers connects publishers a and b of testTrack, both announcing
// (live), and a subscriber whose subscription both serve.
func (n *node) twoPublishers(t *testing.T) (a, b *publisher, c *moqt.Session, sub *moqt.Subscription) {
	t.Helper()
	a = n.newPublisher("/a", testTrack, nil)
	b = n.newPublisher("/b", testTrack, nil)
	n.announce(a, wire.NewNamespace("live"))
	n.announce(b, wire.NewNamespace("live"))
	c, _ = n.dial("/sub", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{})
	require.NoError(t, err)
	settled(t, "both publishers serve the relay", func() bool {
		return len(a.servedSubs()) == 1 && len(b.servedSubs()) == 1
	})
	return a, b, c, sub
}

var testTrack = wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}

// subscribe subscribes c to name through the relay.
func subscribe(t *testing.T, c *moqt.Session, name wire.FullTrackName, p wire.Params) (*moqt.Subscription, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Subscribe(ctx, name, p)
}

// writeGroup publishes group g of n objects on subgroup 0 of tr, each
// payload "g/i", and closes it.
func writeGroup(t *testing.T, tr *moqt.LocalTrack, g uint64, n int) {
	t.Helper()
	w := tr.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
	for i := range n {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: uint64(i)}, Payload: payload(g, uint64(i))}))
	}
	require.NoError(t, w.Close())
}

func payload(g, o uint64) []byte { return []byte(fmt.Sprintf("%d/%d", g, o)) }

// readSubgroup reads one subgroup stream of sub to its end.
func readSubgroup(t *testing.T, sub *moqt.Subscription) ([]moqt.Object, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := sub.AcceptSubgroup(ctx)
	if err != nil {
		return nil, err
	}
	var out []moqt.Object
	for {
		o, err := r.ReadObject(nil)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		o.Properties = append([]byte(nil), o.Properties...)
		out = append(out, o)
	}
}

// requestCode is the REQUEST_ERROR code of err.
func requestCode(t *testing.T, err error) wire.RequestErrorCode {
	t.Helper()
	var re *moqt.RequestError
	require.True(t, errors.As(err, &re), "want a *RequestError, got %v", err)
	return re.Code
}

// settled waits until every goroutine of t's synctest bubble is blocked,
// and so the relay has done what it does in answer to what the test did,
// and requires cond then. Where a timer of the rule makes it hold, the
// test sleeps (on the bubble's clock) past it first.
func settled(t *testing.T, msg string, cond func() bool) {
	t.Helper()
	synctest.Wait()
	require.True(t, cond(), msg)
}

// trackCount is the number of tracks in the registry.
func (rl *Relay) trackCount() int {
	rl.reg.mu.Lock()
	defer rl.reg.mu.Unlock()
	return len(rl.reg.tracks)
}

// tracksEmptyAndNoHeld: no track, no held SUBSCRIBE (announcements aside).
func (rl *Relay) tracksEmptyAndNoHeld() bool {
	rl.reg.mu.Lock()
	defer rl.reg.mu.Unlock()
	return len(rl.reg.tracks) == 0 && rl.reg.held == 0
}

// tablesEmpty reports whether the relay holds nothing: no track, no
// announcement, no held SUBSCRIBE.
func (rl *Relay) tablesEmpty() error {
	rl.reg.mu.Lock()
	defer rl.reg.mu.Unlock()
	var left []string
	if len(rl.reg.tracks) > 0 {
		left = append(left, fmt.Sprintf("%d tracks", len(rl.reg.tracks)))
	}
	if len(rl.reg.anns) > 0 {
		left = append(left, fmt.Sprintf("%d announcements", len(rl.reg.anns)))
	}
	if rl.reg.held > 0 {
		left = append(left, fmt.Sprintf("%d held", rl.reg.held))
	}
	if len(left) > 0 {
		return errors.New(strings.Join(left, ", "))
	}
	return nil
}

// upstreamForwarding reports whether every publisher of name has Forward 1
// from the relay, with no REQUEST_UPDATE of it under way.
func (rl *Relay) upstreamForwarding(name wire.FullTrackName) bool {
	e := rl.reg.lookup(name)
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for u := range e.ups {
		if u.sub == nil || !u.sent || u.updating {
			return false
		}
	}
	return len(e.ups) > 0
}

var _ = assert.Equal

// liveSubscription starts a relay over scheme with one publisher of
// testTrack that announced (live), and a subscriber session c subscribed
// to testTrack through it.
func liveSubscription(t *testing.T, scheme string) (n *node, pub *publisher, c *moqt.Session, sub *moqt.Subscription) {
	t.Helper()
	n = startNode(t, scheme, Config{}, nil)
	pub = n.newPublisher("/pub", testTrack, nil)
	n.announce(pub, wire.NewNamespace("live"))
	c, _ = n.dial("/sub", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{})
	require.NoError(t, err)
	return n, pub, c, sub
}
