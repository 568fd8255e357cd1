// Package readahead reads a data stream into memory while it waits for
// what names it, so the stream keeps consuming connection flow control
// and can never starve the streams that will name it (for MoQT, C036,
// §11.3.1: a subgroup stream whose Track Alias is not known yet).
//
// A Pipe's buffer grows as bytes arrive, and every byte in it counts
// against a Budget, shared by all pipes, until the reader takes it: the
// budget is what bounds their memory. A stream whose next bytes would pass
// it is stopped with EXCESSIVE_LOAD (§12.5).
//
// Once bound (Bind: the stream's owner is known) the pipe stops reading
// ahead: the reader drains the buffer, then reads the stream itself.
//
// A pipe costs one goroutine (Fill) until it is bound or its stream ends.
package readahead

import (
	"bufio"
	"context"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// Stream is the stream a Pipe reads: its bytes come through the
// bufio.Reader given with it; CancelRead stops it.
type Stream interface {
	CancelRead(code uint64)
}

// Budget bounds the bytes all pipes hold. Reserve counts n more bytes,
// or reports false if they do not fit; Release uncounts them.
type Budget interface {
	Reserve(n int) bool
	Release(n int)
}

// ErrClosed is returned by Read after the pipe was abandoned.
var ErrClosed = errors.New("moqt: data stream abandoned")

// Pipe reads a stream ahead into memory until it is bound.
type Pipe struct {
	str    Stream
	src    *bufio.Reader // the stream; Fill's alone until filled is closed
	budget Budget
	ctx    context.Context   // the session's: Read ends with it
	ended  func(error) error // Read's error once ctx is done, given ErrClosed

	ready  chan struct{} // signalled when bytes or an error arrive
	quit   chan struct{} // closed when the pipe is abandoned
	filled chan struct{} // closed when Fill returns
	once   sync.Once

	mu       sync.Mutex // guards the fields below
	buf      []byte
	err      error // the stream's terminal read error
	bound    bool  // Bind was called
	reserved int   // bytes of buf counted against the budget
	aborted  bool  // Abort ran: nothing more is charged
}

// New returns a pipe reading str's bytes from src, charging them to
// budget. Its Read ends once ctx (the session's) is done, with
// ended(ErrClosed). The caller runs Fill on a goroutine of its own.
func New(ctx context.Context, str Stream, src *bufio.Reader, budget Budget, ended func(error) error) *Pipe {
	return &Pipe{str: str, src: src, budget: budget, ctx: ctx, ended: ended,
		ready: make(chan struct{}, 1), quit: make(chan struct{}), filled: make(chan struct{})}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Fill copies the stream into the buffer until the pipe is bound, the
// stream ends or the pipe is abandoned. Bytes are charged to the budget
// before they are copied, so the budget is never exceeded, not even
// briefly; the only other memory is the stream's bufio.Reader.
func (p *Pipe) Fill() {
	defer close(p.filled)
	defer signal(p.ready)
	for {
		_, err := p.src.Peek(1) // waits for bytes
		n := p.src.Buffered()
		p.mu.Lock()
		if p.aborted {
			// Abort released the reservations already; nothing more
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
			if !p.budget.Reserve(n) {
				p.mu.Unlock()
				p.Abort(wire.ResetExcessiveLoad)
				return
			}
			p.reserved += n
			// Copied from src's buffer: no I/O under the lock.
			start := len(p.buf)
			p.buf = slices.Grow(p.buf, n)[:start+n]
			if k, rerr := io.ReadFull(p.src, p.buf[start:]); rerr != nil {
				p.buf = p.buf[:start+k]
				p.reserved -= n - k
				p.budget.Release(n - k)
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

// Bind marks the stream's owner known: the pipe stops reading ahead.
func (p *Pipe) Bind() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bound = true
}

// Abort abandons the stream with STOP_SENDING code and releases what the
// pipe holds.
func (p *Pipe) Abort(code wire.ResetCode) {
	p.once.Do(func() {
		// Marked before the stream is stopped: the Fill that the stop
		// wakes then finds the pipe abandoned, not a failed stream.
		p.mu.Lock()
		p.aborted = true
		p.budget.Release(p.reserved)
		p.reserved = 0
		p.buf = nil
		p.mu.Unlock()
		close(p.quit)
		p.str.CancelRead(uint64(code))
	})
}

// Filled is closed once Fill has returned.
func (p *Pipe) Filled() <-chan struct{} { return p.filled }

// Read reads the buffered bytes, then, once Fill has returned, the stream.
func (p *Pipe) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if p.aborted {
			p.mu.Unlock()
			return 0, ErrClosed
		}
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			if len(p.buf) == 0 {
				p.buf = nil
			}
			p.reserved -= n
			p.budget.Release(n)
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
			return 0, ErrClosed
		default:
		}
		select {
		case <-p.filled:
			// Fill has handed the stream over (or was abandoned,
			// which the next pass reports).
			select {
			case <-p.quit:
				return 0, ErrClosed
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
			return 0, ErrClosed
		case <-p.ctx.Done():
			return 0, p.ended(ErrClosed)
		}
	}
}
