package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/moqt-go/moqt/wire"
)

// ownEntries are the registry entries of this node: its node entry and
// what is published at it. Changes mark keys dirty; the write loop puts
// or deletes them, and puts all of them again every TTL/3.
type ownEntries struct {
	node string
	base entry

	mu     sync.Mutex
	vals   map[string][]byte // by key
	dirty  map[string]bool
	wake   chan struct{} // cap 1
	writes uint64        // puts and deletes made, for figures
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

// Writes is the number of registry writes (puts and deletes) this node
// made: the registry traffic it causes.
func (n *Node) Writes() uint64 {
	n.own.mu.Lock()
	defer n.own.mu.Unlock()
	return n.own.writes
}

// writeLoop keeps the node's entries in the registry: each change at
// once, and every entry again every TTL/3, and all of them after NATS
// comes back (a restarted server may have lost them).
func (n *Node) writeLoop() {
	defer n.wg.Done()
	refresh := time.NewTimer(0)
	defer refresh.Stop()
	all := true
	var kv jetstream.KeyValue
	for {
		conn := n.conn.wait()
		if n.nc.IsConnected() {
			var err error
			if kv == nil {
				kv, err = n.bucket(n.ctx)
			}
			if err == nil {
				err = n.writeOwn(kv, all)
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
			all = false
		}
		select {
		case <-n.ctx.Done():
			return
		case <-n.own.wake:
		case <-conn:
			all, kv = true, nil
		case <-refresh.C:
			all = true
			refresh.Reset(n.bucketTTL() / 3)
		}
	}
}

// writeOwn puts the dirty entries, or all, and deletes the withdrawn.
func (n *Node) writeOwn(kv jetstream.KeyValue, all bool) error {
	batch := n.own.take(all)
	ctx, cancel := context.WithTimeout(n.ctx, n.bucketTTL())
	defer cancel()
	// The node entry first: its peers learn how to reach it before what
	// it has.
	nodeKey := keyOf(kindNode, n.id, wire.FullTrackName{})
	order := make([]string, 0, len(batch))
	if _, ok := batch[nodeKey]; ok {
		order = append(order, nodeKey)
	}
	for k := range batch {
		if k != nodeKey {
			order = append(order, k)
		}
	}
	for i, k := range order {
		var err error
		if v := batch[k]; v != nil {
			_, err = kv.Put(ctx, k, v)
		} else {
			err = kv.Delete(ctx, k)
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
