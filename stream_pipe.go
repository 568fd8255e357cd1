package moqt

import (
	"bufio"

	"github.com/moqt-go/moqt/internal/readahead"
	"github.com/moqt-go/moqt/internal/transport"
)

// A data stream whose Track Alias is not known yet is read into memory
// while it waits (internal/readahead), so it keeps consuming connection
// flow control and can never starve the control and request streams that
// will name its alias (C036, §11.3.1). What every such stream holds counts
// against the session's Config.MaxPendingBytes until the subscription's
// reader takes it; a stream whose next bytes would pass it is stopped with
// EXCESSIVE_LOAD (§12.5). Only streams that arrive before their alias get
// a pipe, and its goroutine, until their alias is known or they end.

// newStreamPipe starts reading str ahead, from br, on one of s's
// goroutines.
func newStreamPipe(s *Session, str transport.ReceiveStream, br *bufio.Reader) *readahead.Pipe {
	p := readahead.New(s.ctx, str, br, (*pendingBytes)(&s.routes), s.closeErr)
	s.goroutines.Go(p.Fill)
	return p
}

// pendingBytes is the session's Config.MaxPendingBytes, the budget of its
// read-ahead pipes.
type pendingBytes aliasRoutes

func (b *pendingBytes) Reserve(n int) bool { return (*aliasRoutes)(b).reservePendingBytes(n) }
func (b *pendingBytes) Release(n int)      { (*aliasRoutes)(b).releasePendingBytes(n) }

// signal wakes the receiver of ch, a channel of capacity 1, unless a
// wake-up is pending already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
