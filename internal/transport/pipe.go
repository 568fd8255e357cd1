package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// PipeConfig shapes the two ends of a Pipe. The zero value takes the
// defaults named on each field; the settings apply to both ends alike.
type PipeConfig struct {
	// StreamWindow bounds the bytes of one stream direction written but not
	// yet read by the receiver; a Write past it blocks until the receiver
	// reads (QUIC stream flow control). Default 512 KiB.
	StreamWindow int
	// SendBuffer is how many bytes beyond the windows a stream takes from
	// a Write that fits them whole, to send once the receiver reads: as
	// quic-go copies a write that fits one packet and returns. Default
	// 1452, quic-go's largest packet; negative for none.
	SendBuffer int
	// ConnectionWindow bounds the unread bytes of all streams in one
	// direction together (QUIC connection flow control). Default four
	// stream windows.
	ConnectionWindow int
	// MaxIncomingStreams and MaxIncomingUniStreams bound the streams of
	// each kind the peer may have open at once: an OpenStreamSync past it
	// waits, an OpenUniStream fails. A stream stops counting once its
	// receiver has read it to the end, taken its reset or stopped it (and,
	// bidirectional, once the receiver's own direction has ended). Default
	// 100 each, as quic-go's.
	MaxIncomingStreams, MaxIncomingUniStreams int
	// MaxDatagramSize is the largest datagram payload SendDatagram takes.
	// Default 1200.
	MaxDatagramSize int
	// DatagramQueue bounds the datagrams received but not yet taken by
	// ReceiveDatagram; newer ones are dropped. Default 32.
	DatagramQueue int
	// DropDatagram, if set, is asked about every datagram sent; true loses
	// it, as the network may. It runs with the pipe locked and must not
	// call it.
	DropDatagram func(b []byte) bool
	// Protocol is what Protocol reports. Default ProtocolDraft21.
	Protocol string
	// WebTransport makes the ends report WebTransport sessions: codes are
	// cut to 32 bits, priorities have no effect and ReliableReset is false.
	WebTransport bool
	// ReliableReset makes the ends report RESET_STREAM_AT (raw QUIC only).
	ReliableReset bool
	// Path, if set, is what each end's Path reports (side 0 is the
	// client's): a test's model of the packets of a QUIC path.
	Path func(side int) PathCounts
}

func (c PipeConfig) withDefaults() PipeConfig {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.StreamWindow, 512<<10)
	def(&c.ConnectionWindow, 4*c.StreamWindow)
	if c.SendBuffer == 0 {
		c.SendBuffer = 1452
	}
	c.SendBuffer = max(c.SendBuffer, 0)
	def(&c.MaxIncomingStreams, 100)
	def(&c.MaxIncomingUniStreams, 100)
	def(&c.MaxDatagramSize, 1200)
	def(&c.DatagramQueue, 32)
	if c.Protocol == "" {
		c.Protocol = ProtocolDraft21
	}
	if c.WebTransport {
		c.ReliableReset = false
	}
	return c
}

// Pipe returns the two ends of an in-memory connection, the first playing
// the client, the second the server. They behave as Conns over quic-go or
// webtransport-go do to a session (flow control, stream credit, resets,
// STOP_SENDING and closes reported with the same error types), without a
// socket, a goroutine or a timer of their own: every wait happens on the
// caller's goroutine. Made inside a testing/synctest bubble, a Pipe waits
// durably, so the bubble's clock moves past the session's timers.
func Pipe(cfg PipeConfig) (client, server *PipeConn) {
	p := &pipe{cfg: cfg.withDefaults(), wake: make(chan struct{})}
	for i := range p.ends {
		c := &PipeConn{p: p, side: i}
		c.ctx, c.cancel = context.WithCancelCause(context.Background())
		p.ends[i] = c
	}
	return p.ends[0], p.ends[1]
}

// pipe is the state both ends share, under one lock.
type pipe struct {
	cfg PipeConfig

	mu   sync.Mutex
	wake chan struct{} // closed and replaced on every change; guarded by mu
	ends [2]*PipeConn
}

