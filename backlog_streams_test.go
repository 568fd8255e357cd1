// Slow subscribers and stream credit: streams waiting to open, new streams
// of a subscriber already behind, and the fast path that allocates nothing.

package moqt

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// readGroups accepts n subgroups of sub and reads each in its own
// goroutine, to its end, passing what it read to check. Reading one stream
// to its end before taking the next could wait forever on a small
// connection window, full of the other streams' bytes.
func readGroups(ctx context.Context, sub *Subscription, n int, check func(g uint64, ids []uint64, payloads [][]byte) error) <-chan error {
	return goErr(func() error {
		errs := make(chan error, n)
		for range n {
			r, err := sub.AcceptSubgroup(ctx)
			if err != nil {
				return err
			}
			go func() {
				ids, payloads, err := readAll(r)
				if err == nil {
					err = check(r.Header().GroupID, ids, payloads)
				}
				errs <- err
			}()
		}
		for range n {
			if err := <-errs; err != nil {
				return err
			}
		}
		return nil
	})
}

// TestBacklogStreamCreditWithheld: a subscriber that takes none of its
// streams never returns their stream credit. The publisher does not wait
// for it: the fast subscriber gets every subgroup while the slow one's
// new streams wait to open, and once too many wait, the slow subscription
// ends with PUBLISH_DONE TOO_FAR_BEHIND, counting only the streams that
// opened (§9.9).
func TestBacklogStreamCreditWithheld(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		// quic-go grants 100 incoming streams; the slow subscriber
		// holds each one (a subgroup is larger than what its session
		// reads ahead), so past 100+maxPendingOpens subgroups it is
		// too far behind. Its connection window is ample: this is
		// about stream credit alone.
		const (
			n    = 100 + maxPendingOpens + 50
			size = 8 << 10
		)
		track, cfg, served := newServedTrack(t, testTrack, nil)
		fastPair := connect(t, cfg, nil)
		slowPair := fastPair.connect(t, "", &Config{ConnectionReceiveWindow: 16 << 20})
		ctx := testCtx(t, 30*time.Second)
		fast, err := fastPair.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		<-served
		slow, err := slowPair.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		ssSlow := <-served

		groups := make(chan uint64, n)
		readErr := readGroups(ctx, fast, n, func(g uint64, ids []uint64, payloads [][]byte) error {
			if len(ids) != 1 || !bytes.Equal(payloads[0], payloadOf(g, size)) {
				return fmt.Errorf("group %d: objects %v", g, ids)
			}
			groups <- g
			return nil
		})
		writes := goErr(func() error {
			for g := range uint64(n) {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				if err := writeObject(w, 0, nil, payloadOf(g, size)); err != nil {
					return err
				}
				if err := w.Close(); err != nil {
					return err
				}
			}
			return nil
		})
		select {
		case err := <-writes:
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "the publisher waited for the slow subscriber's stream credit")
		}
		select {
		case err := <-readErr:
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "the fast subscriber did not get every subgroup")
		}
		close(groups)
		seen := map[uint64]bool{}
		for g := range groups {
			seen[g] = true
		}
		assert.Len(t, seen, n)
		assert.NoError(t, fast.Err())

		waitDone(t, ctx, slow.Done(), "slow subscription")
		var de *DoneError
		require.ErrorAs(t, slow.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)
		ssSlow.mu.Lock()
		opened := ssSlow.streams
		ssSlow.mu.Unlock()
		assert.Equal(t, opened, de.StreamCount, "streams abandoned before they opened are not counted")
		assert.Less(t, de.StreamCount, uint64(n))
		assert.Zero(t, ssSlow.pendingOpens.Load())
	})
}

// TestBacklogNewStreamOfSlowSubscriber: once a subscriber is behind, each
// new stream for it queues what it does not take instead of costing the
// publisher a write grace (it waits for room only past sendq.Window);
// when it reads, every subgroup arrives whole.
func TestBacklogNewStreamOfSlowSubscriber(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			size      = 1000
			subgroups = 20
			perGroup  = 5  // 5 KB: past the slow subscriber's stream window
			first     = 30 // 30 KB: past its window and sendq.Window
		)
		var slow atomic.Pointer[ServedSubscription]
		var graces atomic.Int32 // the slow subscriber's
		cfg := &Config{hooks: &sessionHooks{graceExpired: func(ss *ServedSubscription) {
			if ss == slow.Load() {
				graces.Add(1)
			}
		}}}
		f := newFanOutOver(t, connect, cfg, wire.Params{})
		slow.Store(f.ssSlow)
		ctx := f.ctx
		readAllGroups := func(sub *Subscription, n int, objects func(g uint64) uint64) <-chan error {
			return readGroups(ctx, sub, n, func(g uint64, ids []uint64, payloads [][]byte) error {
				if uint64(len(ids)) != objects(g) {
					return fmt.Errorf("group %d: objects %v", g, ids)
				}
				for i, p := range payloads {
					if !bytes.Equal(p, payloadOf(g*100+uint64(i), size)) {
						return fmt.Errorf("group %d object %d: wrong payload", g, i)
					}
				}
				return nil
			})
		}
		objects := func(g uint64) uint64 {
			if g == 0 {
				return first
			}
			return perGroup
		}
		fastDone := readAllGroups(f.fast, subgroups+1, objects)
		write := func(g uint64) {
			w := f.track.OpenSubgroup(g, 0, SubgroupOptions{})
			for id := range objects(g) {
				require.NoError(t, writeObject(w, id, nil, payloadOf(g*100+id, size)))
			}
			require.NoError(t, w.Close())
		}
		write(0)        // 30 KB: the slow subscriber falls behind
		synctest.Wait() // a drain that found it behind has told the hook
		require.Positive(t, f.ssSlow.wp.group.Queued())
		before := graces.Load()
		for g := uint64(1); g <= subgroups; g++ {
			write(g)
		}
		assert.Equal(t, before, graces.Load(), "new streams of a subscriber behind wait no write grace")
		select {
		case err := <-fastDone:
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "the fast subscriber did not get every subgroup")
		}
		select {
		case err := <-readAllGroups(f.slow, subgroups+1, objects):
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "the slow subscriber did not catch up")
		}
		assert.NoError(t, f.slow.Err())
	})
}

