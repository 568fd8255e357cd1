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
	pub    *moqt.Server
	track  *moqt.LocalTrack
	relay  *relay.Relay
	dialer *relay.Dialer
	srv    *moqt.Server // the relay's
	ctls   *tls.Config  // trusts srv
	cancel context.CancelFunc
	done   chan struct{} // the publisher's accept loop ended
	mu     sync.Mutex
	up     []*moqt.Session // the publisher's ends of the relay's sessions
}

// newRelayNode starts the publisher and the relay, which is to serve up
// to sessions sessions. Both serve their subscribers with the
// configuration cfg returns: the fan-out publisher's (fanoutConfig), where
// slow ones may queue a whole batch, or the defaults.
func newRelayNode(sessions int, cfg func() *moqt.Config) (_ *relayNode, err error) {
	n := &relayNode{cancel: func() {}}
	defer func() {
		if err != nil {
			_ = n.close()
		}
	}()
	var pubTLS *tls.Config
	if n.pub, n.track, pubTLS, err = trackServer(cfg(), nil); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	go n.acceptUpstream(ctx)

	// The upstream session is served by the relay too; it is dialed at
	// the first SUBSCRIBE, after Handler is set.
	upCfg := &moqt.Config{TLSConfig: pubTLS, Logger: quiet}
	n.dialer = relay.DialUpstream("moqt://"+n.pub.Addr().String()+"/bench", upCfg)
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
	n.ctls = ctls
	return n, nil
}

// acceptUpstream accepts the sessions the relay dials to the publisher.
func (n *relayNode) acceptUpstream(ctx context.Context) {
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

// close ends the relay, its upstream and the publisher; the relay's
// downstream sessions are the caller's to close first.
func (n *relayNode) close() error {
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
	n.cancel()
	if n.done != nil {
		<-n.done
	}
	for _, s := range n.up {
		_ = s.Close()
		<-s.Context().Done()
	}
	if n.pub != nil {
		_ = n.pub.Close()
	}
	return err
}

// relayChain is a publisher → relay → subscribers chain: a LocalTrack
// publishes, the relay package forwards.
type relayChain struct {
	node    *relayNode
	down    sessions
	subs    []*moqt.Subscription
	closing closers
}

// NewRelayChain connects a moqt publisher through the relay package to
// subscribers subscriber sessions, each subscribed to the track through
// the relay and each on its own loopback connection.
func NewRelayChain(ctx context.Context, subscribers int) (_ *Chain, err error) {
	node, err := newRelayNode(subscribers, fanoutConfig)
	if err != nil {
		return nil, err
	}
	p := &relayChain{node: node}
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
	return moqtWriter{w: p.node.track.OpenSubgroup(g, 0, moqt.SubgroupOptions{}), group: g}, nil
}

func (p *relayChain) accept(ctx context.Context, i int) (groupReader, error) {
	return acceptMoQT(ctx, p.subs[i])
}

func (p *relayChain) close() error {
	return p.closing.close(
		func() error { p.down.close(); return nil },
		p.node.close,
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
