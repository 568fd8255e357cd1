package cluster

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// Node is one relay's membership of a cluster: its registry entries, its
// view of the others', and its sessions to them. It is the relay's
// Config.Upstream and Config.Observer (see RelayConfig).
type Node struct {
	cfg  Config
	id   string
	log  *slog.Logger
	nc   *nats.Conn
	js   jetstream.JetStream
	ownc bool // nc is the Node's to close

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	conn  *signal // NATS connection changes
	own   *ownEntries
	view  *view
	peers *peers

	mu  sync.Mutex
	rl  *relay.Relay
	ttl time.Duration // the bucket's, once known
	// ageAll: the bucket was made with a MaxAge (by an earlier version),
	// which expires every entry, so every entry must be refreshed.
	ageAll bool
}

// New connects to NATS (retrying in the background while it is down) and
// returns a Node, which joins the cluster once Start is given its relay.
func New(cfg Config) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	n := &Node{cfg: cfg, id: hex.EncodeToString(idb[:]), conn: newSignal(), ttl: cfg.TTL}
	n.log = cfg.Logger.With("node", n.id)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.nc = cfg.Conn
	if n.nc == nil {
		n.nc, err = nats.Connect(cfg.NATS,
			nats.Name("moqt-cluster-"+n.id),
			nats.RetryOnFailedConnect(true),
			nats.MaxReconnects(-1),
			nats.ReconnectWait(250*time.Millisecond),
			nats.ConnectHandler(func(nc *nats.Conn) { n.connChanged(nc, nats.CONNECTED, nil) }),
			nats.ReconnectHandler(func(nc *nats.Conn) { n.connChanged(nc, nats.CONNECTED, nil) }),
			nats.DisconnectErrHandler(func(nc *nats.Conn, err error) { n.connChanged(nc, nats.DISCONNECTED, err) }),
			nats.ClosedHandler(func(*nats.Conn) { n.conn.fire() }))
		if err != nil {
			n.cancel()
			return nil, err
		}
		n.ownc = true
	} else {
		// Someone else's connection: its state is polled, not told.
		n.wg.Add(1)
		go n.pollConn()
	}
	n.js, err = jetstream.New(n.nc)
	if err != nil {
		n.Close()
		return nil, err
	}
	n.own = newOwnEntries(n.id, cfg.URL, cfg.CertHash)
	n.view = newView(n.id)
	n.peers = newPeers(n)
	return n, nil
}

// ID is the node's identity in the registry, new each time a Node is made.
func (n *Node) ID() string { return n.id }

// RelayConfig returns cfg made the configuration of a cluster node's
// relay: the Node is its Upstream (UpstreamTracksOnly) and Observer, and
// its Authorize serves sessions presenting the cluster token as nodes (see
// Authorize).
func (n *Node) RelayConfig(cfg relay.Config) relay.Config {
	cfg.Upstream = n
	cfg.UpstreamTracksOnly = true
	cfg.Observer = n
	cfg.Authorize = n.Authorize(cfg.Authorize)
	return cfg
}

// Start joins the cluster with rl, made with RelayConfig: the node's
// entries are registered and kept, the others' watched. It also serves
// the requests other nodes send back on the sessions to them.
func (n *Node) Start(rl *relay.Relay) {
	n.mu.Lock()
	n.rl = rl
	n.mu.Unlock()
	n.wg.Add(2)
	go n.writeLoop()
	go n.watchLoop()
}

// Close leaves the cluster: the node's entries are deleted (if NATS is
// reachable within a second), its sessions to other nodes closed, and its
// NATS connection closed if it made it. The relay is the caller's to close.
func (n *Node) Close() error {
	n.cancel()
	n.wg.Wait()
	if n.own != nil && n.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if kv, err := n.js.KeyValue(ctx, n.cfg.Bucket); err == nil {
			for _, key := range n.own.keys() {
				_ = kv.Purge(ctx, key, jetstream.PurgeTTL(n.bucketTTL()))
			}
		}
		cancel()
	}
	if n.view != nil {
		n.view.clear(n.relay())
	}
	if n.peers != nil {
		n.peers.close()
	}
	if n.ownc {
		n.nc.Close()
	}
	return nil
}

func (n *Node) relay() *relay.Relay {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rl
}

// bucketTTL is the registry's TTL.
func (n *Node) bucketTTL() time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ttl
}

