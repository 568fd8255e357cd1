package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// schemes are the transports end-to-end tests run over.
var schemes = []string{"moqt", "https"}

// forSchemes runs f over raw QUIC and WebTransport.
func forSchemes(t *testing.T, f func(t *testing.T, scheme string)) {
	for _, sc := range schemes {
		t.Run(sc, func(t *testing.T) { f(t, sc) })
	}
}

var quiet = slog.New(slog.DiscardHandler)

// node is a relay listening on loopback, with the sessions it accepted.
type node struct {
	t      *testing.T
	relay  *Relay
	srv    *moqt.Server
	hash   [32]byte
	scheme string

	mu       sync.Mutex
	sessions map[string]*moqt.Session // by path
	arrived  chan struct{}
}

// startNode starts a relay with cfg (Authorize defaults to AllowAll, Logger
// to quiet) serving over one UDP port; everything ends with the test.
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
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	cert, hash, err := moqt.GenerateCertificate()
	require.NoError(t, err)
	n := &node{t: t, hash: hash, scheme: scheme, sessions: map[string]*moqt.Session{}, arrived: make(chan struct{}, 64)}
	n.relay = New(cfg)
	mc := moqt.Config{}
	if sessCfg != nil {
		mc = *sessCfg
	}
	mc.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	mc.Handler = n.relay
	if mc.Logger == nil {
		mc.Logger = quiet
	}
	n.srv, err = moqt.Listen("127.0.0.1:0", &mc, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s, err := n.srv.Accept(ctx)
			if err != nil {
				return
			}
			n.mu.Lock()
			n.sessions[s.Path()] = s
			n.mu.Unlock()
			select {
			case n.arrived <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		n.mu.Lock()
		list := make([]*moqt.Session, 0, len(n.sessions))
		for _, s := range n.sessions {
			list = append(list, s)
		}
		n.mu.Unlock()
		for _, s := range list {
			_ = s.Close()
		}
		_ = n.relay.Close()
		_ = n.srv.Close()
	})
	return n
}

// url is the node's URL for path.
func (n *node) url(path string) string {
	return n.scheme + "://" + n.srv.Addr().String() + path
}

// clientConfig trusts the node.
func (n *node) clientConfig(h moqt.Handler) *moqt.Config {
	return &moqt.Config{ServerCertificateHashes: [][32]byte{n.hash}, Handler: h, Logger: quiet}
}

// dial connects a client with path (unique per client) and returns its
// session and the relay's end of it.
func (n *node) dial(path string, h moqt.Handler) (client, server *moqt.Session) {
	n.t.Helper()
	return n.dialConfig(path, n.clientConfig(h))
}

// dialConfig is dial with cfg, which must trust the node (clientConfig).
func (n *node) dialConfig(path string, cfg *moqt.Config) (client, server *moqt.Session) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := moqt.Dial(ctx, n.url(path), cfg)
	require.NoError(n.t, err)
	n.t.Cleanup(func() { _ = c.Close() })
	require.Eventually(n.t, func() bool { return n.session(path) != nil }, 5*time.Second, time.Millisecond)
	return c, n.session(path)
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
	waitFor(t, "both publishers serve the relay", func() bool {
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

// waitFor fails t unless cond holds within a few seconds.
func waitFor(t *testing.T, msg string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 2*time.Millisecond, msg)
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
