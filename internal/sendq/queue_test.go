package sendq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// nopStream takes every write at once.
type nopStream struct{ Stream }

func (nopStream) Write(b []byte) (int, error)      { return len(b), nil }
func (nopStream) SetWriteDeadline(time.Time) error { return nil }
func (nopStream) Context() context.Context         { return context.Background() }

// big is more than a queue holds in flight: a Send of it waits for room.
var big = strings.Repeat("b", Window+1)

// TestSendFastPathAllocs: queuing for a stream that keeps up allocates
// nothing while its drain runs, and only the drain's goroutine when one
// has to start.
func TestSendFastPathAllocs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var w Writer
		w.Init(now)
		defer w.Interrupt()
		var g Group
		var q Queue
		q.Init(nopStream{}, &fakeOwner{}, &g, &w)
		b := make([]byte, 100)
		for _, wait := range []bool{false, true} {
			allocs := testing.AllocsPerRun(1000, func() {
				if err := w.Send(&q, b, nil, false, true, now()+int64(time.Second)); err != nil {
					panic(err)
				}
				if wait {
					synctest.Wait() // the drain ends
				}
			})
			most := 0.0
			if wait {
				most = 1
			}
			assert.LessOrEqual(t, allocs, most, "drain ended between sends: %v", wait)
			synctest.Wait()
			assert.False(t, q.Active())
		}
	})
}

// TestSlowStreamQueues: of two streams, the slow one queues what it does
// not take, the publisher going on at once while that is within Window.
// Past it, the Send waits WriteGrace for room, then the queue is behind:
// everything it holds counts, once. The fast stream takes everything. Once
// the slow one takes bytes again its drain writes the queue in order, then
// the FIN asked for meanwhile, and its bytes are released.
func TestSlowStreamQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 1<<20, 3)
		defer r.w.Interrupt()
		fast, slow := r.strs[0], r.strs[1]
		start := time.Now()
		assert.Equal(t, []error{nil, nil}, r.send("hello", time.Minute))
		synctest.Wait()
		assert.Zero(t, time.Since(start), "within Window: no wait")
		assert.True(t, r.qs[1].Active())
		assert.False(t, r.qs[1].Behind())
		assert.Zero(t, r.gs[1].Queued(), "in flight: not counted")

		assert.Equal(t, []error{nil, nil}, r.send(big, time.Minute))
		assert.Equal(t, WriteGrace, time.Since(start), "the slow stream held the call one grace")
		synctest.Wait()
		assert.True(t, r.qs[1].Behind())
		assert.Equal(t, int64(2+len(big)), r.gs[1].Queued(), "all it holds")
		assert.Equal(t, 1, r.owners[1].grace)

		start = time.Now()
		assert.Equal(t, []error{nil, nil}, r.send(" world", time.Minute))
		assert.Zero(t, time.Since(start), "a stream behind queues at once")
		assert.Equal(t, int64(8+len(big)), r.gs[1].Queued())
		assert.Equal(t, 1, r.owners[1].grace)
		assert.True(t, r.qs[1].FinishAfter(false, 0))
		synctest.Wait()
		assert.Equal(t, "hello"+big+" world", fast.taken())

		slow.grant(1 << 20)
		synctest.Wait()
		assert.Equal(t, "hello"+big+" world", slow.taken())
		assert.False(t, r.qs[1].Active())
		assert.False(t, r.qs[1].Behind())
		assert.Zero(t, r.gs[1].Queued())
		assert.Zero(t, r.sess.Used())
		_, failed, finished, _ := r.owners[1].snapshot()
		assert.Empty(t, failed)
		assert.Equal(t, []string{"fin"}, finished)
		assert.False(t, r.qs[0].FinishAfter(false, 0), "nothing queued: the publisher finishes it")
	})
}