// changed wakes every waiter to look again. Called with mu held.
func (p *pipe) changed() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// wait releases mu until the pipe changes, ctx is done or deadline (if
// not zero) passes, and takes it again. The caller looks again.
func (p *pipe) wait(ctx context.Context, deadline time.Time) {
	wake := p.wake
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	p.mu.Unlock()
	select {
	case <-wake:
	case <-ctx.Done():
	case <-expired:
	}
	p.mu.Lock()
}

// code cuts a code to what the transport carries.
func (p *pipe) code(c uint64) uint64 {
	if p.cfg.WebTransport {
		return uint64(wtCode(c))
	}
	return quicCode(c)
}

const (
	bidi = 0
	uni  = 1
)

// PipeConn is one end of a Pipe. It implements Conn.
type PipeConn struct {
	p    *pipe
	side int // index in p.ends

	// ctx is cancelled, with the error every call reports, when the
	// connection ends; the cause never changes once set.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// The fields below are guarded by p.mu.
	incoming  [2][]*pipeStream // opened by the peer, seen, not yet accepted: bidi, uni
	unseen    [2][]*pipeStream // opened by this end, not seen yet, oldest first
	opened    [2]int           // streams of each kind this end opened that hold the peer's credit
	unread    int              // bytes this end wrote into the peer's windows, not yet read
	waiting   []*pipeStream    // streams this end sends on with bytes in their send buffer
	datagrams [][]byte         // received, not yet taken
}

func (c *PipeConn) peer() *PipeConn { return c.p.ends[1-c.side] }

// ended returns the connection's error once it has ended. Called with p.mu
// held: ends are cancelled under it.
func (c *PipeConn) ended() error { return context.Cause(c.ctx) }

// AcceptStream waits for the next bidirectional stream the peer opened.
func (c *PipeConn) AcceptStream(ctx context.Context) (Stream, error) {
	s, err := c.accept(ctx, bidi)
	if err != nil {
		return nil, err
	}
	return &pipeBidiStream{pipeSendStream{s, c.side}, pipeReceiveStream{s, c.side}}, nil
}

// AcceptUniStream waits for the next unidirectional stream the peer opened.
func (c *PipeConn) AcceptUniStream(ctx context.Context) (ReceiveStream, error) {
	s, err := c.accept(ctx, uni)
	if err != nil {
		return nil, err
	}
	return &pipeReceiveStream{s, c.side}, nil
}

