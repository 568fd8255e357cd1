package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// waitNoKeysOf waits until the bucket holds no entry of node (the watch's
// current contents, then its changes), within bound.
func waitNoKeysOf(t *testing.T, kv jetstream.KeyValue, node string, bound time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	w, err := kv.WatchAll(ctx)
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	live := map[string]bool{}
	synced := false
	for {
		if synced && len(live) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the bucket still holds %v", live)
		case up := <-w.Updates():
			if up == nil {
				synced = true
				continue
			}
			if _, n, ok := parseKey(up.Key()); !ok || n != node {
				continue
			}
			if up.Operation() == jetstream.KeyValuePut {
				live[up.Key()] = true
			} else {
				delete(live, up.Key())
			}
		}
	}
}

func registry(t *testing.T, tn *testNode) jetstream.KeyValue {
	t.Helper()
	kv, err := tn.node.js.KeyValue(context.Background(), tn.node.cfg.Bucket)
	require.NoError(t, err)
	return kv
}

// TestDeadNodeEntriesPurgedFromBucket: only the node entry has a TTL, so a
// dead node's other entries would stay in the bucket for ever; the
// survivors purge them once its node entry is gone.
func TestDeadNodeEntriesPurgedFromBucket(t *testing.T) {
	_, a, b, _ := threeNodes(t)
	pub := newPublisher(t, video)
	pub.announce(t, a)
	b.waitRoute(video, a, 10*time.Second)
	kv := registry(t, b)
	id := a.node.ID()
	a.kill()
	// The node entry expires within the TTL, its orphans a TTL later, and
	// the purge follows at the next sweep.
	waitNoKeysOf(t, kv, id, 3*testTTL+time.Second)
}

// TestLapsedNodeEntryPutsAllAgain: a node whose node entry expired (a late
// refresh) while the others purged its other entries finds out at its next
// refresh and puts all of them again.
func TestLapsedNodeEntryPutsAllAgain(t *testing.T) {
	_, a, b, _ := threeNodes(t)
	pub := newPublisher(t, video)
	pub.announce(t, a)
	b.waitRoute(video, a, 10*time.Second)
	kv := registry(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys, err := kv.Keys(ctx)
	require.NoError(t, err)
	nsKey := keyOf(kindNamespace, a.node.ID(), wire.FullTrackName{Namespace: video.Namespace})
	require.Contains(t, keys, nsKey)
	w, err := kv.Watch(ctx, nsKey, jetstream.UpdatesOnly())
	require.NoError(t, err)
	defer func() { _ = w.Stop() }()
	for _, k := range keys {
		if _, n, _ := parseKey(k); n == a.node.ID() {
			require.NoError(t, kv.Purge(ctx, k))
		}
	}
	// A's next refresh finds its node entry gone and puts everything again.
	for up := range w.Updates() {
		if up != nil && up.Operation() == jetstream.KeyValuePut {
			break
		}
	}
	require.NoError(t, ctx.Err(), "A's namespace is put again")
	b.waitRoute(video, a, 2*testTTL)
}