// TestFanoutStreamBehindAtWriteGrace: a fan-out stream whose drain's
// Write has not returned in WriteGrace is behind, however little it holds:
// what it holds is charged, and the subscriber's other streams queue as a
// backlog at once (a killed subscriber of one object per stream reaches
// its bound). Once its Write takes everything, it is caught up.
func TestFanoutStreamBehindAtWriteGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 1<<20, 0)
		defer r.w.Interrupt()
		slow := r.qs[1]
		assert.Equal(t, []error{nil, nil}, r.send("hello", time.Minute))
		time.Sleep(WriteGrace - 1)
		synctest.Wait()
		assert.False(t, slow.Behind(), "within WriteGrace")
		time.Sleep(1)
		synctest.Wait()
		assert.True(t, slow.Behind())
		assert.Equal(t, int64(5), r.gs[1].Queued())
		assert.Equal(t, 1, r.owners[1].grace)

		// Another stream of the same subscriber.
		s2, o2, q2 := newFakeStream(1<<20), &fakeOwner{}, &Queue{}
		q2.Init(s2, o2, r.gs[1], &r.w)
		until := now() + int64(time.Minute)
		require.NoError(t, r.w.Send(q2, []byte("abc"), nil, false, true, until))
		assert.True(t, q2.Behind(), "its subscriber is behind")
		assert.Zero(t, o2.grace, "no wait")
		synctest.Wait()
		assert.Equal(t, "abc", s2.taken())
		assert.False(t, q2.Behind(), "written: caught up")

		r.strs[1].grant(1 << 20)
		synctest.Wait()
		assert.Equal(t, "hello", r.strs[1].taken())
		assert.False(t, slow.Behind())
		assert.Zero(t, r.gs[1].Queued())
		assert.Zero(t, r.sess.Used())
	})
}

// TestLoneStreamWaitsItsBound: a Send to a lone stream that holds more
// than Window waits for room up to the call's own bound, and goes on as
// soon as the drain makes room.
func TestLoneStreamWaitsItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 0)
		defer r.w.Interrupt()
		start := time.Now()
		go func() {
			time.Sleep(time.Second)
			r.strs[0].grant(len(big))
		}()
		require.NoError(t, r.send(big, time.Hour)[0])
		assert.Equal(t, time.Second, time.Since(start), "until the drain made room")
		assert.False(t, r.qs[0].Behind())

		require.NoError(t, r.send(big, 2*time.Second)[0])
		assert.Equal(t, 3*time.Second, time.Since(start), "the call's bound")
		assert.True(t, r.qs[0].Behind())
		assert.Equal(t, 1, r.owners[0].grace)
		r.strs[0].grant(1 << 20)
		synctest.Wait()
	})
}

// TestStalledStreamCut: a queued stream that takes nothing for a whole
// grace, while the group's other streams take nothing either, is too far
// behind: its drain fails with the reason and drops the queue. The owner
// learns why before the queue reports itself broken: a publisher that
// found it broken first reset the stream CANCELLED, before the owner's
// TOO_FAR_BEHIND (a CI run of TestSlowLoneSubscriberTooFarBehind).
func TestStalledStreamCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, 2*time.Second, 0)
		defer r.w.Interrupt()
		r.owners[0].q = r.qs[0]
		start := time.Now()
		require.NoError(t, r.send("abc", time.Second)[0])
		assert.Zero(t, time.Since(start), "within Window: no wait")
		time.Sleep(2*time.Second - 1)
		synctest.Wait()
		_, failed, _, _ := r.owners[0].snapshot()
		assert.Empty(t, failed, "within the grace")
		time.Sleep(1)
		synctest.Wait()
		_, failed, _, drained := r.owners[0].snapshot()
		require.Len(t, failed, 1, "a grace after the drain began")
		assert.ErrorIs(t, failed[0], ErrTooFarBehind)
		var ce *CutError
		require.ErrorAs(t, failed[0], &ce)
		assert.Equal(t, "no data taken for 2s", ce.Reason)
		assert.Equal(t, []bool{false}, r.owners[0].brokenAtFailed, "told before the queue is broken")
		assert.True(t, r.qs[0].Broken())
		assert.Zero(t, r.gs[0].Queued())
		assert.Equal(t, 1, drained)
		assert.ErrorIs(t, r.send("d", time.Second)[0], errDiscarded, "a failed stream takes nothing more")
	})
}

