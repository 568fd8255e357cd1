package moqt

import (
	"errors"
	"io"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// streamPipe reads a data stream whose Track Alias is not known yet into
// memory while it waits, so the stream keeps consuming connection flow
// control and can never starve the control and request streams that will
// name its alias (C036, §11.3.1). While waiting its bytes count against the
// session's Config.MaxPendingBytes; a stream that would exceed it is
// stopped with EXCESSIVE_LOAD. Once the alias is known the pipe keeps
// filling, up to pipeLimit bytes ahead of the reader.
//
// A pipe costs one goroutine for the rest of its stream's life; only
// streams that arrive before their alias get one.
type streamPipe struct {
	s   *Session
	str transport.ReceiveStream
	src io.Reader

	ready chan struct{} // signalled when bytes or an error arrive
	space chan struct{} // signalled when the reader takes bytes
	quit  chan struct{} // closed when the pipe is abandoned
	once  sync.Once

	mu       sync.Mutex // guards the fields below
	buf      []byte
	err      error // the stream's terminal read error
	bound    bool  // the alias is known
	reserved int   // bytes counted against the session's pending budget
}

// pipeLimit is how far a bound pipe reads ahead of its reader.
const pipeLimit = 256 << 10

// errPipeClosed is returned by Read after the pipe was abandoned.
var errPipeClosed = errors.New("moqt: data stream abandoned")

func newStreamPipe(s *Session, str transport.ReceiveStream, src io.Reader) *streamPipe {
	p := &streamPipe{s: s, str: str, src: src,
		ready: make(chan struct{}, 1), space: make(chan struct{}, 1), quit: make(chan struct{})}
	s.wg.Add(1)
	go p.fill()
	return p
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fill copies the stream into the buffer until it ends or is abandoned.
func (p *streamPipe) fill() {
	defer p.s.wg.Done()
	chunk := make([]byte, 16<<10)
	for {
		p.mu.Lock()
		full := p.bound && len(p.buf) >= pipeLimit
		p.mu.Unlock()
		if full {
			select {
			case <-p.space:
				continue
			case <-p.quit:
				return
			case <-p.s.ctx.Done():
				return
			}
		}
		n, err := p.src.Read(chunk)
		p.mu.Lock()
		if n > 0 && !p.bound {
			if !p.s.reservePendingBytes(n) {
				p.mu.Unlock()
				p.abort(wire.ResetExcessiveLoad)
				return
			}
			p.reserved += n
		}
		p.buf = append(p.buf, chunk[:n]...)
		if err != nil {
			p.err = err
		}
		p.mu.Unlock()
		signal(p.ready)
		if err != nil {
			return
		}
	}
}

// bind marks the alias known: the buffered bytes now belong to the
// subscription, not the session's pending budget.
func (p *streamPipe) bind() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bound = true
	p.s.releasePendingBytes(p.reserved)
	p.reserved = 0
}

// abort abandons the stream with STOP_SENDING code.
func (p *streamPipe) abort(code wire.ResetCode) {
	p.once.Do(func() {
		close(p.quit)
		p.str.CancelRead(uint64(code))
		p.mu.Lock()
		p.s.releasePendingBytes(p.reserved)
		p.reserved = 0
		p.buf = nil
		p.mu.Unlock()
	})
}

// Read reads buffered stream bytes, waiting for more.
func (p *streamPipe) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			if len(p.buf) == 0 {
				p.buf = nil
			}
			p.mu.Unlock()
			signal(p.space)
			return n, nil
		}
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-p.ready:
		case <-p.quit:
			return 0, errPipeClosed
		case <-p.s.ctx.Done():
			return 0, p.s.closeErr(errPipeClosed)
		}
	}
}

// reservePendingBytes counts n bytes of a waiting stream against
// Config.MaxPendingBytes; it reports false if they do not fit.
func (s *Session) reservePendingBytes(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pendingBytes+n > s.cfg.MaxPendingBytes {
		return false
	}
	s.pendingBytes += n
	return true
}

func (s *Session) releasePendingBytes(n int) {
	s.mu.Lock()
	s.pendingBytes -= n
	s.mu.Unlock()
}
