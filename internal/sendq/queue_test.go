package sendq

import (
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

// TestSendFastPathAllocs: writing to a stream that keeps up allocates
// nothing, shared or not.
func TestSendFastPathAllocs(t *testing.T) {
	var w Writer
	w.Init(now)
	defer w.Interrupt()
	var g Group
	var q Queue
	q.Init(nopStream{}, &fakeOwner{}, &g, &w)
	b := make([]byte, 100)
	for _, fanout := range []bool{true, false} {
		allocs := testing.AllocsPerRun(1000, func() {
			if err := w.Send(&q, b, nil, false, fanout, now()+int64(time.Second)); err != nil {
				panic(err)
			}
		})
		assert.Zero(t, allocs, "fanout %v", fanout)
		assert.False(t, q.Active())
	}
}

// TestSlowStreamQueues: of two streams, the one that does not take an
// object within WriteGrace has the rest queued; the other goes on. Once it
// takes bytes again its drain writes the queue in order, then the FIN
// asked for meanwhile, and its bytes are released.
func TestSlowStreamQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 1<<20, 3)
		defer r.w.Interrupt()
		fast, slow := r.strs[0], r.strs[1]
		start := time.Now()
		assert.Equal(t, []error{nil, nil}, r.send("hello", time.Minute))
		assert.Equal(t, WriteGrace, time.Since(start), "the slow stream held the call one grace")
		assert.True(t, r.qs[1].Active())
		assert.Equal(t, int64(2), r.gs[len(r.gs)-1].Queued(), "what it did not take")
		assert.Equal(t, 1, r.owners[1].grace)

		start = time.Now()
		assert.Equal(t, []error{nil, nil}, r.send(" world", time.Minute))
		assert.Zero(t, time.Since(start), "a stream with a backlog queues at once")
		assert.Equal(t, int64(8), r.gs[len(r.gs)-1].Queued())
		assert.Equal(t, uint64(11), r.qs[1].Offset())
		assert.True(t, r.qs[1].FinishAfter(false, 0))
		assert.Equal(t, "hello world", fast.taken())

		slow.grant(100)
		synctest.Wait()
		assert.Equal(t, "hello world", slow.taken())
		assert.False(t, r.qs[1].Active())
		assert.Zero(t, r.gs[len(r.gs)-1].Queued())
		assert.Zero(t, r.sess.Used())
		_, failed, finished, drained := r.owners[1].snapshot()
		assert.Empty(t, failed)
		assert.Equal(t, []string{"fin"}, finished)
		assert.Equal(t, 1, drained)
		assert.False(t, r.qs[0].FinishAfter(false, 0), "nothing queued: the publisher finishes it")
	})
}

// TestStalledStreamCut: a queued stream that takes nothing for a whole
// grace, while the group's other streams take nothing either, is too far
// behind: its drain fails with the reason and drops the queue.
func TestStalledStreamCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, 2*time.Second, 0)
		defer r.w.Interrupt()
		start := time.Now()
		require.NoError(t, r.send("abc", time.Second)[0])
		assert.Equal(t, time.Second, time.Since(start), "one stream: the call's own bound")
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
		assert.True(t, r.qs[0].Broken())
		assert.Zero(t, r.gs[len(r.gs)-1].Queued())
		assert.Equal(t, 1, drained)
	})
}

// TestQueueLimit: bytes that would pass the group's limit are refused as
// too far behind, and not counted.
func TestQueueLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(10, time.Minute, 1<<20, 0)
		require.Equal(t, []error{nil, nil}, r.send("12345", time.Minute))
		errs := r.send(strings.Repeat("x", 6), time.Minute)
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], ErrTooFarBehind)
		assert.Equal(t, int64(5), r.gs[len(r.gs)-1].Queued())
		// The owner resets the stream, which wakes its drain's Write,
		// and discards the queue.
		r.strs[1].cancel(errors.New("reset"))
		r.qs[1].Discard()
		synctest.Wait()
		_, failed, _, _ := r.owners[1].snapshot()
		assert.Len(t, failed, 1, "discarded")
		assert.Zero(t, r.gs[len(r.gs)-1].Queued())
		r.w.Interrupt()
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

