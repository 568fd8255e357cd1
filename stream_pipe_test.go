package moqt

import (
	"bufio"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// pipeStream is a ReceiveStream over an io.Pipe.
type pipeStream struct{ *io.PipeReader }

func (pipeStream) CancelRead(uint64) {}

// TestStreamPipeAbortReleasesBudget: bytes that arrive while an early
// stream's pipe is being abandoned are not charged to the session's
// budget for early streams, which would otherwise shrink for good and
// end up refusing every early stream with EXCESSIVE_LOAD.
func TestStreamPipeAbortReleasesBudget(t *testing.T) {
	s := &Session{cfg: (&Config{}).withDefaults()}
	s.routes = newAliasRoutes(s.cfg)
	pr, pw := io.Pipe()
	p := newStreamPipe(s, pipeStream{pr}, bufio.NewReader(pr))
	p.abort(wire.ResetCancelled) // fill waits for the stream's first bytes
	go func() {
		_, _ = pw.Write(make([]byte, 100))
		_ = pw.Close()
	}()
	select {
	case <-p.filled:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the pipe's reader did not end")
	}
	s.goroutines.Wait()
	s.routes.mu.Lock()
	defer s.routes.mu.Unlock()
	assert.Zero(t, s.routes.pendingBytes, "bytes charged after the pipe was abandoned")
}
