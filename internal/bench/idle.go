package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"runtime"
	"time"

	"github.com/moqt-go/moqt"
)

// Memory per idle subscription: many sessions subscribe to one track and
// nothing is published. Everything runs in this process, so the figures
// hold both ends of each subscription: the server's and the subscriber's.
// Serving the track straight from a LocalTrack (direct) beside the relay
// tells the relay's own share apart.

// IdleKind is one kind of server to hold idle subscriptions.
type IdleKind struct {
	Name string
	// New starts the server; subscriptions to benchTrack at its Server
	// are served, ctls trusts its certificate.
	New func(ctx context.Context) (*idleTarget, error)
}

// idleTarget is a server that serves benchTrack.
type idleTarget struct {
	srv   *moqt.Server
	ctls  *tls.Config
	close func() error
}

// IdleRow is what MeasureIdle found.
type IdleRow struct {
	Kind          string
	Subscriptions int
	// HeapInuse and HeapAlloc are the growth of the runtime's heap in use
	// and of its live objects, after a collection, per subscription;
	// Stack the growth of goroutine stacks, Goroutines of their number.
	HeapInuse, HeapAlloc, Stack, Goroutines float64
}

// IdleKinds are the servers compared.
var IdleKinds = []IdleKind{
	{Name: "direct", New: directTarget},
	{Name: "relay", New: relayTarget},
}

// directTarget serves benchTrack from a LocalTrack.
func directTarget(context.Context) (*idleTarget, error) {
	srv, _, ctls, err := trackServer(fanoutConfig(), nil)
	if err != nil {
		return nil, err
	}
	return &idleTarget{srv: srv, ctls: ctls, close: srv.Close}, nil
}

// MeasureIdle connects n+1 sessions to a server of kind k, subscribes
// from the first (so that a relay has its upstream subscription), then
// measures what n more subscriptions from the others hold once idle. The
// sessions exist before the first measurement: what is counted is the
// subscriptions, not the connections.
func MeasureIdle(ctx context.Context, k IdleKind, n int) (IdleRow, error) {
	if err := checkFiles(n + 68); err != nil {
		return IdleRow{}, err
	}
	t, err := k.New(ctx)
	if err != nil {
		return IdleRow{}, fmt.Errorf("%s: %w", k.Name, err)
	}
	var ss sessions
	defer func() {
		ss.close()
		_ = t.close()
	}()
	if err := ss.dial(ctx, t.srv, t.ctls, n+1); err != nil {
		return IdleRow{}, fmt.Errorf("%s: %w", k.Name, err)
	}
	first := sessions{clients: ss.clients[:1]}
	if _, err := first.subscribe(ctx, 1); err != nil {
		return IdleRow{}, fmt.Errorf("%s: first subscription: %w", k.Name, err)
	}
	before, g0 := settle()
	rest := sessions{clients: ss.clients[1:]}
	subs, err := rest.subscribe(ctx, 16)
	if err != nil {
		return IdleRow{}, fmt.Errorf("%s: subscriptions: %w", k.Name, err)
	}
	after, g1 := settle()
	runtime.KeepAlive(subs)
	return IdleRow{Kind: k.Name, Subscriptions: n,
		HeapInuse:  (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(n),
		HeapAlloc:  (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n),
		Stack:      (float64(after.StackInuse) - float64(before.StackInuse)) / float64(n),
		Goroutines: float64(g1-g0) / float64(n)}, nil
}

// settle waits for the goroutine count to stay put for a while (at most a
// few seconds), collects the garbage and returns the heap's figures and
// the goroutine count.
func settle() (runtime.MemStats, int) {
	g := runtime.NumGoroutine()
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now == g {
			break
		}
		g = now
	}
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m, runtime.NumGoroutine()
}