// TestFirstWriteMarked: after MarkFirstWrite, the first write that takes
// bytes goes through WriteMarked, the publisher's or, once the stream is
// queued, its drain's; one that took nothing leaves the mark for the next.
func TestFirstWriteMarked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 100)
		defer r.w.Interrupt()
		r.qs[0].MarkFirstWrite()
		assert.Equal(t, []error{nil}, r.send("hello", time.Minute))
		assert.Equal(t, []error{nil}, r.send(" world", time.Minute))
		assert.Equal(t, []int{5}, r.strs[0].markedWrites(), "the publisher's first write")
	})
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 0)
		defer r.w.Interrupt()
		r.qs[0].MarkFirstWrite()
		assert.Equal(t, []error{nil}, r.send("hello", time.Second))
		assert.Equal(t, []error{nil}, r.send(" world", time.Second))
		require.True(t, r.qs[0].Active())
		r.strs[0].grant(3)
		synctest.Wait()
		r.strs[0].grant(100)
		synctest.Wait()
		assert.Equal(t, "hello world", r.strs[0].taken())
		marked := r.strs[0].markedWrites()
		require.NotEmpty(t, marked)
		assert.Equal(t, 11, marked[len(marked)-1], "the first write that took bytes: the drain's, of all it holds")
		for _, n := range marked[:len(marked)-1] {
			assert.Zero(t, n, "a marked write before took nothing")
		}
	})
}

// TestInterruptBlockedSend: Interrupt wakes a Send blocked in a Write,
// which returns ErrStopped, and a wait in Await.
func TestInterruptBlockedSend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(1<<20, time.Minute, 0)
		done := make(chan error)
		go func() { done <- r.send("x", time.Hour)[0] }()
		synctest.Wait()
		assert.True(t, r.w.Writing())
		r.w.Interrupt()
		assert.ErrorIs(t, <-done, ErrStopped)
		assert.True(t, r.w.Stopped())
		assert.False(t, r.w.Await(time.Hour))
		assert.ErrorIs(t, r.send("y", time.Hour)[0], ErrStopped)
	})
}

// TestAwaitCaughtUp: Await returns once a drain ends, or when its wait is
// over.
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
	})
}

// TestSharedPayload: the queues of two slow streams hold one copy of an
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
		payload := []byte(strings.Repeat("p", minShared))
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
		assert.Equal(t, int64(2+minShared), r.gs[0].Queued())
		assert.Equal(t, int64(4+minShared), r.gs[1].Queued())
		assert.Equal(t, int64(6+2*minShared), r.sess.Used())
		assert.Equal(t, int64(2+4+minShared), budget.Queued(), "headers, and the payload once")

		r.strs[0].grant(1000)
		synctest.Wait()
		assert.Equal(t, "h1"+want, r.strs[0].taken())
		assert.Equal(t, int64(4+minShared), budget.Queued(), "the other queue still holds the payload")
		r.strs[1].grant(1000)
		synctest.Wait()
		assert.Equal(t, "hdr2"+want, r.strs[1].taken())
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
		payload := []byte(strings.Repeat("p", minShared))
		var pl Payload
		pl.Reset(payload)
		require.NoError(t, r.w.Send(r.qs[0], append([]byte("h"), payload...), &pl, false, true, now()))
		assert.Equal(t, int64(1+minShared), budget.Queued())
		assert.NotNil(t, r.qs[0].segs[1].p, "shared")
		r.strs[0].cancel(errors.New("reset"))
		r.qs[0].Discard()
		synctest.Wait()
		assert.Zero(t, budget.Queued())
		assert.Zero(t, r.sess.Used())
		r.w.Interrupt()

		var q Queue
		q.Init(nil, nil, r.gs[0], &r.w)
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
