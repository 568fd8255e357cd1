package sendq

import (
	"context"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
)

// openStream is a transport.SendStream that records what is done to it.
type openStream struct {
	transport.SendStream
	ctx context.Context

	mu       sync.Mutex
	got      []byte
	closed   bool
	reset    uint64
	urgency  int8
	deadline time.Time
}

func (s *openStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, b...)
	return len(b), nil
}

func (s *openStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

func (s *openStream) CancelWrite(code uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset = code
}

func (s *openStream) SetPriority(u int8, _ bool) { s.urgency = u }

func (s *openStream) SetWriteDeadline(t time.Time) error {
	s.deadline = t
	return nil
}

func (s *openStream) Context() context.Context { return s.ctx }

// pendingRig is a Pending and what its owner was told.
type pendingRig struct {
	p                *Pending
	forgot, uncounts int
}

func newPendingRig() *pendingRig {
	r := &pendingRig{}
	r.p = NewPending(context.Background(), func() {},
		func(transport.SendStream) { r.forgot++ }, func(transport.SendStream) { r.uncounts++ })
	return r
}

// TestPendingAppliesOnOpen: what is asked of a stream before it opens is
// applied once it does; a Write waits for it within its deadline.
func TestPendingAppliesOnOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPendingRig()
		p := r.p
		p.SetPriority(3, false)
		require.NoError(t, p.SetWriteDeadline(time.Now().Add(time.Second)))
		start := time.Now()
		_, err := p.Write([]byte("x"))
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		require.NoError(t, p.SetWriteDeadline(time.Time{}))
		wrote := make(chan error)
		go func() {
			_, err := p.Write([]byte("abc"))
			wrote <- err
		}()
		assert.True(t, p.FinishWhenOpen())
		str := &openStream{ctx: context.Background()}
		time.Sleep(time.Second)
		p.Opened(str, nil)
		require.NoError(t, <-wrote)
		assert.Equal(t, "abc", string(str.got))
		assert.True(t, str.closed, "the FIN asked for before it opened")
		assert.Equal(t, int8(3), str.urgency)
		assert.Equal(t, 1, r.forgot, "finished before it opened: done once open")
		assert.False(t, p.FinishWhenOpen(), "open: finished as any stream")
	})
}

// TestPendingAbandoned: cancelled before it opens, the stream is
// abandoned and uncounted once; every cancel returns once that is
// settled; an open that fails makes Writes fail.
func TestPendingAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newPendingRig()
		p := r.p
		second := make(chan struct{})
		go func() {
			p.CancelWrite(5)
			close(second)
		}()
		go p.CancelWrite(5)
		synctest.Wait()
		p.Opened(nil, context.Canceled) // the abandoned open ends
		<-second
		synctest.Wait()
		assert.Equal(t, 1, r.uncounts)
		_, err := p.Write([]byte("x"))
		var se *transport.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, uint64(5), se.Code)
		assert.Error(t, p.Context().Err())

		// An open that raced the abandon: the stream exists, and is reset.
		r = newPendingRig()
		go r.p.CancelWrite(7)
		synctest.Wait()
		str := &openStream{ctx: context.Background()}
		r.p.Opened(str, nil)
		synctest.Wait()
		assert.Equal(t, uint64(7), str.reset)
		assert.Zero(t, r.uncounts, "it opened: counted")
	})
}