// accept takes the oldest stream of kind the peer opened and made seen (by
// writing to it, finishing, resetting or stopping it), as QUIC does.
func (c *PipeConn) accept(ctx context.Context, kind int) (*pipeStream, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for {
		if err := c.ended(); err != nil {
			return nil, err
		}
		if q := c.incoming[kind]; len(q) > 0 {
			s := q[0]
			q[0] = nil
			c.incoming[kind] = q[1:]
			return s, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.p.wait(ctx, time.Time{})
	}
}

// OpenStreamSync opens a bidirectional stream, waiting for stream credit.
func (c *PipeConn) OpenStreamSync(ctx context.Context) (Stream, error) {
	s, err := c.open(ctx, bidi, true)
	if err != nil {
		return nil, err
	}
	return &pipeBidiStream{pipeSendStream{s, c.side}, pipeReceiveStream{s, c.side}}, nil
}

// OpenUniStreamSync opens a unidirectional stream, waiting for stream credit.
func (c *PipeConn) OpenUniStreamSync(ctx context.Context) (SendStream, error) {
	s, err := c.open(ctx, uni, true)
	if err != nil {
		return nil, err
	}
	return &pipeSendStream{s, c.side}, nil
}

// OpenUniStream opens a unidirectional stream if the peer's credit allows.
func (c *PipeConn) OpenUniStream() (SendStream, error) {
	s, err := c.open(context.Background(), uni, false)
	if err != nil {
		return nil, err
	}
	return &pipeSendStream{s, c.side}, nil
}

// errTooManyStreams is what quic-go's OpenUniStream reports, translated.
var errTooManyStreams = errors.New("moqt transport: too many open streams")

func (c *PipeConn) open(ctx context.Context, kind int, wait bool) (*pipeStream, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	limit := c.p.cfg.MaxIncomingStreams
	if kind == uni {
		limit = c.p.cfg.MaxIncomingUniStreams
	}
	for {
		if err := c.ended(); err != nil {
			return nil, err
		}
		if c.opened[kind] < limit {
			c.opened[kind]++
			return c.newStream(kind), nil
		}
		if !wait {
			return nil, errTooManyStreams
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.p.wait(ctx, time.Time{})
	}
}

// SendDatagram hands b to the peer's queue, or drops it where the queue is
// full or DropDatagram says so.
func (c *PipeConn) SendDatagram(b []byte) error {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if err := c.ended(); err != nil {
		return err
	}
	if len(b) > c.p.cfg.MaxDatagramSize {
		return fmt.Errorf("moqt transport: DATAGRAM frame too large (maximum payload %d bytes)", c.p.cfg.MaxDatagramSize)
	}
	if c.p.cfg.DropDatagram != nil && c.p.cfg.DropDatagram(b) {
		return nil
	}
	peer := c.peer()
	if len(peer.datagrams) >= c.p.cfg.DatagramQueue {
		return nil
	}
	peer.datagrams = append(peer.datagrams, append([]byte(nil), b...))
	c.p.changed()
	return nil
}

// ReceiveDatagram waits for the next datagram from the peer.
func (c *PipeConn) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for {
		if err := c.ended(); err != nil {
			return nil, err
		}
		if len(c.datagrams) > 0 {
			b := c.datagrams[0]
			c.datagrams[0] = nil
			c.datagrams = c.datagrams[1:]
			return b, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c.p.wait(ctx, time.Time{})
	}
}

// CloseWithError ends the connection at both ends: this one sees a local
// *CloseError, the peer a remote one with the same code and reason. Every
// blocked call returns it; unread data is discarded, as QUIC does.
func (c *PipeConn) CloseWithError(code uint64, reason string) error {
	c.p.end(c, &CloseError{Code: c.p.code(code), Reason: closeReason(reason)})
	return nil
}

// errPipeLost is under the ConnError that Lose leaves.
var errPipeLost = fmt.Errorf("pipe lost: %w", net.ErrClosed)

// Lose ends the connection at both ends without a close, as an idle
// timeout does: each end sees a *ConnError of kind ConnIdleTimeout.
func (c *PipeConn) Lose() {
	c.p.end(c, &ConnError{Kind: ConnIdleTimeout, Err: errPipeLost})
}

// end ends both sides with err as by, unless they have ended already.
func (p *pipe) end(by *PipeConn, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if by.ended() != nil {
		return
	}
	var local, remote error
	switch e := err.(type) {
	case *CloseError:
		l, r := *e, *e
		r.Remote = true
		local, remote = &l, &r
	case *ConnError:
		local, remote = e, &ConnError{Kind: e.Kind, Err: e.Err}
	}
	by.cancel(local)
	by.peer().cancel(remote)
	for _, c := range p.ends {
		c.incoming = [2][]*pipeStream{}
		c.datagrams = nil
	}
	p.changed()
}

// Context is done once the connection has ended; its cause is the error
// every call then reports.
func (c *PipeConn) Context() context.Context { return c.ctx }

// Protocol is PipeConfig.Protocol.
func (c *PipeConn) Protocol() string { return c.p.cfg.Protocol }

// WebTransport is PipeConfig.WebTransport.
func (c *PipeConn) WebTransport() bool { return c.p.cfg.WebTransport }

// ReliableReset is PipeConfig.ReliableReset, off on WebTransport.
func (c *PipeConn) ReliableReset() bool { return c.p.cfg.ReliableReset }

// Path is PipeConfig.Path's counts for this end, zero without it.
func (c *PipeConn) Path() PathCounts {
	if c.p.cfg.Path == nil {
		return PathCounts{}
	}
	return c.p.cfg.Path(c.side)
}

// LocalAddr is this end's name: "pipe:client" or "pipe:server".
func (c *PipeConn) LocalAddr() net.Addr { return pipeAddr(c.side) }

// RemoteAddr is the peer's name.
func (c *PipeConn) RemoteAddr() net.Addr { return pipeAddr(1 - c.side) }

type pipeAddr int

func (pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string {
	if a == 0 {
		return "pipe:client"
	}
	return "pipe:server"
}

var _ Conn = (*PipeConn)(nil)
