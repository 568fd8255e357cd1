package transport

import (
	"errors"

	"github.com/quic-go/quic-go"
)

// maxMarked bounds the bytes WriteMarked asks flow control for at once:
// enough for a SUBGROUP_HEADER and a first object of ordinary size,
// without reserving a large object's worth of credit in one piece.
const maxMarked = 16 << 10

// A boundary over bytes a quic-go (v0.64) Write buffered without
// flow-control credit (its nextFrame) goes into a later reset's final
// size: over a connection whose window is full, the peer closes the
// connection with FLOW_CONTROL_ERROR (RFC 9000 §4.5). WriteMarked
// therefore marks only bytes quic-go reserved against flow control (its
// TryWriteAll), and when it cannot reserve them writes without a mark.
// This file is that rule; wt_quic.go reaches the QUIC stream under a
// WebTransport one.

// quicWriter is the part of a quic-go send stream WriteMarked, and a
// WebTransport stream's SetPriority, use.
type quicWriter interface {
	reliableMarker
	Write(b []byte) (int, error)
	TryWriteAll(b []byte) error
	SetPriority(urgency int8, incremental bool)
}

// writeMarked is WriteMarked on a quic-go stream: b's first bytes
// reserved and marked, or b written unmarked when quic-go cannot reserve
// them at once. The errors are quic-go's.
func writeMarked(s quicWriter, b []byte) (int, error) {
	k := min(len(b), maxMarked)
	err := s.TryWriteAll(b[:k])
	if errors.Is(err, quic.ErrWouldBlock) {
		return s.Write(b)
	}
	if err != nil {
		return 0, err
	}
	s.SetReliableBoundary()
	if k == len(b) {
		return k, nil
	}
	n, err := s.Write(b[k:])
	return k + n, err
}

func (s quicStream) WriteMarked(b []byte) (int, error) {
	n, err := writeMarked(s.s, b)
	return n, fromQUIC(err)
}

func (s quicSendStream) WriteMarked(b []byte) (int, error) {
	n, err := writeMarked(s.s, b)
	return n, fromQUIC(err)
}
