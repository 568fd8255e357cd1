package moqt

import (
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// slowClient is the Config of a subscriber whose receive windows are tiny:
// while it reads nothing, its streams hold a few KiB and then block the
// publisher's writes.
func slowClient() *Config {
	return &Config{StreamReceiveWindow: 4 << 10, ConnectionReceiveWindow: 64 << 10}
}

// fanOut is one LocalTrack served by one Server to two client sessions,
// each with one subscription: fast, with default windows, and slow, with
// slowClient's.
type fanOut struct {
	track          *LocalTrack
	fast, slow     *Subscription
	ssFast, ssSlow *ServedSubscription
	slowPair       *pair
	ctx            context.Context
	ended          chan struct{} // signalled when a backlog goroutine ends
}

func newFanOut(t *testing.T, scheme string, serverCfg *Config, slowParams wire.Params) *fanOut {
	t.Helper()
	return newFanOutOver(t, overWire(scheme), serverCfg, slowParams)
}

// newFanOutOver is newFanOut over connect's transport.
func newFanOutOver(t *testing.T, connect connector, serverCfg *Config, slowParams wire.Params) *fanOut {
	t.Helper()
	track, handler, served := newServedTrack(t, testTrack, nil)
	serverCfg.Handler = handler.Handler
	ended := make(chan struct{}, 1)
	if serverCfg.hooks == nil {
		serverCfg.hooks = &sessionHooks{}
	}
	serverCfg.hooks.backlogEnded = func() {
		select {
		case ended <- struct{}{}:
		default:
		}
	}
	fastPair := connect(t, serverCfg, nil)
	slowPair := fastPair.another(t, slowClient())
	ctx := testCtx(t, 30*time.Second)
	f := &fanOut{track: track, slowPair: slowPair, ctx: ctx, ended: ended}
	var err error
	f.fast, err = fastPair.client.Subscribe(ctx, testTrack, wire.Params{})
	require.NoError(t, err)
	f.ssFast = <-served
	f.slow, err = slowPair.client.Subscribe(ctx, testTrack, slowParams)
	require.NoError(t, err)
	f.ssSlow = <-served
	return f
}

// waitNoBacklog waits until ss has nothing queued, as its backlog
// goroutines end.
func (f *fanOut) waitNoBacklog(t *testing.T, ss *ServedSubscription) {
	t.Helper()
	for ss.wp.group.Queued() != 0 {
		select {
		case <-f.ended:
		case <-f.ctx.Done():
			require.FailNow(t, "the backlog was not dropped")
		}
	}
}

// payloadOf is object id's payload of size bytes: its ID, then a pattern.
func payloadOf(id uint64, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(id + uint64(i)*7)
	}
	if size >= 8 {
		binary.BigEndian.PutUint64(b, id)
	}
	return b
}

// received is one object read from a subgroup, or the error that ended
// the reading.
type received struct {
	id      uint64
	payload []byte
	err     error
}

// readSubgroupAsync reads the next subgroup of sub in a goroutine, sending
// each object on the returned channel, which is closed at the stream's
// end or after an error.
func readSubgroupAsync(ctx context.Context, sub *Subscription) <-chan received {
	ch := make(chan received, 1024)
	go func() {
		defer close(ch)
		r, err := sub.AcceptSubgroup(ctx)
		if err != nil {
			ch <- received{err: err}
			return
		}
		for {
			h, err := r.Next()
			if err == io.EOF {
				return
			}
			var p []byte
			if err == nil {
				p, err = r.readPayload(1 << 20)
			}
			if err != nil {
				ch <- received{err: err}
				return
			}
			ch <- received{id: h.Location.Object, payload: p}
		}
	}()
	return ch
}

// expectObjects checks that objects from, ..., to-1 arrive on ch in order,
// whole.
func expectObjects(t *testing.T, ctx context.Context, ch <-chan received, from, to uint64, size func(uint64) int) {
	t.Helper()
	for id := from; id < to; id++ {
		select {
		case o, ok := <-ch:
			require.True(t, ok, "stream ended before object %d", id)
			require.NoError(t, o.err)
			require.Equal(t, id, o.id)
			require.Equal(t, payloadOf(id, size(id)), o.payload, "object %d", id)
		case <-ctx.Done():
			require.FailNow(t, "objects missing", "waiting for object %d", id)
		}
	}
}