// TestQueueLimit: a queue that falls behind past the group's limit is
// refused as too far behind, and nothing is counted: by the publisher
// whose wait for room is over, or by the drain of a fan-out stream whose
// Write did not return in WriteGrace.
func TestQueueLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(Window, time.Minute, 0)
		require.Equal(t, []error{nil}, r.send("12345", time.Minute))
		assert.ErrorIs(t, r.send(big, time.Second)[0], ErrTooFarBehind)
		assert.Zero(t, r.gs[0].Queued())
		assert.False(t, r.qs[0].Behind())
		// The owner resets the stream, which wakes its drain's Write,
		// and discards the queue.
		r.strs[0].cancel(errors.New("reset"))
		r.qs[0].Discard()
		synctest.Wait()
		_, failed, _, _ := r.owners[0].snapshot()
		assert.Len(t, failed, 1, "discarded")
		assert.Zero(t, r.gs[0].Queued())
		r.w.Interrupt()
	})
	synctest.Test(t, func(t *testing.T) {
		r := newRig(10, time.Minute, 1<<20, 0)
		defer r.w.Interrupt()
		require.Equal(t, []error{nil, nil}, r.send("12345678901", time.Minute))
		time.Sleep(WriteGrace)
		synctest.Wait()
		_, failed, _, _ := r.owners[1].snapshot()
		require.Len(t, failed, 1)
		assert.ErrorIs(t, failed[0], ErrTooFarBehind)
		assert.Zero(t, r.gs[1].Queued())
		assert.True(t, r.qs[1].Broken())
	})
}

// TestQueueMarks: objects under a delivery timeout in a queue move the
// object timer as the drain writes each one's last byte.
func TestQueueMarks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 1)
		defer r.w.Interrupt()
		o, s, q := r.owners[0], r.strs[0], r.qs[0]
		o.end, o.deadline = 4, 100 // the current object, "abcd"
		require.NoError(t, r.send("abcd", 0)[0])
		require.True(t, q.Active())
		assert.True(t, q.Mark(q.Offset()+2, 200)) // "ef"
		require.NoError(t, r.send("ef", 0)[0])
		assert.True(t, q.Mark(q.Offset()+2, 300)) // "gh"
		require.NoError(t, r.send("gh", 0)[0])
		armed, _, _, _ := o.snapshot()
		assert.Empty(t, armed, "the first object's timer runs already")
		s.grant(3)
		synctest.Wait()
		armed, _, _, _ = o.snapshot()
		assert.Equal(t, []int64{200}, armed, "abcd written: ef's deadline")
		s.grant(4)
		synctest.Wait()
		armed, _, _, _ = o.snapshot()
		assert.Equal(t, []int64{200, 300, 0}, armed)
		assert.Equal(t, "abcdefgh", s.taken())
		assert.False(t, q.Mark(q.Offset()+1, 400), "not queued: the publisher arms it")
	})
}

// TestHoldWaitsForReady: held bytes wait in the queue, the publisher
// going on, until the owner is ready.
func TestHoldWaitsForReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 100)
		defer r.w.Interrupt()
		r.owners[0].ready = make(chan struct{})
		require.NoError(t, r.w.Send(r.qs[0], []byte("early"), nil, true, false, now()))
		synctest.Wait()
		assert.Empty(t, r.strs[0].taken())
		assert.True(t, r.qs[0].FinishAfter(true, wire.ResetCancelled))
		close(r.owners[0].ready)
		synctest.Wait()
		assert.Equal(t, "early", r.strs[0].taken())
		_, _, finished, _ := r.owners[0].snapshot()
		assert.Equal(t, []string{"reset " + wire.ResetCancelled.String()}, finished)
	})
}

