package cluster

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// view is this node's copy of the other nodes' registry entries. The
// watch loop alone changes it, and makes the relay offers and peer
// closings that follow outside its lock; routes read it under the lock.
type view struct {
	self string

	mu      sync.Mutex
	entries map[string]*seen // by key
	// orphans are content entries whose node entry is not (or no longer)
	// in the view: a watch delivers a node's content before its last
	// refresh, a late node may come back, and a dead node's stay in the
	// bucket until purged. They are neither routed to nor offered.
	orphans map[string]*seen
	offers  map[wire.NamespaceKey]*offer
	synced  bool // the bucket's current contents are in, and NATS is up
	// settled is when, after a sync, every live node has put its entries
	// again (a refresh period on): a NATS server that restarted empty
	// learns them only then, so until then a miss is not final.
	settled time.Time
	changed *signal
}

// seen is one entry of another node.
type seen struct {
	kind  string
	e     *entry
	rev   uint64    // the entry's revision in the bucket
	since time.Time // first seen (an orphan: since when): routes prefer the oldest
	// deadline is until when a node entry holds without a refresh.
	deadline time.Time
	purged   bool // an orphan this node has purged
}

// purge is an orphan to remove from the bucket, unless put again since.
type purge struct {
	key string
	rev uint64
}

// offer is a namespace offered to the relay for the nodes announcing it.
type offer struct {
	count    int
	withdraw func()
}

func newView(self string) *view {
	return &view{self: self, entries: map[string]*seen{}, orphans: map[string]*seen{},
		offers: map[wire.NamespaceKey]*offer{}, changed: newSignal()}
}

// effects are what a change of the view asks of the relay and the peers,
// done outside the view's lock.
type effects struct {
	offer    []wire.Namespace
	more     []wire.Namespace     // offered already, announced at one more node
	tracks   []wire.FullTrackName // PUBLISHed at a node: held SUBSCRIBEs ask again
	withdraw []func()
	gone     []string // nodes that left
	purge    []purge  // orphans of dead nodes, for this node to remove
}

func (v *view) run(rl *relay.Relay, p *peers, fx effects) {
	for _, ns := range fx.offer {
		v.mu.Lock()
		o := v.offers[ns.Key()]
		v.mu.Unlock()
		if o != nil && rl != nil {
			w := rl.OfferNamespace(ns)
			v.mu.Lock()
			if v.offers[ns.Key()] == o && o.withdraw == nil {
				o.withdraw = w
				w = nil
			}
			v.mu.Unlock()
			if w != nil {
				w()
			}
		}
	}
	for _, ns := range fx.more {
		if rl != nil {
			rl.RetryNamespace(ns)
		}
	}
	for _, name := range fx.tracks {
		if rl != nil {
			rl.RetryHeld(name)
		}
	}
	for _, w := range fx.withdraw {
		w()
	}
	for _, node := range fx.gone {
		p.drop(node)
	}
}

// putLocked records an entry put at key.
func (v *view) putLocked(key string, value []byte, rev uint64, now time.Time, ttl time.Duration, fx *effects) {
	kind, node, ok := parseKey(key)
	if !ok || node == v.self {
		return
	}
	e, err := decodeEntry(value)
	if err != nil || e.Node != node {
		return
	}
	if s := v.entries[key]; s != nil {
		s.e, s.rev, s.deadline = e, rev, now.Add(ttl)
		return
	}
	s := &seen{kind: kind, e: e, rev: rev, since: now, deadline: now.Add(ttl)}
	if kind != kindNode && v.entries[keyOf(kindNode, node, wire.FullTrackName{})] == nil {
		v.orphans[key] = s
		return
	}
	delete(v.orphans, key)
	v.addLocked(key, s, fx)
	if kind == kindNode {
		for k, o := range v.orphans {
			if o.e.Node == node {
				delete(v.orphans, k)
				o.since = now
				v.addLocked(k, o, fx)
			}
		}
	}
}

