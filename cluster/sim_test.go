package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/testhook"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The simulation's shape: one publisher at the first node, subscribers
// spread evenly over every node.
const (
	simNodes        = 10
	simSubscribers  = 10_000
	simObjects      = 100
	simGroupObjects = 10
	simPayload      = 1000
	simWorkers      = 64 // subscribers set up at once
)

// simTTL is the registry's TTL: the default, refreshed every 3.3 s, unless
// MOQT_SIM_TTL says otherwise (at 3s, on a busy machine, a live node's
// refresh can come too late and its flows be cut: see the design notes).
func simTTL(t *testing.T) time.Duration {
	s := os.Getenv("MOQT_SIM_TTL")
	if s == "" {
		return defaultTTL
	}
	d, err := time.ParseDuration(s)
	require.NoError(t, err, "MOQT_SIM_TTL")
	return d
}

// objectCounter is a relay's Metrics, counting what it receives from
// upstream: at a node without the publisher, what came from the node with
// it.
type objectCounter struct{ in, inBytes, out atomic.Int64 }

func (c *objectCounter) SessionStarted(bool)       {}
func (c *objectCounter) SessionEnded(bool)         {}
func (c *objectCounter) Request(string, string)    {}
func (c *objectCounter) Dropped(string, int)       {}
func (c *objectCounter) ObjectsOut(objects, _ int) { c.out.Add(int64(objects)) }
func (c *objectCounter) ObjectsIn(objects, bytes int) {
	c.in.Add(int64(objects))
	c.inBytes.Add(int64(bytes))
}

// pipeClient connects a session over the in-memory transport to tn's
// relay; both ends are closed when the test ends.
func pipeClient(t *testing.T, ctx context.Context, tn *testNode, h moqt.Handler) (*moqt.Session, error) {
	c, s, err := testhook.PipeSessions(ctx, transport.PipeConfig{}, "/", &moqt.Config{Handler: tn.relay, Logger: quiet},
		&moqt.Config{Handler: h, Logger: quiet})
	if err != nil {
		return nil, err
	}
	client, server := c.(*moqt.Session), s.(*moqt.Session)
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
	})
	return client, nil
}

// simReader reads one subscription's objects and checks each arrives
// once.
type simReader struct {
	sub  *moqt.Subscription
	seen [simObjects]bool
	n    int
}

func (r *simReader) read(ctx context.Context, first func()) error {
	for r.n < simObjects {
		o, err := r.sub.ReadObject(ctx)
		if err != nil {
			return fmt.Errorf("after %d objects: %w", r.n, err)
		}
		if len(o.Payload) != simPayload {
			return fmt.Errorf("object %v: %d bytes (incomplete %v, end of range %v, status %v)", o.Location, len(o.Payload), o.Incomplete, o.EndOfRange, o.Status)
		}
		i := binary.BigEndian.Uint64(o.Payload)
		if i >= simObjects || r.seen[i] {
			return fmt.Errorf("object %d (at %v) again or unknown", i, o.Location)
		}
		r.seen[i] = true
		if r.n++; r.n == 1 {
			first()
		}
	}
	return nil
}

