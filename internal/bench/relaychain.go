package bench

import (
	"context"
	"crypto/tls"
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
)

// relayNode is a moqt publisher serving benchTrack from a LocalTrack, and
// a relay, on a server of its own, whose upstream is the publisher: a
// SUBSCRIBE to the relay for benchTrack is sent on, once, to the
// publisher, and its objects are fanned out by the relay.
type relayNode struct {
	*upstreamPublisher
	*relayServer
}

// newRelayNode starts the publisher and the relay, which is to serve up
// to sessions sessions. Both serve their subscribers with the
// configuration cfg returns: the fan-out publisher's (fanoutConfig), where
// slow ones may queue a whole batch, or the defaults.
func newRelayNode(sessions int, cfg func() *moqt.Config) (_ *relayNode, err error) {
	n := &relayNode{}
	if n.upstreamPublisher, err = newUpstreamPublisher(cfg); err != nil {
		return nil, err
	}
	if n.relayServer, err = newRelayServer(n.addr(), n.pubTLS, sessions, cfg); err != nil {
		_ = n.upstreamPublisher.close()
		return nil, err
	}
	return n, nil
}

// close ends the relay, its upstream and the publisher; the relay's
// downstream sessions are the caller's to close first.
func (n *relayNode) close() error {
	err := n.relayServer.close()
	if e := n.upstreamPublisher.close(); err == nil {
		err = e
	}
	return err
}

// upstreamPublisher is a moqt publisher serving benchTrack from a
// LocalTrack to the relays that dial it.
type upstreamPublisher struct {
	pub    *moqt.Server
	track  *moqt.LocalTrack
	pubTLS *tls.Config // trusts pub
	pubDER []byte      // pub's certificate
	cancel context.CancelFunc
	done   chan struct{} // the accept loop ended
	mu     sync.Mutex
	up     []*moqt.Session // the publisher's ends of the relays' sessions
}

// newUpstreamPublisher starts the publisher with the configuration cfg
// returns.
func newUpstreamPublisher(cfg func() *moqt.Config) (*upstreamPublisher, error) {
	c := cfg()
	pub, track, ctls, err := trackServer(c, nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &upstreamPublisher{pub: pub, track: track, pubTLS: ctls, pubDER: leafDER(c.TLSConfig), cancel: cancel,
		done: make(chan struct{})}
	go n.acceptUpstream(ctx)
	return n, nil
}

// addr is the publisher's address as a moqt:// URL.
func (n *upstreamPublisher) addr() string { return "moqt://" + n.pub.Addr().String() + "/bench" }

// acceptUpstream accepts the sessions the relays dial to the publisher.
func (n *upstreamPublisher) acceptUpstream(ctx context.Context) {
	defer close(n.done)
	for {
		s, err := n.pub.Accept(ctx)
		if err != nil {
			return
		}
		n.mu.Lock()
		n.up = append(n.up, s)
		n.mu.Unlock()
	}
}

// close ends the relays' sessions and the publisher.
func (n *upstreamPublisher) close() error {
	n.cancel()
	<-n.done
	for _, s := range n.up {
		_ = s.Close()
		<-s.Context().Done()
	}
	return n.pub.Close()
}

// relayServer is a relay, on a server of its own, whose upstream is a
// publisher it dials at the first SUBSCRIBE.
type relayServer struct {
	relay  *relay.Relay
	dialer *relay.Dialer
	srv    *moqt.Server // the relay's
	ctls   *tls.Config  // trusts srv
	der    []byte       // srv's certificate
}

// newRelayServer starts a relay whose upstream is the publisher at url
// (moqt://), whose certificate upTLS trusts, and which is to serve up to
// sessions sessions with the configuration cfg returns. Someone must
// accept them: the caller or Serve.
func newRelayServer(url string, upTLS *tls.Config, sessions int, cfg func() *moqt.Config) (_ *relayServer, err error) {
	n := &relayServer{}
	defer func() {
		if err != nil {
			_ = n.close()
		}
	}()
	// The upstream session is served by the relay too; it is dialed at
	// the first SUBSCRIBE, after Handler is set.
	upCfg := &moqt.Config{TLSConfig: upTLS, Logger: quiet}
	n.dialer = relay.DialUpstream(url, upCfg)
	n.relay = relay.New(relay.Config{Authorize: relay.AllowAll, Upstream: n.dialer, Logger: quiet})
	upCfg.Handler = n.relay
	stls, ctls, err := tlsConfigs()
	if err != nil {
		return nil, err
	}
	rcfg := cfg()
	rcfg.TLSConfig, rcfg.Logger, rcfg.Handler = stls, quiet, n.relay
	if n.srv, err = moqt.Listen("127.0.0.1:0", rcfg, &moqt.ServerOptions{MaxPendingSessions: sessions + 1}); err != nil {
		return nil, err
	}
	n.ctls, n.der = ctls, leafDER(stls)
	return n, nil
}

// close ends the relay, its upstream session and its server; its
// downstream sessions are the caller's to close first.
func (n *relayServer) close() error {
	var err error
	if n.relay != nil {
		err = n.relay.Close()
	}
	if n.dialer != nil {
		_ = n.dialer.Close()
	}
	if n.srv != nil {
		_ = n.srv.Close()
	}
	return err
}

// relayChain is a publisher → relay → subscribers chain: a LocalTrack
// publishes, the relay package forwards.
type relayChain struct {
	track   *moqt.LocalTrack // the publisher's
	down    sessions
	subs    []*moqt.Subscription
	closing closers
	// closeNode ends the relay and the publisher, once down is closed.
	closeNode func() error
}

// NewRelayChain connects a moqt publisher through the relay package to
// subscribers subscriber sessions, each subscribed to the track through
// the relay and each on its own loopback connection.
func NewRelayChain(ctx context.Context, subscribers int) (_ *Chain, err error) {
	node, err := newRelayNode(subscribers, fanoutConfig)
	if err != nil {
		return nil, err
	}
	p := &relayChain{track: node.track, closeNode: node.close}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if err := p.down.dial(ctx, node.srv, node.ctls, subscribers); err != nil {
		return nil, err
	}
	if p.subs, err = p.down.subscribe(ctx, 16); err != nil {
		return nil, err
	}
	return newChain(p, subscribers), nil
}

func (p *relayChain) publish(_ context.Context, g uint64) (groupWriter, error) {
	return moqtWriter{w: p.track.OpenSubgroup(g, 0, moqt.SubgroupOptions{}), group: g}, nil
}

func (p *relayChain) accept(ctx context.Context, i int) (groupReader, error) {
	return acceptMoQT(ctx, p.subs[i])
}

func (p *relayChain) close() error {
	return p.closing.close(
		func() error { p.down.close(); return nil },
		p.closeNode,
	)
}

// relayTarget is a relay in front of a publisher, for idle subscriptions.
func relayTarget(context.Context) (*idleTarget, error) {
	n, err := newRelayNode(64, fanoutConfig)
	if err != nil {
		return nil, err
	}
	return &idleTarget{srv: n.srv, ctls: n.ctls, close: n.close}, nil
}
