package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/moqt-go/moqt/wire"
)

// ownEntries are the registry entries of this node: its node entry and
// what is published at it. Changes mark keys dirty; the write loop puts
// or purges them, and puts the node entry again every TTL/3.
type ownEntries struct {
	node string
	base entry

	mu      sync.Mutex
	vals    map[string][]byte // by key
	dirty   map[string]bool
	wake    chan struct{} // cap 1
	writes  uint64        // puts and purges made, for figures
	nodeRev uint64        // the node entry's last revision, for refreshes
}

func newOwnEntries(node, url string, pin [32]byte) *ownEntries {
	o := &ownEntries{node: node, base: entry{Node: node, URL: url},
		vals: map[string][]byte{}, dirty: map[string]bool{}, wake: make(chan struct{}, 1)}
	if pin != ([32]byte{}) {
		o.base.Pin = hex.EncodeToString(pin[:])
	}
	b, _ := json.Marshal(o.base)
	key := keyOf(kindNode, node, wire.FullTrackName{})
	o.vals[key] = b
	o.dirty[key] = true
	return o
}

// set registers (on) or withdraws an entry of kind about name.
func (o *ownEntries) set(kind string, name wire.FullTrackName, on bool) {
	key := keyOf(kind, o.node, name)
	o.mu.Lock()
	defer o.mu.Unlock()
	_, had := o.vals[key]
	if on == had {
		return
	}
	if on {
		e := o.base
		e.Namespace = name.Namespace
		if kind == kindTrack {
			e.Name = name.Name
		}
		b, _ := json.Marshal(e)
		o.vals[key] = b
	} else {
		delete(o.vals, key)
	}
	o.dirty[key] = true
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns the dirty keys, with their values (nil: delete), all keys
// when all is set, and clears them.
func (o *ownEntries) take(all bool) map[string][]byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string][]byte{}
	if all {
		for k, v := range o.vals {
			out[k] = v
		}
	}
	for k := range o.dirty {
		out[k] = o.vals[k]
	}
	clear(o.dirty)
	return out
}

// remark marks keys dirty again after a failed write.
func (o *ownEntries) remark(keys []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		o.dirty[k] = true
	}
}

// keys lists the keys registered.
func (o *ownEntries) keys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.vals))
	for k := range o.vals {
		out = append(out, k)
	}
	return out
}

// Writes is the number of registry writes (puts and purges) this node
// made: the registry traffic it causes.
func (n *Node) Writes() uint64 {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	return n.own.writes
}

// errLapsed is a refresh that found the node entry gone: it expired (the
// node was late), and the others may have purged the node's other
// entries since.
var errLapsed = errors.New("cluster: the node entry expired before its refresh")

// writeLoop keeps the node's entries in the registry: each change at
// once, the node entry again every TTL/3 (it alone carries a TTL: the
// others live while it does), and all of them after NATS comes back (a
// restarted server may have lost them) or after the node entry lapsed.
func (n *Node) writeLoop() {
	defer n.wg.Done()
	refresh := time.NewTimer(0)
	defer refresh.Stop()
	all, beat := true, false
	var kv jetstream.KeyValue
	for {
		conn := n.conn.wait()
		if n.nc.IsConnected() {
			var err error
			if kv == nil {
				kv, err = n.bucket(n.ctx)
			}
			if err == nil {
				err = n.writeOwn(kv, all || (beat && n.refreshesAll()), beat)
			}
			if errors.Is(err, errLapsed) {
				n.log.Warn("cluster: registry", "event", "node_entry_lapsed")
				all, beat = true, false
				continue
			}
			if err != nil {
				kv = nil
				n.log.Warn("cluster: registry", "event", "write_failed", "err", err)
				all = true
				if !sleepCtx(n.ctx, 250*time.Millisecond) {
					return
				}
				continue
			}
			all, beat = false, false
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.own.wake:
		case <-conn:
			all, kv = true, nil
		case <-refresh.C:
			beat = true
			refresh.Reset(n.bucketTTL() / 3)
		}
	}
}

// writeOwn puts the dirty entries, or all, and purges the withdrawn; beat
// refreshes the node entry, which must still be there.
func (n *Node) writeOwn(kv jetstream.KeyValue, all, beat bool) error {
	batch := n.own.take(all)
	ttl := n.bucketTTL()
	ctx, cancel := context.WithTimeout(n.ctx, ttl)
	defer cancel()
	// The node entry first: its peers learn how to reach it before what
	// it has.
	nodeKey := keyOf(kindNode, n.id, wire.FullTrackName{})
	order := make([]string, 0, len(batch))
	if _, ok := batch[nodeKey]; ok {
		order = append(order, nodeKey)
	} else if beat {
		if err := n.putNode(ctx, kv, ttl, true); err != nil {
			n.own.remark(mapKeys(batch))
			return err
		}
		n.own.mu.Lock()
		n.own.writes++
		n.own.mu.Unlock()
	}
	for k := range batch {
		if k != nodeKey {
			order = append(order, k)
		}
	}
	for i, k := range order {
		var err error
		switch v := batch[k]; {
		case k == nodeKey:
			err = n.putNode(ctx, kv, ttl, false)
		case v != nil:
			_, err = kv.Put(ctx, k, v)
		default:
			// A purge, not a delete: its marker goes after a TTL, so
			// withdrawn entries leave nothing behind in the bucket.
			err = kv.Purge(ctx, k, jetstream.PurgeTTL(ttl))
		}
		if err != nil {
			n.own.remark(order[i:])
			return err
		}
		n.own.mu.Lock()
		n.own.writes++
		n.own.mu.Unlock()
	}
	return nil
}

// putNode puts the node entry with a TTL of its own; refresh expects it
// to be the last put (errLapsed if it expired since).
func (n *Node) putNode(ctx context.Context, kv jetstream.KeyValue, ttl time.Duration, refresh bool) error {
	key := keyOf(kindNode, n.id, wire.FullTrackName{})
	n.own.mu.Lock()
	v, rev := n.own.vals[key], n.own.nodeRev
	n.own.mu.Unlock()
	opts := []jetstream.PublishOpt{jetstream.WithMsgTTL(ttl)}
	if refresh && rev != 0 {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(rev))
	}
	ack, err := n.js.Publish(ctx, "$KV."+kv.Bucket()+"."+key, v, opts...)
	if err != nil {
		var api *jetstream.APIError
		if errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return errLapsed
		}
		return err
	}
	n.own.mu.Lock()
	n.own.nodeRev = ack.Sequence
	n.own.mu.Unlock()
	return nil
}

func mapKeys(m map[string][]byte) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
