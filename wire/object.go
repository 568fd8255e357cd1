package wire

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// ObjectStatus is the Object Status of an object delivered in a subscription
// (§11.1.2). Objects on a FETCH stream carry no status.
type ObjectStatus uint64

// Object Status values (§11.1.2). Only Normal may carry a payload or
// properties (§11.1.3).
const (
	ObjectNormal     ObjectStatus = 0x0
	ObjectEndOfGroup ObjectStatus = 0x3
	ObjectEndOfTrack ObjectStatus = 0x4
)

func (s ObjectStatus) String() string {
	switch s {
	case ObjectNormal:
		return "NORMAL"
	case ObjectEndOfGroup:
		return "END_OF_GROUP"
	case ObjectEndOfTrack:
		return "END_OF_TRACK"
	}
	return fmt.Sprintf("0x%x", uint64(s))
}

// Valid reports whether s is defined by §11.1.2. Any other value received is
// a PROTOCOL_VIOLATION.
func (s ObjectStatus) Valid() bool {
	return s == ObjectNormal || s == ObjectEndOfGroup || s == ObjectEndOfTrack
}

// DefaultMaxPropertiesLen is the largest Object Properties block a stream
// decoder reads from an io.ByteReader when its MaxPropertiesLen is 0. The
// draft sets no limit; this one bounds the memory a peer can make a stream
// reader hold. Parsing from a slice needs no limit: the slice is the bound.
const DefaultMaxPropertiesLen = 1 << 18

// checkStatus validates a received Object Status against §11.1.2 and
// §11.1.3, given the object's properties block.
func checkStatus(st ObjectStatus, props []byte) error {
	if !st.Valid() {
		return violation("unknown object status %s", st)
	}
	if st != ObjectNormal && len(props) > 0 {
		return violation("object with status %s carries properties", st)
	}
	return nil
}

func ignoreKV(KeyValue) error { return nil }

// checkProperties verifies that an Object Properties block is a well-formed
// sequence of Key-Value-Pairs (§8.3, §11.1.3), without allocating. The block
// is length-delimited, so a pair cut short by its end is malformed, not a
// reason to wait for more bytes: the error does not wrap ErrTruncated.
func checkProperties(b []byte) error {
	err := WalkKV(b, ignoreKV)
	if err != nil && errors.Is(err, ErrTruncated) {
		var pe *ProtocolError
		errors.As(err, &pe)
		return violation("object properties: %s", pe.Reason)
	}
	return err
}

// source reads the fields of a data-plane structure either from a byte
// slice (r == nil), aliasing it, or from an io.ByteReader such as a
// *bufio.Reader over a QUIC stream. One parser serves both, and a source
// lives on the caller's stack, so parsing allocates nothing.
type source struct {
	c cursor
	r io.ByteReader
}

// streamErr maps an error from the reader: an end of stream inside a
// structure is a truncation (PROTOCOL_VIOLATION, §11.3); any other error,
// such as a stream reset, is returned unchanged.
func streamErr(err error, what string) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return truncated(what)
	}
	return err
}

// start reads the first vi64 of a structure. From a reader, an end of stream
// before its first byte is io.EOF: the stream ended cleanly at a boundary.
func (s *source) start(what string) (uint64, error) {
	if s.r == nil {
		return s.c.varint(what)
	}
	v, err := ReadVarint(s.r)
	if err == io.EOF {
		return 0, io.EOF
	}
	if err != nil {
		return 0, streamErr(err, what)
	}
	return v, nil
}

// varint reads a vi64 inside a structure.
func (s *source) varint(what string) (uint64, error) {
	if s.r == nil {
		return s.c.varint(what)
	}
	v, err := ReadVarint(s.r)
	if err != nil {
		return 0, streamErr(err, what)
	}
	return v, nil
}

// uint8 reads one byte inside a structure.
func (s *source) uint8(what string) (uint8, error) {
	if s.r == nil {
		return s.c.uint8(what)
	}
	c, err := s.r.ReadByte()
	if err != nil {
		return 0, streamErr(err, what)
	}
	return c, nil
}

// properties reads an Object Properties structure (§11.1.3) and checks its
// Key-Value-Pairs. From a slice the block aliases the input. From a reader it
// is read into dst's storage, which grows in steps only as bytes arrive, and
// may not exceed max bytes (DefaultMaxPropertiesLen when max <= 0). An empty
// block is returned as nil.
func (s *source) properties(dst []byte, max int) ([]byte, error) {
	n, err := s.varint("object properties length")
	if err != nil {
		return nil, err
	}
	var b []byte
	if s.r == nil {
		if b, err = s.c.bytes(n, "object properties"); err != nil {
			return nil, err
		}
	} else {
		if max <= 0 {
			max = DefaultMaxPropertiesLen
		}
		if n > uint64(max) {
			return nil, &ProtocolError{Code: InternalError,
				Reason: fmt.Sprintf("object properties of %d bytes exceed the local limit of %d", n, max)}
		}
		if b, err = readBytes(s.r, dst[:0], int(n)); err != nil {
			return nil, streamErr(err, "object properties")
		}
	}
	if err := checkProperties(b); err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, nil
	}
	return b, nil
}

// readChunk is how far readBytes grows its buffer ahead of the bytes that
// have arrived, so a peer's length alone cannot make it allocate.
const readChunk = 4096

// readBytes appends exactly n bytes from r to dst. It uses io.Reader's bulk
// Read when r offers it. On error it returns what it has read so far.
func readBytes(r io.ByteReader, dst []byte, n int) ([]byte, error) {
	rr, bulk := r.(io.Reader)
	for len(dst) < n {
		k := n - len(dst)
		if k > readChunk && k > cap(dst)-len(dst) {
			k = readChunk
		}
		start := len(dst)
		dst = slices.Grow(dst, k)[:start+k]
		if bulk {
			if m, err := io.ReadFull(rr, dst[start:]); err != nil {
				return dst[:start+m], err
			}
			continue
		}
		for i := start; i < len(dst); i++ {
			c, err := r.ReadByte()
			if err != nil {
				return dst[:i], err
			}
			dst[i] = c
		}
	}
	return dst, nil
}
