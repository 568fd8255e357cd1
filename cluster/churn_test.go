package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestChurnAcrossNodesLeavesNothingBehind: publishers come and go at
// every node while subscribers at the others subscribe and leave; once
// all are gone the registry and the views hold only the nodes, and
// TestMain's goleak check finds no goroutine left after the nodes close.
func TestChurnAcrossNodesLeavesNothingBehind(t *testing.T) {
	_, a, b, c := threeNodes(t)
	nodes := []*testNode{a, b, c}
	const rounds = 6
	var wg sync.WaitGroup
	for i := 0; i < rounds; i++ {
		at, from := nodes[i%3], nodes[(i+1)%3]
		name := wire.FullTrackName{Namespace: wire.NewNamespace("churn", fmt.Sprint(i)), Name: []byte("t")}
		pub := newPublisher(t, name)
		ps, ann := pub.announce(t, at)
		from.waitRoute(name, at, 10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := from.client(nil)
			sub, err := subscribe(t, cs, name)
			if !assert.NoError(t, err) {
				return
			}
			writeGroup(t, pub.track, 0, 2)
			assert.ElementsMatch(t, payloads(0, 1, 2), readObjects(t, sub, 2))
			_ = sub.Close()
			_ = cs.Close()
			_ = ann.Close()
			_ = ps.Close()
		}()
	}
	wg.Wait()
	for _, tn := range nodes {
		for i := 0; i < rounds; i++ {
			tn.waitOffered(wire.NewNamespace("churn", fmt.Sprint(i)), false, 10*time.Second)
		}
	}
	for _, tn := range nodes {
		tn.node.own.mu.Lock()
		assert.Len(t, tn.node.own.vals, 1, "%s registers only itself", tn.name)
		tn.node.own.mu.Unlock()
		tn.node.view.mu.Lock()
		assert.Len(t, tn.node.view.entries, 2, "%s sees only the other nodes", tn.name)
		tn.node.view.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The relays hold no track: a SUBSCRIBE_NAMESPACE sees nothing.
	for _, tn := range nodes {
		s := tn.client(nil)
		w, err := s.SubscribeNamespace(ctx, wire.NewNamespace("churn"), wire.Params{})
		require.NoError(t, err)
		short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = w.Next(short)
		stop()
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		_ = w.Close()
	}
}
