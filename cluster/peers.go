package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// peers are this node's sessions to the other nodes: one per node, dialed
// when first needed and shared by every track asked of it.
type peers struct {
	n *Node

	mu     sync.Mutex
	closed bool
	byNode map[string]*relay.Dialer
	// live is the session each node's dialer last returned.
	live map[string]*moqt.Session
	// lingering are the dialers of nodes that left the registry while
	// their session was still up: kept until the session ends, or the
	// node comes back.
	lingering map[string]*relay.Dialer
}

func newPeers(n *Node) *peers {
	return &peers{n: n, byNode: map[string]*relay.Dialer{}, live: map[string]*moqt.Session{},
		lingering: map[string]*relay.Dialer{}}
}

// session returns the session to t's node, dialing it if needed.
func (p *peers) session(ctx context.Context, t target) (*moqt.Session, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, relay.ErrDialerClosed
	}
	d := p.byNode[t.node]
	if d == nil && p.lingering[t.node] != nil {
		// Back in the registry before its session ended.
		d = p.lingering[t.node]
		delete(p.lingering, t.node)
		p.byNode[t.node] = d
	}
	if d == nil {
		e := entry{Pin: t.pin}
		pins, err := e.pin()
		if err != nil {
			p.mu.Unlock()
			return nil, err
		}
		cfg := *p.n.cfg.MoQT
		cfg.Handler = p.n.relay()
		cfg.AuthorizationTokens = []wire.Token{wire.UseToken(wire.TokenTypeOutOfBand, p.n.cfg.Token)}
		cfg.ServerCertificateHashes = pins
		// A node that dies is noticed by its session, which ends its
		// tracks here, within the registry's TTL: a PING every TTL/6,
		// and no packet for 2/3 of the TTL after one ends it (the
		// session's keep-alive plus its idle timeout, 5/6 of the TTL).
		if ttl := p.n.bucketTTL(); cfg.MaxIdleTimeout == 0 || cfg.MaxIdleTimeout > 2*ttl/3 {
			cfg.MaxIdleTimeout = 2 * ttl / 3
			cfg.KeepAlivePeriod = ttl / 6
		}
		d = relay.DialUpstream(t.url, &cfg)
		p.byNode[t.node] = d
	}
	p.mu.Unlock()
	s, err := d.Session(ctx, nil)
	if err == nil {
		p.mu.Lock()
		if p.byNode[t.node] == d {
			p.live[t.node] = s
		}
		p.mu.Unlock()
	}
	return s, err
}

// drop forgets a node that left the registry: no new route goes to it.
// Its session, if one is up, is not closed on that account: a node whose
// refresh was merely late (a busy machine, a NATS hiccup) would otherwise
// have every flow through it cut. A node that died is noticed by the
// session itself, within 5/6 of the TTL (its keep-alive and idle timeout), which ends its
// tracks here with PUBLISH_DONE to their subscribers.
func (p *peers) drop(node string) {
	p.mu.Lock()
	d := p.byNode[node]
	delete(p.byNode, node)
	s := p.live[node]
	delete(p.live, node)
	up := d != nil && !p.closed && s != nil && s.Context().Err() == nil
	if up {
		p.lingering[node] = d
	}
	p.mu.Unlock()
	switch {
	case up:
		p.n.log.Info("cluster: peer", "event", "left", "peer", node)
		go p.linger(node, d, s)
	case d != nil:
		_ = d.Close()
		p.n.log.Info("cluster: peer", "event", "gone", "peer", node)
	}
}

// linger closes the dialer of a node that left the registry once its
// session ends, unless the node came back meanwhile.
func (p *peers) linger(node string, d *relay.Dialer, s *moqt.Session) {
	<-s.Context().Done()
	p.mu.Lock()
	mine := p.lingering[node] == d
	if mine {
		delete(p.lingering, node)
	}
	p.mu.Unlock()
	if mine {
		_ = d.Close()
		p.n.log.Info("cluster: peer", "event", "gone", "peer", node)
	}
}

func (p *peers) close() {
	p.mu.Lock()
	p.closed = true
	var list []*relay.Dialer
	for _, m := range []map[string]*relay.Dialer{p.byNode, p.lingering} {
		for _, d := range m {
			list = append(list, d)
		}
	}
	p.byNode, p.lingering = map[string]*relay.Dialer{}, map[string]*relay.Dialer{}
	p.mu.Unlock()
	for _, d := range list {
		_ = d.Close()
	}
}

// Session is the relay's Upstream: the first of Sessions.
func (n *Node) Session(ctx context.Context, ns wire.Namespace) (*moqt.Session, error) {
	ss, err := n.Sessions(ctx, ns)
	if len(ss) == 0 {
		return nil, err
	}
	return ss[0], nil
}

// Sessions is the relay's Upstream (relay.UpstreamSet): the sessions to
// every node that has the track asked for (a namespace of it announced
// there, or the track PUBLISHed), the oldest registered first, since any
// of them may publish it (§7.5: every matching publisher is asked). A
// request from another node gets none (nil, nil: DOES_NOT_EXIST), so that
// nothing loops through the cluster; nor does the relay's own namespace
// business, which UpstreamTracksOnly keeps from asking. A node that cannot
// be reached is left out. While NATS is out of reach and the view knows
// no node for the track, it waits, within ctx, for the view to be current
// again (new routes wait for the registry), unless the relay has a
// publisher of it already (relay.RequestPublished).
func (n *Node) Sessions(ctx context.Context, _ wire.Namespace) ([]*moqt.Session, error) {
	if n.IsPeer(relay.RequestSession(ctx)) {
		return nil, nil
	}
	name, ok := relay.RequestTrack(ctx)
	if !ok {
		return nil, nil
	}
	for {
		targets, wait, changed := n.view.route(name)
		if len(targets) > 0 {
			return n.peers.sessions(ctx, targets)
		}
		if wait == 0 || relay.RequestPublished(ctx) {
			return nil, nil
		}
		if !waitFor(ctx, changed, wait) {
			return nil, errors.Join(errors.New("cluster: registry out of reach"), ctx.Err())
		}
	}
}

// sessions returns the sessions to targets, dialing those not up at once,
// in targets' order; an error only when none could be had.
func (p *peers) sessions(ctx context.Context, targets []target) ([]*moqt.Session, error) {
	ss := make([]*moqt.Session, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			ss[i], errs[i] = p.session(ctx, t)
			if errs[i] != nil {
				p.n.log.Warn("cluster: peer", "event", "dial_failed", "peer", t.node, "url", t.url, "err", errs[i])
			}
		})
	}
	wg.Wait()
	out := ss[:0]
	for _, s := range ss {
		if s != nil {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// waitFor waits for changed, or d when d > 0; false if ctx ended first.
func waitFor(ctx context.Context, changed <-chan struct{}, d time.Duration) bool {
	var settled <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		settled = t.C
	}
	select {
	case <-ctx.Done():
		return false
	case <-changed:
	case <-settled:
	}
	return true
}
