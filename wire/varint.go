package wire

import (
	"io"
	"math/bits"
)

// MaxVarint is the largest value a vi64 can carry (§8.1): all 64 bits.
const MaxVarint = 1<<64 - 1

// VarintLen returns the number of bytes of the minimal vi64 encoding of v.
func VarintLen(v uint64) int {
	switch {
	case v < 1<<7:
		return 1
	case v < 1<<14:
		return 2
	case v < 1<<21:
		return 3
	case v < 1<<28:
		return 4
	case v < 1<<35:
		return 5
	case v < 1<<42:
		return 6
	case v < 1<<49:
		return 7
	case v < 1<<56:
		return 8
	default:
		return 9
	}
}

// AppendVarint appends the minimal vi64 encoding of v (§8.1) to b.
func AppendVarint(b []byte, v uint64) []byte {
	n := VarintLen(v)
	if n == 9 {
		return append(b, 0xff, byte(v>>56), byte(v>>48), byte(v>>40),
			byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	// The first byte holds n-1 leading ones, a zero, then the top value bits.
	prefix := byte(0xff << (9 - n))
	switch n {
	case 1:
		return append(b, byte(v))
	case 2:
		return append(b, prefix|byte(v>>8), byte(v))
	case 3:
		return append(b, prefix|byte(v>>16), byte(v>>8), byte(v))
	case 4:
		return append(b, prefix|byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	case 5:
		return append(b, prefix|byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	case 6:
		return append(b, prefix|byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	case 7:
		return append(b, prefix|byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default: // 8
		return append(b, prefix, byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

// AppendVarintLen appends v as a vi64 of exactly n bytes (1–9). A
// non-minimal encoding is valid (§8.1); this lets a writer reserve room for a
// value it learns later. It reports false, appending nothing, if v does not
// fit in n bytes.
func AppendVarintLen(b []byte, v uint64, n int) ([]byte, bool) {
	if n < 1 || n > 9 || VarintLen(v) > n {
		return b, false
	}
	if n == 9 {
		return append(b, 0xff, byte(v>>56), byte(v>>48), byte(v>>40),
			byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v)), true
	}
	start := len(b)
	for i := n - 1; i >= 0; i-- {
		b = append(b, byte(v>>(8*uint(i))))
	}
	b[start] |= byte(0xff << (9 - n))
	return b, true
}

// varintSize returns the encoded length announced by the first byte of a vi64:
// one plus its number of leading one bits.
func varintSize(first byte) int {
	return bits.LeadingZeros8(^first) + 1
}

// ParseVarint decodes one vi64 from the front of b and returns the value and
// the number of bytes it used. Non-minimal encodings are accepted (§8.1). It
// returns n == 0 when b is too short.
func ParseVarint(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	n = varintSize(b[0])
	if len(b) < n {
		return 0, 0
	}
	if n == 9 {
		for _, c := range b[1:9] {
			v = v<<8 | uint64(c)
		}
		return v, 9
	}
	// Keep the value bits of the first byte: 8-n of them.
	v = uint64(b[0] & (0xff >> n))
	for _, c := range b[1:n] {
		v = v<<8 | uint64(c)
	}
	return v, n
}

// ReadVarint reads one vi64 from r, one byte at a time, so it never reads
// past the integer. An EOF before the first byte is io.EOF; an EOF inside the
// integer is io.ErrUnexpectedEOF.
func ReadVarint(r io.ByteReader) (uint64, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, err
	}
	n := varintSize(first)
	var v uint64
	if n < 9 {
		v = uint64(first & (0xff >> n))
	}
	for i := 1; i < n; i++ {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		v = v<<8 | uint64(c)
	}
	return v, nil
}
