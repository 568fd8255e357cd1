package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestBacklogsSharePayloads: subscribers that fell behind on the same
// track hold one copy of each object's payload between them. Each
// session counts every byte it is behind, within its own bounds; the
// shared budget counts the payloads once, so it holds little more than
// one session's backlog; and each subscriber, reading again, gets every
// object whole.
func TestBacklogsSharePayloads(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) { testBacklogsSharePayloads(t, overPipe(tr.wt)) })
		})
	}
}

func testBacklogsSharePayloads(t *testing.T, connect connector) {
	const (
		size    = 1200
		objects = 200 // 240 KB: past the subscribers' 64 KiB windows
		subs    = 3
	)
	shared := NewBacklogBudget(64 << 20)
	bt := newBudgetTracks(t, 1)
	serverCfg := &Config{Handler: bt, SharedBacklog: shared, SubscriberGrace: time.Hour}
	ctx := testCtx(t, time.Minute)
	var pairs []*pair
	var subscriptions []*Subscription
	for i := range subs {
		var p *pair
		if i == 0 {
			p = connect(t, serverCfg, stalledClient())
		} else {
			p = pairs[0].another(t, stalledClient())
		}
		sub, err := p.client.Subscribe(ctx, bt[0].Name(), wire.Params{})
		require.NoError(t, err)
		pairs, subscriptions = append(pairs, p), append(subscriptions, sub)
	}
	w := bt[0].OpenSubgroup(0, 0, SubgroupOptions{})
	w.SetWriteDeadline(time.Now()) // queue at once: no wait for the readers, not yet reading
	for id := range uint64(objects) {
		require.NoError(t, writeObject(w, id, nil, payloadOf(id, size)))
	}
	most := 0
	for i, p := range pairs {
		used := int(p.server.backlog.Used())
		assert.Greater(t, used, objects*size-(80<<10), "session %d counts all it is behind", i)
		most = max(most, used)
	}
	assert.Less(t, shared.Queued(), most+most/5, "the shared budget counts the payloads once")

	reads := make([]<-chan error, subs)
	for i, sub := range subscriptions {
		reads[i] = readGroups(ctx, sub, 1, checkObjects(objects, size))
	}
	require.NoError(t, w.Close())
	for i, r := range reads {
		require.NoError(t, <-r, "subscriber %d", i)
	}
	assert.Zero(t, shared.Queued())
}