// refreshesAll reports whether every entry must be refreshed, not only
// the node entry (see ageAll).
func (n *Node) refreshesAll() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ageAll
}

// bucket opens the registry's bucket, making it if it does not exist
// (after a NATS restart, a memory bucket is gone), and learns its TTL:
// the node entries' (the markers' TTL, LimitMarkerTTL), the bucket having
// no MaxAge since content entries live until their node or its
// survivors remove them.
func (n *Node) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.TTL)
	defer cancel()
	kv, err := n.js.KeyValue(ctx, n.cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = n.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:         n.cfg.Bucket,
			Description:    "moqt cluster registry",
			History:        1,
			LimitMarkerTTL: n.cfg.TTL,
			Storage:        jetstream.MemoryStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = n.js.KeyValue(ctx, n.cfg.Bucket)
		}
	}
	if err != nil {
		return nil, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.LimitMarkerTTL() <= 0 {
		return nil, errors.New("cluster: the registry's bucket has no LimitMarkerTTL, so no per-key TTL")
	}
	n.mu.Lock()
	n.ttl, n.ageAll = st.LimitMarkerTTL(), st.TTL() > 0
	if n.ageAll {
		n.ttl = st.TTL()
	}
	n.mu.Unlock()
	return kv, nil
}

// pollConn follows a connection the Node did not make, whose handlers
// are the caller's.
func (n *Node) pollConn() {
	defer n.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := n.nc.Status()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			if st := n.nc.Status(); st != last {
				last = st
				n.connChanged(n.nc, st, nil)
			}
		}
	}
}

// connChanged tells the node's loops, and the log, that nc, the NATS
// connection, went to st: an operator learns that the registry is out of
// reach (the routes known stay, new ones wait for it) and when it is back.
func (n *Node) connChanged(nc *nats.Conn, st nats.Status, err error) {
	if st == nats.CONNECTED {
		n.log.Info("cluster: NATS connected", "url", nc.ConnectedUrlRedacted())
	} else {
		n.log.Warn("cluster: NATS connection lost; known routes stay, new ones wait for it", "status", st.String(), "err", err)
	}
	n.conn.fire()
}

// IsPeer reports whether s presented the cluster token in its SETUP: a
// session from another node.
func (n *Node) IsPeer(s *moqt.Session) bool {
	if s == nil {
		return false
	}
	for _, tok := range s.PeerAuthorizationTokens() {
		if tok.Type == uint64(wire.TokenTypeOutOfBand) && subtle.ConstantTimeCompare(tok.Value, n.cfg.Token) == 1 {
			return true
		}
	}
	return false
}

// Authorize returns the relay's Authorize for a node: the SUBSCRIBE,
// FETCH and TRACK_STATUS of other nodes (sessions presenting the cluster
// token) are allowed, their other requests refused, since a node asks
// another only for tracks; every other session's requests, and updates,
// are decided by next (nil refuses them all).
func (n *Node) Authorize(next func(moqt.Request, *wire.Params) error) func(moqt.Request, *wire.Params) error {
	return func(req moqt.Request, update *wire.Params) error {
		if n.IsPeer(req.Session()) {
			switch req.(type) {
			case *moqt.SubscribeRequest, *moqt.FetchRequest, *moqt.TrackStatusRequest:
				return nil
			}
			return &moqt.RequestError{Code: wire.ReqUnauthorized, Reason: "a cluster node asks only for tracks"}
		}
		if next == nil {
			return errors.New("cluster: no authorizer configured")
		}
		return next(req, update)
	}
}

// Namespace registers, or withdraws, a namespace announced at this node
// (relay.Observer). Other nodes' announcements through this one are not
// this node's to register.
func (n *Node) Namespace(ns wire.Namespace, from []*moqt.Session) {
	n.own.set(kindNamespace, wire.FullTrackName{Namespace: ns}, n.local(from))
}

// Track registers, or withdraws, a track PUBLISHed at this node
// (relay.Observer).
func (n *Node) Track(name wire.FullTrackName, from []*moqt.Session) {
	n.own.set(kindTrack, name, n.local(from))
}

// local reports whether a session other than a node's is among from.
func (n *Node) local(from []*moqt.Session) bool {
	for _, s := range from {
		if !n.IsPeer(s) {
			return true
		}
	}
	return false
}

// signal is a broadcast: wait returns a channel closed by the next fire.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.ch)
	s.ch = make(chan struct{})
}