// addLocked adds an entry whose node is in the view.
func (v *view) addLocked(key string, s *seen, fx *effects) {
	v.entries[key] = s
	if s.kind == kindTrack {
		fx.tracks = append(fx.tracks, s.e.track())
	}
	if s.kind == kindNamespace {
		k := s.e.namespace().Key()
		o := v.offers[k]
		if o == nil {
			o = &offer{}
			v.offers[k] = o
			fx.offer = append(fx.offer, s.e.namespace())
		} else {
			// The tracks carried from the other nodes announcing it
			// subscribe to this one too (§7.5).
			fx.more = append(fx.more, s.e.namespace())
		}
		o.count++
	}
}

// removeLocked forgets the entry at key; the node entry takes every
// entry of its node with it (they become orphans, which come back with
// it), and closes the session to it.
func (v *view) removeLocked(key string, now time.Time, fx *effects) {
	delete(v.orphans, key)
	s := v.entries[key]
	if s == nil {
		return
	}
	delete(v.entries, key)
	switch s.kind {
	case kindNamespace:
		k := s.e.namespace().Key()
		if o := v.offers[k]; o != nil {
			if o.count--; o.count <= 0 {
				delete(v.offers, k)
				if o.withdraw != nil {
					fx.withdraw = append(fx.withdraw, o.withdraw)
				}
			}
		}
	case kindNode:
		for k, other := range v.entries {
			if other.e.Node == s.e.Node {
				v.removeLocked(k, now, fx)
				other.since = now
				v.orphans[k] = other
			}
		}
		fx.gone = append(fx.gone, s.e.Node)
	}
}

// apply applies one update of the watch.
func (v *view) apply(up jetstream.KeyValueEntry, ttl time.Duration) effects {
	var fx effects
	v.mu.Lock()
	defer v.mu.Unlock()
	if up.Operation() == jetstream.KeyValuePut {
		v.putLocked(up.Key(), up.Value(), up.Revision(), time.Now(), ttl, &fx)
	} else {
		v.removeLocked(up.Key(), time.Now(), &fx)
	}
	v.changed.fire()
	return fx
}

// sync marks the view current: the watch delivered the bucket's contents.
// Entries it did not deliver get a whole TTL from now to be put again
// (NATS restarted empty, say) before they expire.
func (v *view) sync(ttl time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	for _, s := range v.entries {
		if s.deadline.Before(now.Add(ttl)) {
			s.deadline = now.Add(ttl)
		}
	}
	for _, s := range v.orphans {
		s.since, s.purged = now, false // a purge may have been lost with NATS
	}
	v.synced = true
	v.settled = now.Add(ttl / 3)
	v.changed.fire()
}

// unsync marks the view possibly stale: NATS is out of reach. Nothing
// expires meanwhile, so that flows through the nodes it knows go on.
func (v *view) unsync() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.synced = false
	v.changed.fire()
}

// expire forgets, while synced, the node entries not refreshed in time.
// Orphans a TTL old are a dead node's (a late node would have put its
// node entry again, and all of its entries if that had lapsed): the live
// node of lowest id purges them from the bucket, so that they do not stay
// there for ever, and every view forgets them when the purge arrives. The
// others keep them meanwhile, so that if that node dies too the next
// lowest purges them.
func (v *view) expire(now time.Time, ttl time.Duration) effects {
	var fx effects
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.synced {
		return fx
	}
	for k, s := range v.entries {
		if s.kind == kindNode && s.deadline.Before(now) {
			v.removeLocked(k, now, &fx)
		}
	}
	lowest := true
	for _, s := range v.entries {
		if s.kind == kindNode && s.e.Node < v.self {
			lowest = false
			break
		}
	}
	for k, s := range v.orphans {
		switch age := now.Sub(s.since); {
		case age >= 3*ttl:
			// Not purged by now: not in the bucket any more (NATS
			// restarted empty), or its purgers died in turn.
			delete(v.orphans, k)
		case age >= ttl && lowest && !s.purged:
			s.purged = true
			fx.purge = append(fx.purge, purge{k, s.rev})
		}
	}
	if len(fx.gone) > 0 || len(fx.withdraw) > 0 {
		v.changed.fire()
	}
	return fx
}