// TestFirstWriteMarked: after MarkFirstWrite, the drain's first write
// that takes bytes goes through WriteMarked, and carries no more than the
// first segment, the header; one that took nothing leaves the mark for
// the next.
func TestFirstWriteMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 0)
		defer r.w.Interrupt()
		r.qs[0].MarkFirstWrite()
		payload := strings.Repeat("p", minShared)
		var pl Payload
		pl.Reset([]byte(payload))
		require.NoError(t, r.w.Send(r.qs[0], []byte("hdr"+payload), &pl, false, false, now()+int64(time.Minute)))
		pl.Reset(nil)
		synctest.Wait()
		r.strs[0].grant(2)
		synctest.Wait()
		r.strs[0].grant(1 << 20)
		synctest.Wait()
		assert.Equal(t, "hdr"+payload, r.strs[0].taken())
		marked := r.strs[0].markedWrites()
		require.NotEmpty(t, marked)
		assert.Equal(t, 3, marked[len(marked)-1], "the first write that took bytes, of the header")
		for _, n := range marked[:len(marked)-1] {
			assert.Zero(t, n, "a marked write before took nothing")
		}
	})
}

// TestInterruptBlockedSend: Interrupt wakes a Send waiting for room, which
// returns ErrStopped, and a wait in Await.
func TestInterruptBlockedSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 0)
		done := make(chan error)
		go func() { done <- r.send(big, time.Hour)[0] }()
		synctest.Wait()
		assert.True(t, r.w.Waiting())
		r.w.Interrupt()
		assert.ErrorIs(t, <-done, ErrStopped)
		assert.True(t, r.w.Stopped())
		assert.False(t, r.w.Await(time.Hour))
		assert.ErrorIs(t, r.send("y", time.Hour)[0], ErrStopped)
		r.strs[0].cancel(errors.New("reset"))
		r.qs[0].Discard()
	})
}

// TestAwaitCaughtUp: Await returns once a queue catches up (its drain
// ends, or it is no longer behind), or when its wait is over.
func TestAwaitCaughtUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 0)
		defer r.w.Interrupt()
		require.NoError(t, r.send("abc", 0)[0])
		start := time.Now()
		assert.False(t, r.w.Await(time.Second))
		assert.Equal(t, time.Second, time.Since(start))
		go func() {
			time.Sleep(time.Second)
			r.strs[0].grant(3)
		}()
		assert.True(t, r.w.Await(time.Hour))
		assert.Equal(t, 2*time.Second, time.Since(start))

		require.NoError(t, r.send(big, 0)[0])
		require.True(t, r.qs[0].Behind())
		go func() {
			time.Sleep(time.Second)
			r.strs[0].grant(len(big))
		}()
		assert.True(t, r.w.Await(time.Hour), "caught up")
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.False(t, r.qs[0].Behind())
	})
}

// TestSharedPayload: the queues of two slow streams, behind, hold one copy of an
// object's payload, after headers of their own; each group and the
// session count every byte it is behind, the shared budget the payload
// once, until the last queue holding it has written it.
func TestSharedPayload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &Shared{Limit: 1 << 20}
		r := newRig(1<<20, time.Minute, 0, 0)
		defer r.w.Interrupt()
		done := r.sess.Init(1<<20, budget)
		defer done()
		payload := []byte(strings.Repeat("p", Window))
		var pl Payload
		pl.Reset(payload)
		until := now() + int64(time.Minute)
		for i, hdr := range []string{"h1", "hdr2"} {
			require.NoError(t, r.w.Send(r.qs[i], append([]byte(hdr), payload...), &pl, false, true, until))
		}
		want := string(payload)
		copy(payload, "reused") // the caller's bytes are its own again
		pl.Reset(nil)
		require.Len(t, r.qs[1].segs, 2)
		assert.Same(t, r.qs[0].segs[1].p, r.qs[1].segs[1].p, "one copy")
		assert.Equal(t, int64(2+Window), r.gs[0].Queued())
		assert.Equal(t, int64(4+Window), r.gs[1].Queued())
		assert.Equal(t, int64(6+2*Window), r.sess.Used())
		assert.Equal(t, int64(2+4+Window), budget.Queued(), "headers, and the payload once")

		r.strs[0].grant(1 << 20)
		synctest.Wait()
		assert.True(t, "h1"+want == r.strs[0].taken(), "h1 and the payload")
		assert.Equal(t, int64(4+Window), budget.Queued(), "the other queue still holds the payload")
		r.strs[1].grant(1 << 20)
		synctest.Wait()
		assert.True(t, "hdr2"+want == r.strs[1].taken(), "hdr2 and the payload")
		assert.Zero(t, budget.Queued())
		assert.Zero(t, r.sess.Used())
	})
}