// expectEnd checks that ch ends with the stream's FIN.
func expectEnd(t *testing.T, ctx context.Context, ch <-chan received) {
	t.Helper()
	select {
	case o, ok := <-ch:
		require.False(t, ok, "more after the last object: %+v", o)
	case <-ctx.Done():
		require.FailNow(t, "the stream did not end")
	}
}

// writeObjects writes objects from, ..., to-1 of w in a goroutine and
// waits for the writes, failing if they do not complete.
func writeObjects(t *testing.T, ctx context.Context, w *SubgroupWriter, from, to uint64, size func(uint64) int) {
	t.Helper()
	done := goErr(func() error {
		for id := from; id < to; id++ {
			if err := writeObject(w, id, nil, payloadOf(id, size(id))); err != nil {
				return err
			}
		}
		return nil
	})
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		require.FailNow(t, "the writes were held up")
	}
}

func fixedSize(n int) func(uint64) int { return func(uint64) int { return n } }

// TestBacklogSlowSubscriberTooFarBehind: one track, two subscribers in two
// sessions. The slow one reads nothing and its windows are tiny; the fast
// one still gets every object while the slow one's wait in its backlog.
// Once that backlog would pass Config.MaxSubscriberBacklog, the slow
// subscription ends with PUBLISH_DONE TOO_FAR_BEHIND; the fast one goes on.
func TestBacklogSlowSubscriberTooFarBehind(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			bound = 128 << 10
			size  = 1000
			n1    = 64  // 64 KB: past the slow subscriber's windows, within the bound
			n     = 256 // 256 KB: past the bound
		)
		f := newFanOutOver(t, connect, &Config{MaxSubscriberBacklog: bound}, wire.Params{})
		ctx := f.ctx
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		fast := readSubgroupAsync(ctx, f.fast)

		writeObjects(t, ctx, w, 0, n1, fixedSize(size))
		expectObjects(t, ctx, fast, 0, n1, fixedSize(size))
		assert.NoError(t, f.slow.Err(), "the slow subscription goes on")
		assert.Positive(t, f.ssSlow.wp.group.Queued(), "its objects wait in its backlog")

		writeObjects(t, ctx, w, n1, n, fixedSize(size))
		waitDone(t, ctx, f.slow.Done(), "slow subscription")
		var de *DoneError
		require.ErrorAs(t, f.slow.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)
		assert.Equal(t, uint64(1), de.StreamCount)
		require.ErrorAs(t, f.ssSlow.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)

		require.NoError(t, w.Close())
		expectObjects(t, ctx, fast, n1, n, fixedSize(size))
		expectEnd(t, ctx, fast)
		assert.NoError(t, f.fast.Err())
		f.waitNoBacklog(t, f.ssSlow)
	})
}

// TestBacklogSubscriberCatchesUp: a subscriber that reads nothing for a
// while has its objects queued; once it reads it gets every one of them,
// in order and whole, and the FIN, whatever mix of small, large and
// streamed objects was written meanwhile.
func TestBacklogSubscriberCatchesUp(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			n        = 40
			streamed = 21 // written with BeginObject, in chunks
		)
		size := func(id uint64) int { return []int{10, 1500, 70 << 10, 300}[id%4] }
		f := newFanOutOver(t, connect, &Config{}, wire.Params{})
		ctx := f.ctx
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		fast := readSubgroupAsync(ctx, f.fast)

		writeObjects(t, ctx, w, 0, streamed, size)
		p := payloadOf(streamed, size(streamed))
		ow, err := w.BeginObject(streamed, uint64(len(p)), nil)
		require.NoError(t, err)
		for len(p) > 0 {
			k := min(len(p), 700)
			_, err := ow.Write(p[:k])
			require.NoError(t, err)
			p = p[k:]
		}
		require.NoError(t, ow.Close())
		writeObjects(t, ctx, w, streamed+1, n, size)
		expectObjects(t, ctx, fast, 0, n, size)
		assert.Positive(t, f.ssSlow.wp.group.Queued(), "the slow subscriber's objects wait in its backlog")
		require.NoError(t, w.Close())
		expectEnd(t, ctx, fast)

		slow := readSubgroupAsync(ctx, f.slow)
		expectObjects(t, ctx, slow, 0, n, size)
		expectEnd(t, ctx, slow)
		assert.NoError(t, f.slow.Err())
		assert.NoError(t, f.fast.Err())
	})
}

