package moqt

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// budgetTracks are tracks served to every SUBSCRIBE for them.
type budgetTracks []*LocalTrack

func newBudgetTracks(t *testing.T, n int) budgetTracks {
	t.Helper()
	var bt budgetTracks
	for i := range n {
		tr, err := NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace("budget"), Name: fmt.Appendf(nil, "t%d", i)}, nil)
		require.NoError(t, err)
		bt = append(bt, tr)
	}
	return bt
}

func (bt budgetTracks) ServeMOQT(r Request) {
	if sr, ok := r.(*SubscribeRequest); ok {
		for _, tr := range bt {
			if sr.Track.Equal(tr.Name()) {
				_, _ = tr.Accept(sr, AcceptOptions{})
				return
			}
		}
	}
	DefaultHandler.ServeMOQT(r)
}

// subscribeAll subscribes s to every track, in order.
func (bt budgetTracks) subscribeAll(t *testing.T, ctx context.Context, s *Session) []*Subscription {
	t.Helper()
	subs := make([]*Subscription, len(bt))
	for i, tr := range bt {
		var err error
		subs[i], err = s.Subscribe(ctx, tr.Name(), wire.Params{})
		require.NoError(t, err)
	}
	return subs
}

// stalledClient is the Config of a subscriber that reads nothing: small
// windows, and no watchdog of its own to cancel what it leaves unread.
func stalledClient() *Config {
	return &Config{StreamReceiveWindow: 4 << 10, ConnectionReceiveWindow: 64 << 10, ReadStallTimeout: -1}
}

// doneCodeNow is the PUBLISH_DONE code sub ended with, or false if it has
// not ended.
func doneCodeNow(t *testing.T, sub *Subscription) (wire.PublishDoneCode, bool) {
	t.Helper()
	select {
	case <-sub.Done():
	default:
		return 0, false
	}
	var de *DoneError
	require.ErrorAs(t, sub.Err(), &de)
	return de.Code, true
}

// checkObjects checks a subgroup of n objects of size bytes, payloadOf.
func checkObjects(n, size int) func(uint64, []uint64, [][]byte) error {
	return func(g uint64, ids []uint64, payloads [][]byte) error {
		if len(ids) != n {
			return fmt.Errorf("group %d: %d objects, want %d", g, len(ids), n)
		}
		for i, id := range ids {
			if id != uint64(i) || !bytes.Equal(payloads[i], payloadOf(id, size)) {
				return fmt.Errorf("group %d: object %d is %d or not whole", g, i, id)
			}
		}
		return nil
	}
}

// TestSessionBacklogBudget: a peer subscribes to many tracks and reads
// nothing, while another session reads them all. Each subscription's
// backlog stays under MaxSubscriberBacklog, but together they would pass
// MaxSessionBacklog: what is queued for the stalled session never passes
// it, the subscriptions whose writes would pass it end with PUBLISH_DONE
// EXCESSIVE_LOAD (their streams reset with EXCESSIVE_LOAD), the others go
// on, and the reading session gets every object.
func TestSessionBacklogBudget(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) { testSessionBacklogBudget(t, overPipe(tr.wt)) })
		})
	}
}

func testSessionBacklogBudget(t *testing.T, connect connector) {
	const (
		perSub     = 64 << 10
		perSession = 128 << 10
		tracks     = 8
		n          = 48 // objects per track: 48 KB, under perSub
		size       = 1000
	)
	bt := newBudgetTracks(t, tracks)
	good := connect(t, &Config{Handler: bt, MaxSubscriberBacklog: perSub, MaxSessionBacklog: perSession,
		SubscriberGrace: time.Hour}, nil) // no cut-off for stalling: the budget is what is tested
	stalled := good.another(t, stalledClient())
	ctx := testCtx(t, time.Minute)
	goodSubs := bt.subscribeAll(t, ctx, good.client)
	stalledSubs := bt.subscribeAll(t, ctx, stalled.client)
	reads := make([]<-chan error, tracks)
	for i, sub := range goodSubs {
		reads[i] = readGroups(ctx, sub, 1, checkObjects(n, size))
	}

	held := &stalled.server.backlog
	var peak int64
	for _, track := range bt {
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		for id := range uint64(n) {
			require.NoError(t, writeObject(w, id, nil, payloadOf(id, size)))
			peak = max(peak, held.Used())
		}
		require.NoError(t, w.Close())
	}
	for i, read := range reads {
		require.NoError(t, <-read, "the reading session, track %d", i)
	}
	synctest.Wait()
	assert.LessOrEqual(t, peak, int64(perSession), "queued for the stalled session")
	assert.Greater(t, peak, int64(perSession/2), "the stalled session's backlogs filled")

	var cut, open []int
	for i, sub := range stalledSubs {
		code, ended := doneCodeNow(t, sub)
		if !ended {
			open = append(open, i)
			continue
		}
		cut = append(cut, i)
		assert.Equal(t, wire.DoneExcessiveLoad, code, "stalled subscription %d", i)
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err, "its stream is still there to read")
		_, _, err = readAll(r)
		requireReset(t, err, wire.ResetExcessiveLoad)
	}
	assert.NotEmpty(t, cut, "subscriptions past the session's budget are cut off")
	assert.NotEmpty(t, open, "those within it go on")
	for _, sub := range goodSubs {
		assert.NoError(t, sub.Err())
	}
}