// TestSharedPayloadDropped: a queue dropped with its stream releases its
// reference to a shared payload, and what it counted. A payload too small
// to share is the queue's own.
func TestSharedPayloadDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &Shared{Limit: 1 << 20}
		r := newRig(1<<20, time.Minute, 0)
		done := r.sess.Init(1<<20, budget)
		defer done()
		payload := []byte(strings.Repeat("p", Window))
		var pl Payload
		pl.Reset(payload)
		require.NoError(t, r.w.Send(r.qs[0], append([]byte("h"), payload...), &pl, false, true, now()))
		assert.True(t, r.qs[0].Behind())
		assert.Equal(t, int64(1+Window), budget.Queued())
		assert.NotNil(t, r.qs[0].segs[1].p, "shared")
		r.strs[0].cancel(errors.New("reset"))
		r.qs[0].Discard()
		synctest.Wait()
		assert.Zero(t, budget.Queued())
		assert.Zero(t, r.sess.Used())
		r.w.Interrupt()

		var q Queue
		q.Init(nil, nil, r.gs[0], &r.w)
		q.behind.Store(true) // what it holds counts
		pl.Reset([]byte("small"))
		require.NoError(t, q.put([]byte("hsmall"), &pl))
		require.Len(t, q.segs, 1)
		assert.Nil(t, q.segs[0].p)
		assert.Equal(t, "hsmall", string(q.segs[0].b))
		assert.Equal(t, int64(6), budget.Queued())
		q.dropAll()
		assert.Zero(t, budget.Queued())
	})
}

// TestArenasRecycledWhileDrainBusy: a drain that never empties its queue
// writes the publisher's small objects byte for byte, though the arenas
// they were copied to go back to the pool as soon as written and come
// back for later objects; once it caught up, no arena is left in use.
func TestArenasRecycledWhileDrainBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 1<<20, 0)
		defer r.w.Interrupt()
		slow, q := r.strs[1], r.qs[1]
		var want strings.Builder
		for i := range 3000 {
			// Sizes 1 to 300, so that arenas fill at odd offsets, each
			// object's bytes its own.
			obj := strings.Repeat(string(rune('a'+i%26)), 1+i*7%300)
			want.WriteString(obj)
			require.Equal(t, []error{nil, nil}, r.send(obj, time.Minute))
			if i%5 == 4 {
				// The drain takes about half, and is never empty.
				slow.grant(len(obj) * 2)
				synctest.Wait()
				q.mu.Lock()
				require.NotZero(t, q.queued, "object %d: the drain stays busy", i)
				q.mu.Unlock()
			}
		}
		slow.grant(1 << 30)
		synctest.Wait()
		// Compared whole, not shown: a megabyte would hide the message.
		assert.True(t, want.String() == r.strs[0].taken(), "the fast stream: every byte as sent")
		assert.True(t, want.String() == slow.taken(), "the slow stream: every byte as sent, in order")
		q.mu.Lock()
		defer q.mu.Unlock()
		assert.Zero(t, len(q.used)-q.usedHead, "no arena left in use")
		assert.Zero(t, q.arenaLeft)
	})
}
