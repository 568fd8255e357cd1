package transport

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"time"
)

// pipeStream is one stream of a Pipe. Its state is guarded by p.mu.
type pipeStream struct {
	p      *pipe
	opener int // the end that opened it
	kind   int // bidi or uni
	seen   bool
	// flows[i] carries the bytes end i sends; a unidirectional stream has
	// only flows[opener].
	flows [2]*pipeFlow
	// released is set once the stream no longer counts against the
	// opener's credit.
	released bool
}

// pipeFlow is one direction of a stream.
type pipeFlow struct {
	buf      []byte // in the receiver's window, not yet read
	pending  []byte // taken by Write beyond the window: quic-go's one buffered frame
	written  int64  // offset of the end of pending
	boundary int64  // reliable size for a reset (SetReliableBoundary)
	deadline time.Time

	fin       bool // sender's Close
	reset     bool // sender's CancelWrite, or the reply to STOP_SENDING
	resetCode uint64
	stopped   bool // receiver's CancelRead
	stopCode  uint64
	recvDone  bool // read to the end, reset or stopped: nothing more to read
	sendDone  bool // finished, reset or stopped: nothing more to write

	urgency     int8
	incremental bool

	ctx    context.Context // the send side's, done with sendDone
	cancel context.CancelCauseFunc
}

// newStream makes a stream opened by c. Called with p.mu held.
func (c *PipeConn) newStream(kind int) *pipeStream {
	s := &pipeStream{p: c.p, opener: c.side, kind: kind}
	sides := []int{c.side}
	if kind == bidi {
		sides = append(sides, 1-c.side)
	}
	for _, i := range sides {
		f := &pipeFlow{urgency: UrgencyRequest, incremental: true}
		if kind == uni {
			f.urgency, f.incremental = UrgencyControl, false
		}
		f.ctx, f.cancel = context.WithCancelCause(c.p.ends[i].ctx)
		s.flows[i] = f
	}
	c.unseen[kind] = append(c.unseen[kind], s)
	return s
}

// see makes the stream visible to the receiver's Accept: QUIC opens a
// stream at the peer with its first frame, and every stream of its kind
// with a lower ID with it, which Accept returns first, in ID order.
func (s *pipeStream) see() {
	if s.seen {
		return
	}
	opener := s.p.ends[s.opener]
	list := opener.unseen[s.kind]
	i := slices.Index(list, s)
	if i < 0 {
		s.appear()
		return
	}
	for _, t := range list[:i+1] {
		t.appear()
	}
	clear(list[:i+1])
	opener.unseen[s.kind] = list[i+1:]
}

// appear queues the stream for the peer's Accept.
func (s *pipeStream) appear() {
	s.seen = true
	if peer := s.p.ends[1-s.opener]; peer.ended() == nil {
		peer.incoming[s.kind] = append(peer.incoming[s.kind], s)
	}
}

// discard drops what side's peer has not read of side's flow, but its
// first keep bytes, and what waits to be sent.
func (s *pipeStream) discard(side int, keep int) {
	f := s.flows[side]
	if keep > len(f.buf) {
		// Reliable bytes still waiting to be sent go out with the reset.
		more := min(keep-len(f.buf), len(f.pending))
		f.buf = append(f.buf, f.pending[:more]...)
		s.p.ends[side].unread += more
	}
	f.pending = nil
	if drop := len(f.buf) - keep; drop > 0 {
		f.buf = f.buf[:keep:keep]
		s.p.ends[side].unread -= drop
	}
}

// admit moves waiting bytes of side's flow into the receiver's window as
// far as the stream and connection windows allow. Called with p.mu held.
func (s *pipeStream) admit(side int) bool {
	f, end, cfg := s.flows[side], s.p.ends[side], s.p.cfg
	n := min(cfg.StreamWindow-len(f.buf), cfg.ConnectionWindow-end.unread, len(f.pending))
	if n <= 0 {
		return false
	}
	f.buf = append(f.buf, f.pending[:n]...)
	f.pending = f.pending[n:]
	if len(f.pending) == 0 {
		f.pending = nil
	}
	end.unread += n
	return true
}

// release gives the opener its credit back once the stream has ended at
// the receiver: every direction the receiver reads has nothing more to
// read and, bidirectional, the receiver's own direction is finished.
func (s *pipeStream) release() {
	if s.released || !s.flows[s.opener].recvDone {
		return
	}
	if s.kind == bidi && !s.flows[1-s.opener].sendDone {
		return
	}
	s.released = true
	s.p.ends[s.opener].opened[s.kind]--
	s.p.changed()
}