// TestSharedBacklogBudget: three sessions of one server share a budget.
// One reads nothing: its backlog on track A nearly spends the budget's
// pool. Another pauses reading track B: its burst is queued, and is the
// write that passes the pool. A third reads both tracks throughout, so
// that the publisher never waits. The refusal goes to the session holding
// more than its share, the stalled one, at its next write (EXCESSIVE_LOAD),
// never to the one within its share, which gets every object; the budget
// never holds more than its limit.
func TestSharedBacklogBudget(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) { testSharedBacklogBudget(t, overPipe(tr.wt)) })
		})
	}
}

func testSharedBacklogBudget(t *testing.T, connect connector) {
	const (
		limit = 256 << 10 // a pool of 128 KiB; a share of 42.7 KiB for each of 3 sessions
		size  = 1000
		burst = 32 // objects the pausing session has queued at once: under its share
		more  = 16 // objects after its pause
	)
	shared := NewBacklogBudget(limit)
	bt := newBudgetTracks(t, 2)
	trackA, trackB := bt[0], bt[1]
	serverCfg := &Config{Handler: bt, SharedBacklog: shared, MaxSubscriberBacklog: 1 << 20, MaxSessionBacklog: 1 << 20,
		SubscriberGrace: time.Hour} // no cut-off for stalling: the budget is what is tested
	fast := connect(t, serverCfg, nil)
	pausing := fast.another(t, &Config{StreamReceiveWindow: 4 << 10, ConnectionReceiveWindow: 64 << 10})
	stalled := fast.another(t, stalledClient())
	ctx := testCtx(t, time.Minute)
	fastSubs := bt.subscribeAll(t, ctx, fast.client)
	pausingSub, err := pausing.client.Subscribe(ctx, trackB.Name(), wire.Params{})
	require.NoError(t, err)
	stalledSub, err := stalled.client.Subscribe(ctx, trackA.Name(), wire.Params{})
	require.NoError(t, err)
	require.Equal(t, int64(3), shared.b.Sessions())

	fastReads := []<-chan error{
		readGroups(ctx, fastSubs[0], 1, func(g uint64, ids []uint64, p [][]byte) error {
			return checkObjects(len(ids), size)(g, ids, p)
		}),
		readGroups(ctx, fastSubs[1], 1, checkObjects(burst+more, size)),
	}
	// The pausing session reads an object (or the stream's end) for each
	// token.
	tokens := make(chan struct{}, 1024)
	read := goErr(func() error {
		r, err := pausingSub.AcceptSubgroup(ctx)
		if err != nil {
			return err
		}
		for id := uint64(0); ; id++ {
			select {
			case <-tokens:
			case <-ctx.Done():
				return ctx.Err()
			}
			h, err := r.Next()
			if err == io.EOF {
				if id != burst+more {
					return fmt.Errorf("%d objects, want %d", id, burst+more)
				}
				return nil
			}
			if err != nil {
				return err
			}
			p, err := r.readPayload(1 << 20)
			if err != nil {
				return err
			}
			if h.Location.Object != id || !bytes.Equal(p, payloadOf(id, size)) {
				return fmt.Errorf("object %d is %d or not whole", id, h.Location.Object)
			}
		}
	})
	var peak int
	writer := func(track *LocalTrack) (*SubgroupWriter, func()) {
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		id := uint64(0)
		return w, func() {
			t.Helper()
			require.NoError(t, writeObject(w, id, nil, payloadOf(id, size)))
			id++
			peak = max(peak, shared.Queued())
		}
	}
	wA, writeA := writer(trackA)
	wB, writeB := writer(trackB)
	// The stalled session's backlog nearly spends the pool. Twice: a
	// drain's Write that began before its stream was behind returns at
	// sendq.WriteGrace, releasing what it took.
	for range 2 {
		for shared.Queued() < limit/2-size {
			writeA()
		}
		time.Sleep(sendq.WriteGrace)
		synctest.Wait()
	}
	stalledHeld := stalled.server.backlog.Used()
	// The pausing session's burst is queued and passes the pool: it is
	// within its share.
	for range burst {
		writeB()
	}
	synctest.Wait()
	assert.Greater(t, shared.Queued(), limit/2, "the pool is spent")
	assert.Positive(t, pausing.server.backlog.Used(), "the pausing session has its burst queued")
	_, ended := doneCodeNow(t, pausingSub)
	require.False(t, ended, "the session within its share goes on")
	_, ended = doneCodeNow(t, stalledSub)
	require.False(t, ended, "the stalled session has not written since")
	assert.Equal(t, stalledHeld, stalled.server.backlog.Used())
	// The stalled session's next write is refused.
	writeA()
	synctest.Wait()
	code, ended := doneCodeNow(t, stalledSub)
	require.True(t, ended, "the stalled subscription is cut off")
	assert.Equal(t, wire.DoneExcessiveLoad, code)
	// The pausing session reads again, and gets every object.
	for range burst + more + 1 {
		tokens <- struct{}{}
	}
	for range more {
		writeB()
	}
	require.NoError(t, wA.Close())
	require.NoError(t, wB.Close())
	require.NoError(t, <-read, "the pausing session gets every object")
	assert.NoError(t, pausingSub.Err())
	for i, r := range fastReads {
		require.NoError(t, <-r, "the fast session, track %d", i)
	}
	assert.LessOrEqual(t, peak, limit, "the budget's limit")
}