// TestBacklogDeliveryTimeout: objects waiting in a backlog are under their
// OBJECT_DELIVERY_TIMEOUT until they are passed to the transport. A slow
// subscriber with a short timeout has its stream reset with
// DELIVERY_TIMEOUT and its backlog dropped, though every write had
// returned at once; the subscription goes on (§5.2).
func TestBacklogDeliveryTimeout(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			size = 1000
			n    = 64
		)
		timedOut := make(chan struct{}, 16)
		cfg := &Config{hooks: &sessionHooks{deliveryTimedOut: func() { timedOut <- struct{}{} }}}
		f := newFanOutOver(t, connect, cfg, wire.Params{ObjectDeliveryTimeout: wire.Some[uint64](shortTimeout)})
		ctx := f.ctx
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		fast := readSubgroupAsync(ctx, f.fast)

		writeObjects(t, ctx, w, 0, n, fixedSize(size))
		expectObjects(t, ctx, fast, 0, n, fixedSize(size))
		select {
		case <-timedOut:
		case <-ctx.Done():
			require.FailNow(t, "no delivery timeout for the queued objects")
		}
		f.waitNoBacklog(t, f.ssSlow)

		// A round trip on the request stream, which the reset
		// precedes, then the stream ends in DELIVERY_TIMEOUT.
		require.NoError(t, f.slow.Update(ctx, wire.Params{SubscriberPriority: wire.Some[uint8](1)}))
		var last received
		for o := range readSubgroupAsync(ctx, f.slow) {
			last = o
		}
		var se *transport.StreamError
		require.ErrorAs(t, last.err, &se)
		assert.Equal(t, uint64(wire.ResetDeliveryTimeout), se.Code)
		assert.NoError(t, f.slow.Err(), "the subscription goes on")

		writeObjects(t, ctx, w, n, n+4, fixedSize(size))
		require.NoError(t, w.Close())
		expectObjects(t, ctx, fast, n, n+4, fixedSize(size))
		expectEnd(t, ctx, fast)
		f.ssSlow.mu.Lock()
		assert.Equal(t, uint64(1), f.ssSlow.streams, "no new stream for the rest of the subgroup")
		f.ssSlow.mu.Unlock()
	})
}

// TestBacklogReleasedWithSession: a backlog whose subscriber's session
// closes is dropped and its goroutine ends (the pair's leak check runs
// after the test); the publisher goes on with the others.
func TestBacklogReleasedWithSession(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			size = 1000
			n    = 64
		)
		f := newFanOutOver(t, connect, &Config{}, wire.Params{})
		ctx := f.ctx
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		fast := readSubgroupAsync(ctx, f.fast)
		writeObjects(t, ctx, w, 0, n, fixedSize(size))
		expectObjects(t, ctx, fast, 0, n, fixedSize(size))
		require.Positive(t, f.ssSlow.wp.group.Queued())

		require.NoError(t, f.slowPair.client.Close())
		waitDone(t, ctx, f.ssSlow.Context().Done(), "slow served subscription")
		f.waitNoBacklog(t, f.ssSlow)

		writeObjects(t, ctx, w, n, 2*n, fixedSize(size))
		require.NoError(t, w.Close())
		expectObjects(t, ctx, fast, n, 2*n, fixedSize(size))
		expectEnd(t, ctx, fast)
	})
}

// TestBacklogAllSlowHoldsPublisher: when no subscriber keeps up, the
// publisher waits for the first to catch up instead of queuing past the
// bound and ending them all with TOO_FAR_BEHIND.
func TestBacklogAllSlowHoldsPublisher(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			size = 1000
			n    = 256 // 256 KB: four times the bound
		)
		waits := make(chan struct{}, 1)
		track, cfg, served := newServedTrack(t, testTrack, nil)
		cfg.MaxSubscriberBacklog = 64 << 10
		cfg.hooks = &sessionHooks{publisherWaits: func() {
			select {
			case waits <- struct{}{}:
			default:
			}
		}}
		a := connect(t, cfg, slowClient())
		b := a.connect(t, "", slowClient())
		ctx := testCtx(t, 30*time.Second)
		subA, err := a.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		ssA := <-served
		subB, err := b.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		<-served

		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		writes := goErr(func() error {
			for id := range uint64(n) {
				if err := writeObject(w, id, nil, payloadOf(id, size)); err != nil {
					return err
				}
			}
			return w.Close()
		})
		select {
		case <-waits:
		case err := <-writes:
			require.FailNow(t, "the writes went through with no subscriber reading", "%v", err)
		case <-ctx.Done():
			require.FailNow(t, "the publisher did not wait")
		}
		assert.NoError(t, subA.Err())
		assert.NoError(t, subB.Err())

		// One leaves; the publisher follows the other, which reads.
		require.NoError(t, subB.Close())
		got := readSubgroupAsync(ctx, subA)
		expectObjects(t, ctx, got, 0, n, fixedSize(size))
		expectEnd(t, ctx, got)
		select {
		case err := <-writes:
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "the writes did not complete")
		}
		assert.NoError(t, subA.Err())
		assert.Zero(t, ssA.wp.group.Queued())
	})
}