// TestSimulationTenNodes: ten relays in one process form a cluster through
// one embedded NATS server; one publisher at the first, 10,000
// subscribers spread over all ten, each on a session of its own over the
// in-memory transport. The nodes reach each other over real QUIC on
// 127.0.0.1 (the cluster dials its peers' URLs), through UDP proxies that
// count the inter-node bytes. It prints the inter-node bytes against one
// copy of the track per node, the setup time and the registry's traffic,
// and checks that every subscriber gets every object once and the nodes
// one copy each. It measures, so it runs only with MOQT_BENCH=1, without
// -race:
//
//	cd cluster && MOQT_BENCH=1 go test -run TestSimulationTenNodes -v .
func TestSimulationTenNodes(t *testing.T) {
	if os.Getenv("MOQT_BENCH") == "" {
		t.Skip("a simulation that measures: set MOQT_BENCH=1 to run it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ttl := simTTL(t)
	ns := startNATS(t)
	varz := func() (msgs, bytes int64) {
		v, err := ns.s.Varz(nil)
		require.NoError(t, err)
		return v.InMsgs + v.OutMsgs, v.InBytes + v.OutBytes
	}
	nodes := make([]*testNode, simNodes)
	counters := make([]*objectCounter, simNodes)
	for i := range nodes {
		counters[i] = &objectCounter{}
		nodes[i] = startTestNodeWith(t, fmt.Sprint("N", i), ns.url(), ttl, counters[i])
	}
	origin := nodes[0]
	pub := newPublisher(t, video)
	ps, err := pipeClient(t, ctx, origin, pub)
	require.NoError(t, err)
	_, err = ps.PublishNamespace(ctx, video.Namespace, wire.Params{})
	require.NoError(t, err)
	for _, tn := range nodes[1:] {
		tn.waitRoute(video, origin, 10*time.Second)
	}
	interNode := func() int64 {
		var n int64
		for _, tn := range nodes {
			n += tn.proxy.bytes.Load()
		}
		return n
	}
	var memBefore runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&memBefore)

	// Setup: every subscriber connects and subscribes, many at once.
	registryWrites := func() (n uint64) {
		for _, tn := range nodes {
			n += tn.node.Writes()
		}
		return n
	}
	setupWrites0, setupMsgs0 := registryWrites(), func() int64 { m, _ := varz(); return m }()
	start := time.Now()
	readers := make([]*simReader, simSubscribers)
	jobs := make(chan int)
	errs := make(chan error, simWorkers)
	var workers sync.WaitGroup
	for range simWorkers {
		workers.Go(func() {
			for i := range jobs {
				s, err := pipeClient(t, ctx, nodes[i%simNodes], nil)
				if err == nil {
					var sub *moqt.Subscription
					if sub, err = s.Subscribe(ctx, video, wire.Params{}); err == nil {
						readers[i] = &simReader{sub: sub}
						continue
					}
				}
				errs <- fmt.Errorf("subscriber %d at N%d: %w", i, i%simNodes, err)
				return
			}
		})
	}
feed:
	for i := range simSubscribers {
		select {
		case jobs <- i:
		case err := <-errs:
			require.NoError(t, err)
			break feed
		}
	}
	close(jobs)
	workers.Wait()
	close(errs)
	require.NoError(t, <-errs)
	subscribed := time.Since(start)
	setupBytes := interNode()

	var first, done sync.WaitGroup
	first.Add(simSubscribers)
	readErrs := make(chan error, simSubscribers)
	for i, r := range readers {
		done.Go(func() {
			var once sync.Once
			if err := r.read(ctx, func() { once.Do(first.Done) }); err != nil {
				once.Do(first.Done)
				readErrs <- fmt.Errorf("subscriber %d at N%d: %w", i, i%simNodes, err)
			}
		})
	}
	payload := func(i int) []byte {
		b := make([]byte, simPayload)
		binary.BigEndian.PutUint64(b, uint64(i))
		return b
	}
	write := func(w *moqt.SubgroupWriter, i int) {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: uint64(i / simGroupObjects), Object: uint64(i % simGroupObjects)}, Payload: payload(i)}))
	}

	// The first object: setup ends when every subscriber has it.
	published := time.Now()
	w := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
	write(w, 0)
	firstDone := make(chan struct{})
	go func() { first.Wait(); close(firstDone) }()
	select {
	case <-firstDone:
	case <-ctx.Done():
		require.FailNow(t, "the first object did not reach every subscriber")
	}
	firstAtAll := time.Since(published)
	setup := time.Since(start)
	setupWrites, setupMsgs := registryWrites()-setupWrites0, func() int64 { m, _ := varz(); return m }()-setupMsgs0

	// The rest, as fast as the publisher writes them.
	for i := 1; i < simObjects; i++ {
		if i%simGroupObjects == 0 {
			require.NoError(t, w.Close())
			w = pub.track.OpenSubgroup(uint64(i/simGroupObjects), 0, moqt.SubgroupOptions{})
		}
		write(w, i)
	}
	require.NoError(t, w.Close())
	done.Wait()
	delivered := time.Since(published)
	close(readErrs)
	var all []error
	for err := range readErrs {
		all = append(all, err)
	}
	if len(all) > 0 {
		t.Logf("%d readers failed", len(all))
		require.NoError(t, errors.Join(all[:min(len(all), 5)]...))
	}
	dataBytes := interNode() - setupBytes
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)

	// The registry at rest: refreshes only.
	writes0 := registryWrites()
	msgs0, bytes0 := varz()
	window := 2 * ttl // six refresh periods
	time.Sleep(window)
	msgs1, bytes1 := varz()
	writes := registryWrites() - writes0

	oneCopy := int64(simObjects * simPayload * (simNodes - 1))
	perSubscriber := int64(simObjects*simPayload) * int64(simSubscribers-simSubscribers/simNodes)
	t.Logf("%d nodes, %d subscribers (%d a node, each on its own in-memory session), 1 publisher at N0: %d objects of %d bytes in groups of %d",
		simNodes, simSubscribers, simSubscribers/simNodes, simObjects, simPayload, simGroupObjects)
	t.Logf("setup: all subscribed in %v; the first object at all %d subscribers %v after it was written; setup in all %v",
		subscribed.Round(time.Millisecond), simSubscribers, firstAtAll.Round(time.Millisecond), setup.Round(time.Millisecond))
	t.Logf("registry during setup: %d writes, %d NATS messages (subscribers make no registry traffic: only publishers and nodes do)", setupWrites, setupMsgs)
	t.Logf("delivery: %d objects to every subscriber (%d deliveries) in %v from the first write",
		simObjects, simObjects*simSubscribers, delivered.Round(time.Millisecond))
	t.Logf("inter-node bytes (UDP payload, both ways): setup %d; data %d = %.3f × objects×payload×(nodes−1) = %d; one copy per subscriber would be %d (%.0f× more)",
		setupBytes, dataBytes, float64(dataBytes)/float64(oneCopy), oneCopy, perSubscriber, float64(perSubscriber)/float64(dataBytes))
	for i, c := range counters {
		assert.Equal(t, int64(simObjects), c.in.Load(), "N%d receives one copy of each object", i)
		assert.Equal(t, int64(simObjects*simPayload), c.inBytes.Load(), "N%d", i)
	}
	t.Logf("objects received from upstream per node: %d (one copy each, N0 from the publisher, the others from N0)", counters[1].in.Load())
	t.Logf("registry at rest over %v: %d writes from %d nodes = %.2f writes per node per second (TTL %v, node entries refreshed every TTL/3); NATS server: %.0f messages/s, %.0f bytes/s in and out (%.0f bytes/s per node)",
		window, writes, simNodes, float64(writes)/float64(simNodes)/window.Seconds(), ttl,
		float64(msgs1-msgs0)/window.Seconds(), float64(bytes1-bytes0)/window.Seconds(), float64(bytes1-bytes0)/window.Seconds()/simNodes)
	t.Logf("heap in use after delivery: %d MiB (%d MiB before the subscribers); goroutines %d",
		(mem.HeapInuse)>>20, memBefore.HeapInuse>>20, runtime.NumGoroutine())
	assert.Less(t, dataBytes, 2*oneCopy, "one copy per node, not per subscriber")
	for _, r := range readers {
		_ = r.sub.Close()
	}
}
