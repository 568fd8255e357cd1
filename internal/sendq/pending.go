package sendq

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
)

// Pending is a data stream still waiting for the peer's stream credit. A
// subscriber that does not read its streams returns that credit late or
// never, and a publisher serving others through the same Writer must not
// wait for it: the stream opens in the background, and until it has, a
// Write waits for it only until its deadline, as a Write waits for flow
// control, so a fan-out write moves on and the bytes go to the stream's
// Queue. Everything else done to the stream meanwhile is remembered and
// applied once it opens.
//
// Cancelled before it opens, the stream is abandoned: it never exists, so
// its owner does not count it.
type Pending struct {
	ready   chan struct{}      // closed once the open has ended, either way
	settled chan struct{}      // closed once the stream is counted or not for good
	abandon context.CancelFunc // stops the open
	ctx     context.Context    // see Context
	done    context.CancelCauseFunc
	// forget is told that a stream finished before it opened is done;
	// uncount that it was abandoned and never existed.
	forget, uncount func(transport.SendStream)

	mu       sync.Mutex
	str      transport.SendStream // once open
	err      error                // why it will never open
	deadline time.Time
	kick     chan struct{} // closed when the deadline changes
	prio     bool          // SetPriority was called:
	urgency  int8          // its arguments
	incr     bool
	closed   bool // Close was called: FIN once open
	reset    bool // CancelWrite was called before the stream opened
	code     uint64
}

// NewPending returns a stream whose open, within ctx, abandon stops. The
// caller opens it and passes the outcome to Opened. forget is told that a
// stream finished before it opened is done (see FinishWhenOpen), uncount
// that it was abandoned before it opened.
func NewPending(ctx context.Context, abandon context.CancelFunc, forget, uncount func(transport.SendStream)) *Pending {
	p := &Pending{ready: make(chan struct{}), settled: make(chan struct{}), kick: make(chan struct{}),
		abandon: abandon, forget: forget, uncount: uncount}
	p.ctx, p.done = context.WithCancelCause(ctx)
	return p
}

// Opened ends the wait: str is the stream, or err why there is none.
func (p *Pending) Opened(str transport.SendStream, err error) {
	if p.open(str, err) {
		// Finished before it opened: it is done now (FinishWhenOpen).
		p.forget(p)
	}
}

// open applies the open's outcome; it reports whether the stream opened
// with its FIN already asked for.
func (p *Pending) open(str transport.SendStream, err error) (finished bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer close(p.ready)
	if !p.reset {
		defer close(p.settled) // else the CancelWrite that abandons it settles it
	}
	switch {
	case str != nil && p.reset:
		// It opened as it was being abandoned: it exists, so it is
		// counted, and reset.
		p.str = str
		str.CancelWrite(p.code)
		return false
	case err != nil:
		if p.err == nil {
			p.err = err
			p.done(err)
		}
		return false
	}
	p.str = str
	if p.prio {
		str.SetPriority(p.urgency, p.incr)
	}
	_ = str.SetWriteDeadline(p.deadline)
	if p.closed {
		_ = str.Close()
	}
	context.AfterFunc(str.Context(), func() { p.done(context.Cause(str.Context())) })
	return p.closed
}

// FinishWhenOpen asks for the FIN of a stream that has not opened yet, and
// reports whether it did: the stream stays among its owner's streams until
// it opens (Opened forgets it then), so that the owner waits for it or
// abandons it rather than count a stream that may open after it, or never.
// It reports false once the stream is open, or will never be: the caller
// finishes it as any stream.
func (p *Pending) FinishWhenOpen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.str != nil || p.err != nil {
		return false
	}
	p.closed = true
	return true
}

// Write waits for the stream within the write deadline, then writes.
func (p *Pending) Write(b []byte) (int, error) {
	str, err := p.await()
	if err != nil {
		return 0, err
	}
	return str.Write(b)
}

// WriteMarked is Write with the stream's WriteMarked.
func (p *Pending) WriteMarked(b []byte) (int, error) {
	str, err := p.await()
	if err != nil {
		return 0, err
	}
	return str.WriteMarked(b)
}

// WriteReserved is Write with the stream's WriteReserved.
func (p *Pending) WriteReserved(b []byte) (int, error) {
	str, err := p.await()
	if err != nil {
		return 0, err
	}
	return str.WriteReserved(b)
}

// await waits for the stream within the write deadline.
func (p *Pending) await() (transport.SendStream, error) {
	for {
		p.mu.Lock()
		str, err, deadline, kick := p.str, p.err, p.deadline, p.kick
		p.mu.Unlock()
		switch {
		case str != nil:
			return str, nil
		case err != nil:
			return nil, err
		}
		var expired <-chan time.Time
		var t *time.Timer
		if !deadline.IsZero() {
			wait := time.Until(deadline)
			if wait <= 0 {
				return nil, os.ErrDeadlineExceeded
			}
			t = time.NewTimer(wait)
			expired = t.C
		}
		select {
		case <-p.ready:
		case <-kick:
		case <-expired:
			return nil, os.ErrDeadlineExceeded
		}
		if t != nil {
			t.Stop()
		}
	}
}

// Close sends FIN after the data written, once the stream is open.
func (p *Pending) Close() error {
	p.mu.Lock()
	if str := p.str; str != nil {
		p.mu.Unlock()
		return str.Close()
	}
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	p.closed = true
	return nil
}

// CancelWrite resets the stream, or abandons it if it has not opened yet.
// It returns once the owner's stream count is settled, whichever call
// abandoned it: a stream that never opened is not counted. (A second
// cancel used to return at once, so a count right after it could include
// a stream that the first was still abandoning.)
func (p *Pending) CancelWrite(code uint64) {
	p.mu.Lock()
	if str := p.str; str != nil {
		p.mu.Unlock()
		str.CancelWrite(code)
		return
	}
	first := p.err == nil && !p.reset
	if first {
		p.reset, p.code = true, code
		p.err = &transport.StreamError{Code: code}
		p.done(p.err)
	}
	p.mu.Unlock()
	if !first {
		<-p.settled
		return
	}
	p.abandon()
	<-p.ready
	p.mu.Lock()
	opened := p.str != nil
	p.mu.Unlock()
	if !opened {
		p.uncount(p)
	}
	close(p.settled)
}

// SetReliableBoundary marks what was written as reliable, as the stream
// does. Nothing is written before the stream opens, so there is nothing
// to mark before.
func (p *Pending) SetReliableBoundary() bool {
	p.mu.Lock()
	str := p.str
	p.mu.Unlock()
	return str == nil || str.SetReliableBoundary()
}

// SetPriority applies now or once the stream is open.
func (p *Pending) SetPriority(urgency int8, incremental bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.str != nil {
		p.str.SetPriority(urgency, incremental)
		return
	}
	p.prio, p.urgency, p.incr = true, urgency, incremental
}

// Context is done when the stream is finished, as an open stream's is, or
// will never open.
func (p *Pending) Context() context.Context { return p.ctx }

// SetWriteDeadline bounds Writes, including one waiting for the stream.
func (p *Pending) SetWriteDeadline(t time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadline = t
	if p.str != nil {
		return p.str.SetWriteDeadline(t)
	}
	close(p.kick)
	p.kick = make(chan struct{})
	return nil
}
