package cluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// The registry simulation's shape: a hundred nodes, each with a few
// publishers' namespaces.
const (
	regNodes        = 100
	regNamespaces   = 10 // a node
	regSettleBound  = time.Minute
	regExpiryMargin = 2 // TTLs on top of the TTL itself, for a busy machine
)

// regNode is a Node with a relay that serves nobody: the registry and the
// view alone, whose offers reach the relay's namespace table.
type regNode struct {
	node  *Node
	relay *relay.Relay
}

// viewCount is how many entries of kind n's view holds, and the channel its next change closes.
func (n *Node) viewCount(kind string) (int, <-chan struct{}) {
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	c := 0
	for _, s := range n.view.entries {
		if s.kind == kind {
			c++
		}
	}
	return c, n.view.changed.wait()
}

// waitViews waits until every node's view holds want entries of kind, and
// returns how long that took.
func waitViews(t *testing.T, nodes []*regNode, kind string, want func(i int) int) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.After(regSettleBound)
	for i, rn := range nodes {
		for {
			c, changed := rn.node.viewCount(kind)
			if c == want(i) {
				break
			}
			select {
			case <-changed:
			case <-timeout:
				t.Fatalf("node %d sees %d entries of kind %q, want %d", i, c, kind, want(i))
			}
		}
	}
	return time.Since(start)
}

// TestSimulationRegistryHundredNodes: the registry at a hundred nodes,
// through one embedded NATS server, with ten namespaces published at each:
// how long a joining cluster, a wave of announcements and one announcement
// take to reach every view, the registry's traffic at rest, and how long
// the others take to drop a node that dies. No MoQT session is made: the
// nodes' relays serve nobody, and their URLs are never dialed. It measures,
// so it runs only with MOQT_BENCH=1:
//
//	cd cluster && MOQT_BENCH=1 go test -run TestSimulationRegistryHundredNodes -v .
func TestSimulationRegistryHundredNodes(t *testing.T) {
	if os.Getenv("MOQT_BENCH") == "" {
		t.Skip("a simulation that measures: set MOQT_BENCH=1 to run it")
	}
	ttl := simTTL(t)
	ns := startNATS(t)
	varz := func() (msgs, bytes int64) {
		v, err := ns.s.Varz(nil)
		require.NoError(t, err)
		return v.InMsgs + v.OutMsgs, v.InBytes + v.OutBytes
	}
	writes := func(nodes []*regNode) (w uint64) {
		for _, rn := range nodes {
			w += rn.node.Writes()
		}
		return w
	}

	// Join: every node registers itself and learns the others.
	start := time.Now()
	nodes := make([]*regNode, regNodes)
	for i := range nodes {
		n, err := New(Config{NATS: ns.url(), TTL: ttl, URL: fmt.Sprintf("moqt://node%d.test:443/", i), Token: token,
			MoQT: &moqt.Config{Logger: quiet}, Logger: quiet})
		require.NoError(t, err)
		rl := relay.New(n.RelayConfig(relay.Config{Authorize: relay.AllowAll, Logger: quiet}))
		n.Start(rl)
		rn := &regNode{node: n, relay: rl}
		nodes[i] = rn
		t.Cleanup(func() {
			_ = rn.node.Close()
			_ = rn.relay.Close()
		})
	}
	waitViews(t, nodes, kindNode, func(int) int { return regNodes - 1 })
	join := time.Since(start) // from the first node's start

	// A wave: ten namespaces at every node at once.
	w0 := writes(nodes)
	m0, _ := varz()
	for i, rn := range nodes {
		for j := range regNamespaces {
			rn.node.Namespace(wire.NewNamespace("sim", fmt.Sprint(i), fmt.Sprint(j)), []*moqt.Session{nil})
		}
	}
	wave := waitViews(t, nodes, kindNamespace, func(int) int { return (regNodes - 1) * regNamespaces })
	waveWrites := writes(nodes) - w0
	m1, _ := varz()

	// One more, at the first node: its reach.
	nodes[0].node.Namespace(wire.NewNamespace("sim", "one"), []*moqt.Session{nil})
	one := waitViews(t, nodes[1:], kindNamespace, func(int) int { return (regNodes-1)*regNamespaces + 1 })

	// At rest: refreshes only.
	rw0 := writes(nodes)
	rm0, rb0 := varz()
	window := 2 * ttl
	time.Sleep(window)
	rm1, rb1 := varz()
	restWrites := writes(nodes) - rw0

	// The last node dies: nothing said, its entries left to expire.
	dead := nodes[regNodes-1]
	start = time.Now()
	dead.node.cancel()
	dead.node.wg.Wait()
	dead.node.nc.Close()
	live := nodes[:regNodes-1]
	expiry := waitViews(t, live, kindNode, func(int) int { return regNodes - 2 })
	require.Less(t, expiry, (1+regExpiryMargin)*ttl, "a dead node drops out within the TTL")
	waitViews(t, live, kindNamespace, func(i int) int { // node 0 does not see its own "one"
		return (regNodes-2)*regNamespaces + min(i, 1)
	})
	// Its namespaces, which carry no TTL, are purged from the bucket by a survivor.
	kv, err := nodes[0].node.js.KeyValue(context.Background(), nodes[0].node.cfg.Bucket)
	require.NoError(t, err)
	waitNoKeysOf(t, kv, dead.node.ID(), regSettleBound)
	purged := time.Since(start)

	entries := regNodes * (1 + regNamespaces)
	t.Logf("%d nodes, %d namespaces each: %d registry entries, TTL %v (node entries refreshed every %v)", regNodes, regNamespaces, entries, ttl, ttl/3)
	t.Logf("join: every node sees the other %d in %v", regNodes-1, join.Round(time.Millisecond))
	t.Logf("wave: %d namespaces registered at once reach every view in %v: %d writes, %d NATS messages (%.1f per write: the watch fan-out)",
		regNodes*regNamespaces, wave.Round(time.Millisecond), waveWrites, m1-m0, float64(m1-m0)/float64(waveWrites))
	t.Logf("one namespace reaches the other %d views in %v", regNodes-1, one.Round(time.Millisecond))
	t.Logf("at rest over %v: %.2f writes per node per second; NATS server %.0f messages/s, %.0f bytes/s in and out (%.0f bytes/s per node)",
		window, float64(restWrites)/float64(regNodes)/window.Seconds(), float64(rm1-rm0)/window.Seconds(),
		float64(rb1-rb0)/window.Seconds(), float64(rb1-rb0)/window.Seconds()/regNodes)
	t.Logf("a dead node dropped by every other view %v after it stopped, its entries purged from the bucket after %v",
		expiry.Round(time.Millisecond), purged.Round(time.Millisecond))
}