// TestBacklogObjectLargerThanBound: objects larger than
// Config.MaxSubscriberBacklog, fanned out to two subscribers. One object
// in a subscriber's backlog, or the rest of one and the whole next one,
// and small objects after them (an End of Group), is a subscriber an object
// behind the fastest, which a publisher going at the fastest's pace always
// leaves the others: it is not too far behind. Every such object used to
// cut every subscriber but the fastest (TOO_FAR_BEHIND: the object alone
// passed the bound), so none but it ever got one, through a relay none at
// all. More than two such objects behind is too far
// (TestGroupLimitWholeObject).
func TestBacklogObjectLargerThanBound(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const bound = 64 << 10
		size := func(id uint64) int {
			if id == 2 {
				return 10
			}
			return 3 * bound
		}
		f := newFanOutOver(t, connect, &Config{MaxSubscriberBacklog: bound}, wire.Params{})
		ctx := f.ctx
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		fast := readSubgroupAsync(ctx, f.fast)

		// The slow subscriber reads nothing yet: the first object waits
		// in its backlog, then the second and a small one join it.
		writeObjects(t, ctx, w, 0, 3, size)
		expectObjects(t, ctx, fast, 0, 3, size)
		require.NoError(t, f.slow.Err(), "an object behind is not too far behind")
		assert.Greater(t, f.ssSlow.wp.group.Queued(), int64(bound), "its objects wait in its backlog")

		slow := readSubgroupAsync(ctx, f.slow)
		expectObjects(t, ctx, slow, 0, 3, size)
		f.waitNoBacklog(t, f.ssSlow)
		writeObjects(t, ctx, w, 3, 4, size)
		require.NoError(t, w.Close())
		for _, ch := range []<-chan received{fast, slow} {
			expectObjects(t, ctx, ch, 3, 4, size)
			expectEnd(t, ctx, ch)
		}
		assert.NoError(t, f.slow.Err())
		assert.NoError(t, f.fast.Err())
	})
}

// TestBacklogCutBeforeEnd: a subscriber cut off for being too far behind
// just before the publisher ends the track is told TOO_FAR_BEHIND, as its
// streams were reset, not TRACK_ENDED: the cut's PUBLISH_DONE is sent from
// a goroutine of its own, and the track's End, come first, ended the
// subscription as complete. A moqt sub behind a relay exited 0 with two of
// a file's three objects, its one subgroup reset TOO_FAR_BEHIND.
func TestBacklogCutBeforeEnd(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const bound, size = 64 << 10, 1000
		f := newFanOutOver(t, connect, &Config{MaxSubscriberBacklog: bound}, wire.Params{})
		ctx := f.ctx
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		fast := readSubgroupAsync(ctx, f.fast)
		var id uint64
		ended := goErr(func() error {
			for ; f.ssSlow.cut.Load() == nil; id++ {
				if err := writeObject(w, id, nil, payloadOf(id, size)); err != nil {
					return err
				}
			}
			// At once, before the cut's PUBLISH_DONE goes.
			if err := w.Close(); err != nil {
				return err
			}
			f.track.End(wire.DoneTrackEnded, "")
			return nil
		})
		require.NoError(t, <-ended)
		expectObjects(t, ctx, fast, 0, id, fixedSize(size))
		expectEnd(t, ctx, fast)
		waitDone(t, ctx, f.slow.Done(), "slow subscription")
		var de *DoneError
		require.ErrorAs(t, f.slow.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code, "the slow subscriber's end")
		waitDone(t, ctx, f.fast.Done(), "fast subscription")
		require.ErrorAs(t, f.fast.Err(), &de)
		assert.Equal(t, wire.DoneTrackEnded, de.Code, "the fast one's")
	})
}