// admitWaiting admits what waits to be sent from end side, stream by
// stream in the order they started waiting: a read frees window of its
// stream and of the connection. Called with p.mu held.
func (p *pipe) admitWaiting(side int) {
	end := p.ends[side]
	still := end.waiting[:0]
	for _, s := range end.waiting {
		s.admit(side)
		if len(s.flows[side].pending) > 0 {
			still = append(still, s)
		}
	}
	clear(end.waiting[len(still):])
	end.waiting = still
}

// pipeSendStream is side's sending half of s.
type pipeSendStream struct {
	s    *pipeStream
	side int
}

// Write blocks until every byte of b is in the receiver's window (the
// stream's and the connection's) or, as quic-go copies a write that fits
// one packet, in the stream's send buffer (PipeConfig.SendBuffer); it
// returns what went with the error that stopped it.
func (w *pipeSendStream) Write(b []byte) (int, error) {
	p := w.s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	f, end := w.s.flows[w.side], p.ends[w.side]
	n := 0
	for {
		if err := w.failed(); err != nil {
			return n, err
		}
		if len(f.pending) > 0 && w.s.admit(w.side) {
			p.changed()
		}
		if f.fin {
			return n, errors.New("moqt transport: write on closed stream")
		}
		if n == len(b) {
			return n, nil
		}
		room := min(p.cfg.StreamWindow-len(f.buf), p.cfg.ConnectionWindow-end.unread, len(b)-n)
		if len(f.pending) == 0 && room > 0 {
			f.buf = append(f.buf, b[n:n+room]...)
			f.written += int64(room)
			end.unread += room
			n += room
			w.s.see()
			p.changed()
			continue
		}
		if rest := len(b) - n; len(f.pending)+rest <= p.cfg.SendBuffer {
			if len(f.pending) == 0 {
				end.waiting = append(end.waiting, w.s)
			}
			f.pending = append(f.pending, b[n:]...)
			f.written += int64(rest)
			w.s.see()
			p.changed()
			return len(b), nil
		}
		if !f.deadline.IsZero() && !time.Now().Before(f.deadline) {
			return n, os.ErrDeadlineExceeded
		}
		p.wait(context.Background(), f.deadline)
	}
}

// failed returns why the send side can no longer be written: the
// connection's end, this end's reset or the peer's STOP_SENDING.
func (w *pipeSendStream) failed() error {
	f := w.s.flows[w.side]
	if err := w.s.p.ends[w.side].ended(); err != nil {
		return err
	}
	if f.stopped {
		return &StreamError{Code: f.stopCode, Remote: true}
	}
	if f.reset {
		return &StreamError{Code: f.resetCode}
	}
	return nil
}

// Close sends FIN after the data written so far.
func (w *pipeSendStream) Close() error {
	p := w.s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	f := w.s.flows[w.side]
	if p.ends[w.side].ended() != nil || f.fin {
		return nil
	}
	if f.reset || f.stopped {
		return errors.New("moqt transport: close called for canceled stream")
	}
	f.fin = true
	w.finish(nil)
	return nil
}

// CancelWrite resets the stream with code. The receiver loses what it has
// not read (beyond the reliable boundary, where ReliableReset holds); a
// stream already read to its FIN is left alone.
func (w *pipeSendStream) CancelWrite(code uint64) {
	p := w.s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	f := w.s.flows[w.side]
	if p.ends[w.side].ended() != nil || f.reset || f.stopped || f.recvDone {
		return
	}
	f.reset, f.resetCode = true, p.code(code)
	keep := 0
	if p.cfg.ReliableReset {
		unsent := f.written - int64(len(f.buf)+len(f.pending)) // offset of buf's first byte
		keep = int(max(0, min(int64(len(f.buf)+len(f.pending)), f.boundary-unsent)))
	}
	w.s.discard(w.side, keep)
	if keep == 0 {
		f.recvDone = true
	}
	w.finish(&StreamError{Code: f.resetCode})
}

// finish ends the send side and shows the stream to the receiver. Called
// with p.mu held.
func (w *pipeSendStream) finish(cause error) {
	f := w.s.flows[w.side]
	f.sendDone = true
	f.cancel(cause)
	w.s.see()
	w.s.release()
	w.s.p.changed()
}

// SetPriority records the urgency; it schedules nothing.
func (w *pipeSendStream) SetPriority(urgency int8, incremental bool) {
	if w.s.p.cfg.WebTransport {
		return
	}
	w.s.p.mu.Lock()
	defer w.s.p.mu.Unlock()
	f := w.s.flows[w.side]
	f.urgency, f.incremental = min(max(urgency, 0), 7), incremental
}