// TestPendingOpensBacklogBudget: a peer that withholds stream credit
// makes each new subgroup's stream wait to open, holding a goroutine; the
// waiting streams count against MaxSessionBacklog (pendingOpenCost each),
// so the subscription whose next stream would pass it ends with
// EXCESSIVE_LOAD long before maxPendingOpens streams wait. The other
// session gets every subgroup.
func TestPendingOpensBacklogBudget(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) { testPendingOpensBacklogBudget(t, overPipe(tr.wt)) })
		})
	}
}

func testPendingOpensBacklogBudget(t *testing.T, connect connector) {
	const (
		perSession = 8 * pendingOpenCost
		n          = 40 // subgroups: past the stalled session's credit, by far
		size       = 100
	)
	bt := newBudgetTracks(t, 1)
	fast := connect(t, &Config{Handler: bt, MaxSessionBacklog: perSession, SubscriberGrace: time.Hour}, nil)
	// The stalled session grants 4 streams, its control stream one of them.
	stalled := fast.another(t, &Config{MaxIncomingUniStreams: 4, ReadStallTimeout: -1})
	ctx := testCtx(t, time.Minute)
	fastSub := bt.subscribeAll(t, ctx, fast.client)[0]
	stalledSub := bt.subscribeAll(t, ctx, stalled.client)[0]
	var ss *ServedSubscription
	for _, s := range bt[0].snapshot() {
		if s.sess == stalled.server {
			ss = s
		}
	}
	require.NotNil(t, ss)
	read := readGroups(ctx, fastSub, n, checkObjects(1, size))
	var peak int32
	for g := range uint64(n) {
		w := bt[0].OpenSubgroup(g, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, payloadOf(0, size)))
		require.NoError(t, w.Close())
		peak = max(peak, ss.pendingOpens.Load())
	}
	require.NoError(t, <-read, "the other session gets every subgroup")
	synctest.Wait()
	code, ended := doneCodeNow(t, stalledSub)
	require.True(t, ended, "the stalled subscription is cut off")
	assert.Equal(t, wire.DoneExcessiveLoad, code)
	assert.Positive(t, peak)
	assert.LessOrEqual(t, peak, int32(perSession/pendingOpenCost), "streams waiting for credit at once")
	assert.Zero(t, ss.pendingOpens.Load())
	assert.Zero(t, stalled.server.backlog.Used(), "nothing is left counted")
	assert.NoError(t, fastSub.Err())
}

// TestNamespaceQueueBacklogBudget: a requester that reads none of its
// SUBSCRIBE_NAMESPACE's messages makes the responder queue them, and the
// queue counts against MaxSessionBacklog: past it the stream is reset with
// EXCESSIVE_LOAD, while the responder's Publish never blocks.
func TestNamespaceQueueBacklogBudget(t *testing.T) {
	forServerSessions(t, "budget", func(t *testing.T, connect fakeConnector) {
		h := newNSServer()
		s, fp := connect(t, &Config{Handler: h, MaxSessionBacklog: 64 << 10, StreamReceiveWindow: 4 << 10})
		fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: nil})
		expect[*wire.RequestOK](fs)
		req, w := recvOrFail(t, h.reqs), recvOrFail(t, h.writers)
		field := string(bytes.Repeat([]byte("x"), 3000))
		published := goErr(func() error {
			for i := range 1000 {
				if err := w.Publish(wire.NewNamespace(fmt.Sprint(i), field)); err != nil {
					return err
				}
			}
			return nil
		})
		assert.Error(t, recvOrFail(t, published), "Publish fails once the budget is spent")
		closedOrFail(t, req.Context().Done(), "the request ends")
		assert.LessOrEqual(t, s.backlog.Used(), int64(64<<10+4<<10), "queued for the session: the budget and one message")
		for {
			_, err := fs.readErr()
			if err == nil {
				continue
			}
			var se *transport.StreamError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, uint64(wire.ResetExcessiveLoad), se.Code)
			break
		}
		assert.NoError(t, s.Context().Err(), "the session goes on")
		settle(t, func() bool { return s.backlog.Used() == 0 }, "the queue's bytes are released")
	})
}