// nopStream takes every write at once.
type nopStream struct{ transport.SendStream }

func (nopStream) Write(b []byte) (int, error)      { return len(b), nil }
func (nopStream) SetWriteDeadline(time.Time) error { return nil }
func (nopStream) Context() context.Context         { return context.Background() }

// TestBacklogFastPathAllocs: writing to a stream that keeps up allocates
// nothing while its drain runs, and only the drain's goroutine when it has
// to start one. In a bubble, to tell the two apart (synctest.Wait).
func TestBacklogFastPathAllocs(t *testing.T) {
	inBubble(t, testBacklogFastPathAllocs)
}

func testBacklogFastPathAllocs(t *testing.T) {
	ss := &ServedSubscription{sess: &Session{cfg: (*Config)(nil).withDefaults(), rules: rulesOf(wire.Draft21)}}
	w := &SubgroupWriter{}
	w.sq.Init(mono.Now)
	out := &subgroupOut{str: nopStream{}, ss: ss}
	out.q.Init(out.str, out, &ss.wp.group, &w.sq)
	b := make([]byte, 100)
	for _, wait := range []bool{false, true} {
		allocs := testing.AllocsPerRun(1000, func() {
			if err := w.send(out, b, false, mono.Now()); err != nil {
				panic(err)
			}
			if wait {
				synctest.Wait() // the drain ends: the next send starts one
			}
		})
		most := 0.0
		if wait {
			most = 1 // the drain's goroutine
		}
		assert.LessOrEqual(t, allocs, most, "drain ended between sends: %v", wait)
		synctest.Wait()
		assert.False(t, out.q.Active())
	}
}

// TestPendingStreamFinishedBeforeItOpens: a subgroup closed while its
// stream still waits for the subscriber's stream credit stays the
// subscription's stream until it opens. PUBLISH_DONE then either waits for
// it and counts it, once the subscriber returns credit in time, or
// abandons it and does not count it; never counts one that opens after it
// or never opens (its Stream Count used to be one higher than the streams
// opened, TestBacklogStreamCreditWithheld on a loaded machine).
func TestPendingStreamFinishedBeforeItOpens(t *testing.T) {
	for _, c := range []struct {
		name    string
		credit  bool // the subscriber reads its first stream, returning credit
		code    wire.PublishDoneCode
		streams uint64
	}{
		{"credit returned", true, wire.DoneTrackEnded, 2},
		// A grace without credit: too far behind, its stream abandoned.
		// That end races the one asked for: either code, the same count.
		{"credit withheld", false, wire.DoneTooFarBehind, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				track, cfg, served := newServedTrack(t, testTrack, nil)
				p := newPipePair(t, transport.PipeConfig{MaxIncomingUniStreams: 2}, cfg, nil) // the control stream and one
				ctx := testCtx(t, time.Minute)
				sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
				require.NoError(t, err)
				ss := <-served
				for g := range uint64(2) {
					w := track.OpenSubgroup(g, 0, SubgroupOptions{})
					// Larger than a read buffer: the stream's FIN, and
					// so its credit, waits for the subscriber's read.
					writeObjects(t, ctx, w, 0, 1, fixedSize(8<<10))
					require.NoError(t, w.Close())
				}
				synctest.Wait()
				require.Equal(t, int32(1), ss.pendingOpens.Load(), "the second stream waits for credit")
				if c.credit {
					r, err := sub.AcceptSubgroup(ctx)
					require.NoError(t, err)
					_, _, err = readAllN(r, -1)
					require.NoError(t, err)
				}
				_ = ss.End(wire.DoneTrackEnded, "")
				waitDone(t, ctx, sub.Done(), "subscription")
				var de *DoneError
				require.ErrorAs(t, sub.Err(), &de)
				if c.credit {
					assert.Equal(t, c.code, de.Code)
				} else {
					assert.Contains(t, []wire.PublishDoneCode{c.code, wire.DoneTrackEnded}, de.Code)
				}
				assert.Equal(t, c.streams, de.StreamCount)
				ss.mu.Lock()
				assert.Equal(t, c.streams, ss.streams, "the streams opened")
				ss.mu.Unlock()
				if c.credit {
					r, err := sub.AcceptSubgroup(ctx)
					require.NoError(t, err)
					ids, _, err := readAllN(r, -1)
					require.NoError(t, err)
					assert.Equal(t, []uint64{0}, ids, "the stream that waited for credit, whole")
				}
			})
		})
	}
}