// Priority reports the urgency and incremental flag last set, for tests.
func (w *pipeSendStream) Priority() (urgency int8, incremental bool) {
	w.s.p.mu.Lock()
	defer w.s.p.mu.Unlock()
	f := w.s.flows[w.side]
	return f.urgency, f.incremental
}

// Context is done once the send side is finished.
func (w *pipeSendStream) Context() context.Context { return w.s.flows[w.side].ctx }

// SetWriteDeadline bounds Write calls, the one blocked now included.
func (w *pipeSendStream) SetWriteDeadline(t time.Time) error {
	w.s.p.mu.Lock()
	defer w.s.p.mu.Unlock()
	w.s.flows[w.side].deadline = t
	w.s.p.changed()
	return nil
}

// WriteMarked writes b and keeps it through a later CancelWrite, where
// ReliableReset holds: a pipe's flow control has no final size to pass.
func (w *pipeSendStream) WriteMarked(b []byte) (int, error) {
	n, err := w.Write(b)
	if n > 0 {
		w.SetReliableBoundary()
	}
	return n, err
}

// WriteReserved is Write: a pipe reserves nothing.
func (w *pipeSendStream) WriteReserved(b []byte) (int, error) { return w.Write(b) }

// SetReliableBoundary keeps the data written so far through a later
// CancelWrite, where ReliableReset holds. A pipe has no final size to
// pass the peer's window: it always marks.
func (w *pipeSendStream) SetReliableBoundary() bool {
	w.s.p.mu.Lock()
	defer w.s.p.mu.Unlock()
	f := w.s.flows[w.side]
	f.boundary = f.written
	return true
}

// pipeReceiveStream is side's receiving half of s.
type pipeReceiveStream struct {
	s    *pipeStream
	side int
}

// Read returns buffered bytes, then io.EOF after a FIN or the sender's
// reset; it waits while there is neither. A Read that takes the last
// bytes before a FIN returns io.EOF with them, as quic-go's does.
func (r *pipeReceiveStream) Read(b []byte) (int, error) {
	p := r.s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	f := r.s.flows[1-r.side]
	for {
		if err := p.ends[r.side].ended(); err != nil {
			return 0, err
		}
		if f.stopped {
			return 0, &StreamError{Code: f.stopCode}
		}
		if len(f.buf) > 0 && len(b) > 0 {
			n := copy(b, f.buf)
			f.buf = f.buf[n:]
			if len(f.buf) == 0 {
				// Read out: let the storage go, as quic-go frees a frame
				// once it is read, so that tests measuring the heap do
				// not count the pipe's.
				f.buf = nil
			}
			p.ends[1-r.side].unread -= n
			p.admitWaiting(1 - r.side)
			p.changed()
			if f.fin && len(f.buf) == 0 && len(f.pending) == 0 {
				// The last bytes come with io.EOF, and the stream stops
				// counting against the peer's credit, as quic-go does.
				f.recvDone = true
				r.s.release()
				return n, io.EOF
			}
			return n, nil
		}
		if f.reset {
			if !f.recvDone {
				f.recvDone = true
				r.s.release()
			}
			return 0, &StreamError{Code: f.resetCode, Remote: true}
		}
		if f.fin && len(f.buf) == 0 && len(f.pending) == 0 {
			if !f.recvDone {
				f.recvDone = true
				r.s.release()
			}
			return 0, io.EOF
		}
		if len(b) == 0 {
			return 0, nil
		}
		p.wait(context.Background(), time.Time{})
	}
}

// CancelRead sends STOP_SENDING with code: the receiver drops what it
// has not read, the sender's writes fail with the code and, as a QUIC
// stack replies, its side is reset.
func (r *pipeReceiveStream) CancelRead(code uint64) {
	p := r.s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	f := r.s.flows[1-r.side]
	if p.ends[r.side].ended() != nil || f.stopped || f.recvDone {
		return
	}
	f.stopped, f.stopCode = true, p.code(code)
	f.recvDone = true
	r.s.discard(1-r.side, 0)
	r.s.see()
	if !f.sendDone {
		f.sendDone = true
		f.cancel(&StreamError{Code: f.stopCode, Remote: true})
	}
	r.s.release()
	p.changed()
}

// pipeBidiStream is a bidirectional stream seen from one end.
type pipeBidiStream struct {
	pipeSendStream
	pipeReceiveStream
}

var (
	_ Stream        = (*pipeBidiStream)(nil)
	_ SendStream    = (*pipeSendStream)(nil)
	_ ReceiveStream = (*pipeReceiveStream)(nil)
)
