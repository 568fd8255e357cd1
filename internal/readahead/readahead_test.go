package readahead

import (
	"bufio"
	"context"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// pipeStream is a Stream over an io.Pipe, recording its STOP_SENDING.
type pipeStream struct {
	r    *io.PipeReader
	code chan uint64
}

func (s pipeStream) CancelRead(code uint64) {
	s.code <- code
	_ = s.r.CloseWithError(io.ErrClosedPipe)
}

func newPipeStream() (pipeStream, *io.PipeWriter) {
	pr, pw := io.Pipe()
	return pipeStream{r: pr, code: make(chan uint64, 1)}, pw
}

// budget is a Budget of limit bytes.
type budget struct {
	mu          sync.Mutex
	limit, used int
}

func (b *budget) Reserve(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}

func (b *budget) Release(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
}

func (b *budget) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func ended(err error) error { return err }

func waitFilled(t *testing.T, p *Pipe) {
	t.Helper()
	select {
	case <-p.Filled():
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the pipe's reader did not end")
	}
}

// TestAbortReleasesBudget: bytes that arrive while a pipe is being
// abandoned are not charged to the budget, which would otherwise shrink
// for good and end up refusing every early stream with EXCESSIVE_LOAD.
func TestAbortReleasesBudget(t *testing.T) {
	str, pw := newPipeStream()
	b := &budget{limit: 1 << 20}
	p := New(context.Background(), str, bufio.NewReader(str.r), b, ended)
	go p.Fill()
	p.Abort(wire.ResetCancelled) // Fill waits for the stream's first bytes
	go func() {
		_, _ = pw.Write(make([]byte, 100))
		_ = pw.Close()
	}()
	waitFilled(t, p)
	assert.Zero(t, b.held(), "bytes charged after the pipe was abandoned")
	_, err := p.Read(make([]byte, 1))
	assert.ErrorIs(t, err, ErrClosed)
}

// TestReadAheadThenStream: bytes read ahead count against the budget
// until read; once bound, the reader gets them, then the stream itself,
// in order, to its end.
func TestReadAheadThenStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		str, pw := newPipeStream()
		b := &budget{limit: 1 << 20}
		p := New(context.Background(), str, bufio.NewReader(str.r), b, ended)
		go p.Fill()
		_, err := pw.Write([]byte("early"))
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 5, b.held(), "read ahead")
		p.Bind()
		go func() {
			_, _ = pw.Write([]byte(" later"))
			_ = pw.Close()
		}()
		got, err := io.ReadAll(p)
		require.NoError(t, err)
		assert.Equal(t, "early later", string(got))
		assert.Zero(t, b.held())
		waitFilled(t, p)
	})
}

// TestOverBudgetStopped: a stream whose bytes would pass the budget is
// stopped with EXCESSIVE_LOAD and holds nothing.
func TestOverBudgetStopped(t *testing.T) {
	str, pw := newPipeStream()
	b := &budget{limit: 4}
	p := New(context.Background(), str, bufio.NewReader(str.r), b, ended)
	go p.Fill()
	go func() { _, _ = pw.Write([]byte("too many")) }()
	select {
	case code := <-str.code:
		assert.Equal(t, uint64(wire.ResetExcessiveLoad), code)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the stream was not stopped")
	}
	waitFilled(t, p)
	assert.Zero(t, b.held())
	_, err := p.Read(make([]byte, 1))
	assert.ErrorIs(t, err, ErrClosed)
}

// TestReadEndsWithSession: a Read waiting for bytes ends with the
// session's error once its context is done.
func TestReadEndsWithSession(t *testing.T) {
	str, pw := newPipeStream()
	ctx, cancel := context.WithCancel(context.Background())
	p := New(ctx, str, bufio.NewReader(str.r), &budget{limit: 10}, func(error) error { return context.Canceled })
	go p.Fill()
	cancel()
	_, err := p.Read(make([]byte, 1))
	assert.ErrorIs(t, err, context.Canceled)
	_ = pw.Close()
	waitFilled(t, p)
}
