package moqt

import (
	"bufio"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// streamPipe reads a data stream whose Track Alias is not known yet into
// memory while it waits, so the stream keeps consuming connection flow
// control and can never starve the control and request streams that will
// name its alias (C036, §11.3.1). Its buffer grows as bytes arrive, and
// every byte in it counts against the session's Config.MaxPendingBytes
// until the subscription's reader takes it: that budget, shared by all
// pipes, is what bounds their memory. A stream whose next bytes would pass
// it is stopped with EXCESSIVE_LOAD (§12.5).
//
// Once the alias is known the pipe stops reading ahead: the reader drains
// the buffer, then reads the stream itself, as it does any stream whose
// alias was known on arrival.
//
// A pipe costs one goroutine until its alias is known or its stream ends;
// only streams that arrive before their alias get one.
type streamPipe struct {
	s   *Session
	str transport.ReceiveStream
	src *bufio.Reader // the stream; fill's alone until filled is closed

	ready  chan struct{} // signalled when bytes or an error arrive
	quit   chan struct{} // closed when the pipe is abandoned
	filled chan struct{} // closed when fill returns
	once   sync.Once

	mu       sync.Mutex // guards the fields below
	buf      []byte
	err      error // the stream's terminal read error
	bound    bool  // the alias is known
	reserved int   // bytes of buf counted against the session's budget
	aborted  bool  // abort ran: nothing more is charged
}

// errPipeClosed is returned by Read after the pipe was abandoned.
var errPipeClosed = errors.New("moqt: data stream abandoned")

func newStreamPipe(s *Session, str transport.ReceiveStream, src *bufio.Reader) *streamPipe {
	p := &streamPipe{s: s, str: str, src: src,
		ready: make(chan struct{}, 1), quit: make(chan struct{}), filled: make(chan struct{})}
	s.goroutines.Go(p.fill)
	return p
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fill copies the stream into the buffer until its alias is known, it
// ends or it is abandoned. Bytes are charged to the session's budget
// before they are copied, so the budget is never exceeded, not even
// briefly; the only other memory is the stream's bufio.Reader.
func (p *streamPipe) fill() {
	defer close(p.filled)
	defer signal(p.ready)
	for {
		_, err := p.src.Peek(1) // waits for bytes
		n := p.src.Buffered()
		p.mu.Lock()
		if p.aborted {
			// abort released the reservations already; nothing more
			// may be charged.
			p.mu.Unlock()
			return
		}
		if p.bound && n > 0 {
			// Left in src for the reader, which takes the stream over:
			// a bound stream is not stopped for the budget.
			p.mu.Unlock()
			return
		}
		if n > 0 {
			if !p.s.routes.reservePendingBytes(n) {
				p.mu.Unlock()
				p.abort(wire.ResetExcessiveLoad)
				return
			}
			p.reserved += n
			// Copied from src's buffer: no I/O under the lock.
			start := len(p.buf)
			p.buf = slices.Grow(p.buf, n)[:start+n]
			if k, rerr := io.ReadFull(p.src, p.buf[start:]); rerr != nil {
				p.buf = p.buf[:start+k]
				p.reserved -= n - k
				p.s.routes.releasePendingBytes(n - k)
				err = rerr
			}
		}
		if err != nil {
			p.err = err
		}
		done := p.err != nil || p.bound
		p.mu.Unlock()
		signal(p.ready)
		if done {
			return
		}
		select {
		case <-p.quit:
			return
		default:
		}
	}
}

// bind marks the alias known: the pipe stops reading ahead.
func (p *streamPipe) bind() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bound = true
}

// abort abandons the stream with STOP_SENDING code.
func (p *streamPipe) abort(code wire.ResetCode) {
	p.once.Do(func() {
		close(p.quit)
		p.str.CancelRead(uint64(code))
		p.mu.Lock()
		p.aborted = true
		p.s.routes.releasePendingBytes(p.reserved)
		p.reserved = 0
		p.buf = nil
		p.mu.Unlock()
	})
}

// Read reads the buffered bytes, then, once fill has returned, the stream.
func (p *streamPipe) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			if len(p.buf) == 0 {
				p.buf = nil
			}
			p.reserved -= n
			p.s.routes.releasePendingBytes(n)
			p.mu.Unlock()
			return n, nil
		}
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-p.quit:
			return 0, errPipeClosed
		default:
		}
		select {
		case <-p.filled:
			// Fill has handed the stream over (or was abandoned,
			// which the next pass reports).
			select {
			case <-p.quit:
				return 0, errPipeClosed
			default:
			}
			p.mu.Lock()
			empty := len(p.buf) == 0 && p.err == nil
			p.mu.Unlock()
			if empty {
				return p.src.Read(b)
			}
		case <-p.ready:
		case <-p.quit:
			return 0, errPipeClosed
		case <-p.s.ctx.Done():
			return 0, p.s.closeErr(errPipeClosed)
		}
	}
}
