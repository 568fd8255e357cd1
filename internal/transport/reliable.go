package transport

import "sync/atomic"

// maxMarked bounds the bytes WriteMarked asks flow control for at once:
// enough for a SUBGROUP_HEADER and a first object of ordinary size,
// without reserving a large object's worth of credit in one piece.
const maxMarked = 16 << 10

// A boundary over bytes a quic-go (v0.64) Write buffered without
// flow-control credit (its nextFrame) goes into a later reset's final
// size: over a connection or stream whose window is full, the peer closes
// the connection with FLOW_CONTROL_ERROR (RFC 9000 §4.5). So a boundary
// may only be set where every byte written is sent or reserved against
// flow control (quic-go's TryWriteAll). WriteMarked reserves the bytes it
// marks; WriteReserved ends with its last bytes reserved, where flow
// control allows (reservation); a plain Write may leave bytes unreserved.
// SetReliableBoundary refuses to mark unless the last write reserved all.
// WriteReserved costs a second quic-go call, and a reserved frame makes
// the next Write wait for it to be sent, so the writer uses it only for
// its last write before a likely cut (sendq.Queue.ReserveLast). This file
// is that rule; wt_quic.go reaches the QUIC stream under a WebTransport
// one.

// quicWriter is the part of a quic-go send stream WriteMarked, and a
// WebTransport stream's SetPriority, use.
type quicWriter interface {
	reliableMarker
	Write(b []byte) (int, error)
	TryWriteAll(b []byte) error
	SetPriority(urgency int8, incremental bool)
}

// reserveRun bounds the bytes successive writes add to quic-go's reserved
// frame before one waits for it to be sent: within quic-go's pooled frame
// buffer (1452 bytes), as a plain Write's buffering is; past it quic-go
// copies a reserved frame whole each time it grows. A Write waits until a
// reserved frame is sent, as it waits for a full one.
const reserveRun = 1400

// reservation tracks whether every byte written to a send stream is sent
// or reserved against flow control, so that a reliable boundary over them
// stays within the peer's windows. Writes are the stream writer's, one at
// a time; SetReliableBoundary may come from another goroutine after them.
type reservation struct {
	unreserved atomic.Bool
	run        int // bytes reserved since the last plain Write
}

// plain writes b through write, which may leave its last bytes
// unreserved.
func (r *reservation) plain(write func([]byte) (int, error), b []byte) (int, error) {
	n, err := write(b)
	if len(b) > 0 {
		r.run = 0
		r.unreserved.Store(true)
	}
	return n, err
}

// write writes b to u, through write (u's own Write, or webtransport-go's
// over u), its last bytes reserved with TryWriteAll where flow control
// takes them at once; when it does not, they are written plainly, and
// the stream is unreserved until a later write reserves them.
func (r *reservation) write(u quicWriter, write func([]byte) (int, error), b []byte) (int, error) {
	if len(b) == 0 {
		return write(b)
	}
	n := 0
	if len(b) > 1 && len(b) > reserveRun-r.run {
		// All but the last byte plainly: quic-go takes them as it sends,
		// leaving at most a packet unsent, which the last byte's
		// reservation then covers.
		k := len(b) - 1
		m, err := write(b[:k])
		r.run = 0
		if err != nil {
			r.unreserved.Store(true)
			return m, err
		}
		n, b = k, b[k:]
	}
	if u.TryWriteAll(b) == nil {
		r.run += len(b)
		r.unreserved.Store(false)
		return n + len(b), nil
	}
	// Flow control cannot take b at once, or the stream failed: write
	// reports the error in the connection's terms.
	m, err := write(b)
	r.run = 0
	r.unreserved.Store(true)
	return n + m, err
}

// mark sets u's reliable boundary where the bytes written are all sent or
// reserved, and reports whether it did.
func (r *reservation) mark(u quicWriter) bool {
	if r.unreserved.Load() {
		return false
	}
	u.SetReliableBoundary()
	return true
}

// writeMarked is WriteMarked on a quic-go stream: b's first bytes
// reserved and marked, and the rest written through r, or b written
// through r, unmarked, when quic-go cannot reserve them at once.
func (r *reservation) writeMarked(u quicWriter, write func([]byte) (int, error), b []byte) (int, error) {
	k := min(len(b), maxMarked)
	if err := u.TryWriteAll(b[:k]); err != nil {
		return r.write(u, write, b) // no credit at once, or the stream's error, which write reports
	}
	u.SetReliableBoundary()
	r.run = reserveRun // the reserved frame may be large: the next write waits for it
	r.unreserved.Store(false)
	if k == len(b) {
		return k, nil
	}
	n, err := r.write(u, write, b[k:])
	return k + n, err
}

func (s *quicSendStream) Write(b []byte) (int, error) {
	n, err := s.r.plain(s.s.Write, b)
	return n, fromQUIC(err)
}

func (s *quicSendStream) WriteReserved(b []byte) (int, error) {
	n, err := s.r.write(s.s, s.s.Write, b)
	return n, fromQUIC(err)
}

func (s *quicSendStream) WriteMarked(b []byte) (int, error) {
	n, err := s.r.writeMarked(s.s, s.s.Write, b)
	return n, fromQUIC(err)
}

// SetReliableBoundary marks what was written as reliable, where all of it
// is sent or reserved (reservation).
func (s *quicSendStream) SetReliableBoundary() bool { return s.r.mark(s.s) }

// A request stream (bidirectional) is never cut with a reliable size: its
// writes are plain, and it marks nothing.

func (s quicStream) WriteMarked(b []byte) (int, error)   { return s.Write(b) }
func (s quicStream) WriteReserved(b []byte) (int, error) { return s.Write(b) }
func (s quicStream) SetReliableBoundary() bool           { return false }