// clear forgets everything, for Node.Close.
func (v *view) clear(rl *relay.Relay) {
	v.mu.Lock()
	var fx effects
	for k := range v.entries {
		v.removeLocked(k, time.Now(), &fx)
	}
	clear(v.orphans)
	v.mu.Unlock()
	for _, w := range fx.withdraw {
		w()
	}
}

// target is a node a track can be asked of.
type target struct {
	node, url string
	pin       string
}

// route lists the nodes that have name, oldest first; wait is how long a
// miss is not final yet (forever while NATS is out of reach: -1), and
// changed is closed on the view's next change.
func (v *view) route(name wire.FullTrackName) (targets []target, wait time.Duration, changed <-chan struct{}) {
	v.mu.Lock()
	defer v.mu.Unlock()
	type cand struct {
		t     target
		since time.Time
	}
	var cs []cand
	seenNode := map[string]bool{}
	for _, s := range v.entries {
		match := false
		switch s.kind {
		case kindNamespace:
			match = name.Namespace.HasPrefix(s.e.namespace())
		case kindTrack:
			match = s.e.track().Equal(name)
		}
		if match && !seenNode[s.e.Node] {
			seenNode[s.e.Node] = true
			cs = append(cs, cand{target{s.e.Node, s.e.URL, s.e.Pin}, s.since})
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].since.Before(cs[j].since) })
	out := make([]target, len(cs))
	for i, c := range cs {
		out[i] = c.t
	}
	wait = -1
	if v.synced {
		wait = max(time.Until(v.settled), 0)
	}
	return out, wait, v.changed.wait()
}

// watchLoop keeps the view: it watches the bucket while NATS is up,
// expires what is not refreshed in time, and watches anew after NATS
// comes back.
func (n *Node) watchLoop() {
	defer n.wg.Done()
	for n.ctx.Err() == nil {
		conn := n.conn.wait()
		if !n.nc.IsConnected() {
			select {
			case <-n.ctx.Done():
				return
			case <-conn:
			}
			continue
		}
		if err := n.watchOnce(conn); err != nil && n.ctx.Err() == nil {
			n.log.Warn("cluster: registry", "event", "watch_failed", "err", err)
			if !sleepCtx(n.ctx, 250*time.Millisecond) {
				return
			}
		}
	}
}

// watchOnce follows the bucket until NATS goes away or the watch ends.
func (n *Node) watchOnce(conn <-chan struct{}) error {
	kv, err := n.bucket(n.ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// Stale first: stopping the watch may wait for NATS.
		n.view.unsync()
		cancel()
		_ = w.Stop()
	}()
	ttl := n.bucketTTL()
	sweep := time.NewTicker(ttl / 4)
	defer sweep.Stop()
	rl := n.relay()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-conn:
			if !n.nc.IsConnected() {
				return nil
			}
			conn = n.conn.wait()
		case up, ok := <-w.Updates():
			if !ok {
				return nil
			}
			if up == nil {
				n.view.sync(ttl)
				continue
			}
			n.view.run(rl, n.peers, n.view.apply(up, ttl))
		case now := <-sweep.C:
			fx := n.view.expire(now, ttl)
			n.view.run(rl, n.peers, fx)
			n.purge(kv, fx.purge, ttl)
		}
	}
}

// purge removes a dead node's orphaned entries from the bucket, in the
// background so that the watch goes on; each only if it was not put again
// since (its node came back).
func (n *Node) purge(kv jetstream.KeyValue, ps []purge, ttl time.Duration) {
	if len(ps) == 0 {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := context.WithTimeout(n.ctx, ttl)
		defer cancel()
		for _, p := range ps {
			if err := kv.Purge(ctx, p.key, jetstream.LastRevision(p.rev), jetstream.PurgeTTL(ttl)); ctx.Err() != nil {
				return
			} else if err == nil {
				n.own.mu.Lock()
				n.own.writes++
				n.own.mu.Unlock()
			}
		}
	}()
}
