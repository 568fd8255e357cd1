package wire

// cursor parses a byte slice front to back. Every method checks the length
// before slicing, so no peer-supplied length can index past the input or
// cause an allocation larger than the input.
type cursor struct {
	b []byte
}

func (c *cursor) empty() bool { return len(c.b) == 0 }

// varint reads a vi64; what names the field in the error. Callers pass
// constant names: building one on the success path would allocate.
func (c *cursor) varint(what string) (uint64, error) {
	v, n := ParseVarint(c.b)
	if n == 0 {
		return 0, truncated(what)
	}
	c.b = c.b[n:]
	return v, nil
}

// uint8 reads one byte.
func (c *cursor) uint8(what string) (uint8, error) {
	if len(c.b) == 0 {
		return 0, truncated(what)
	}
	v := c.b[0]
	c.b = c.b[1:]
	return v, nil
}

// bytes returns the next n bytes, aliasing the input.
func (c *cursor) bytes(n uint64, what string) ([]byte, error) {
	if n > uint64(len(c.b)) {
		return nil, truncated(what)
	}
	v := c.b[:n:n]
	c.b = c.b[n:]
	return v, nil
}

// lenBytes reads a vi64 length, checks it against max, and returns that many
// bytes, aliasing the input. A length above max is a PROTOCOL_VIOLATION.
func (c *cursor) lenBytes(what string, max uint64) ([]byte, error) {
	n, used := ParseVarint(c.b)
	if used == 0 {
		return nil, truncated(what + " length")
	}
	c.b = c.b[used:]
	if n > max {
		return nil, violation("%s length %d exceeds %d", what, n, max)
	}
	return c.bytes(n, what)
}

// done reports an error if bytes remain in a length-delimited body.
func (c *cursor) done(what string) error {
	if len(c.b) != 0 {
		return violation("%s: %d trailing bytes", what, len(c.b))
	}
	return nil
}

// appendLenBytes appends a vi64 length followed by v.
func appendLenBytes(b, v []byte) []byte {
	b = AppendVarint(b, uint64(len(v)))
	return append(b, v...)
}
