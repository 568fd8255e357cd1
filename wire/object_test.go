package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireCode asserts that err is a *ProtocolError with the given code.
func requireCode(t testing.TB, err error, code SessionErrorCode) {
	t.Helper()
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, code, pe.Code, "error: %v", err)
}

// requireTruncated asserts a PROTOCOL_VIOLATION that means "input ended
// inside a structure".
func requireTruncated(t testing.TB, err error) {
	t.Helper()
	requireCode(t, err, ProtocolViolation)
	assert.ErrorIs(t, err, ErrTruncated)
}

// requireMalformed asserts a PROTOCOL_VIOLATION that more input would not
// cure.
func requireMalformed(t testing.TB, err error) {
	t.Helper()
	requireCode(t, err, ProtocolViolation)
	assert.NotErrorIs(t, err, ErrTruncated)
}

// byteReader offers only io.ByteReader, so decoders take their byte-at-a-time
// path instead of io.Reader's bulk reads.
type byteReader struct{ r *bytes.Reader }

func (b *byteReader) ReadByte() (byte, error) { return b.r.ReadByte() }

// readers returns the reader flavours every reader test runs with: a
// *bufio.Reader, as a session uses, and a bare io.ByteReader.
func readers(b []byte) map[string]func() io.ByteReader {
	return map[string]func() io.ByteReader{
		"bufio":    func() io.ByteReader { return bufio.NewReader(bytes.NewReader(b)) },
		"byteOnly": func() io.ByteReader { return &byteReader{bytes.NewReader(b)} },
	}
}

// readPayload reads n payload bytes the way a session would, growing only as
// bytes arrive; an end of stream inside the payload is a truncation.
func readPayload(r io.ByteReader, n uint64) ([]byte, error) {
	if rr, ok := r.(io.Reader); ok {
		var buf bytes.Buffer
		m, err := io.CopyN(&buf, rr, int64(min(n, 1<<62)))
		if err == io.EOF || (err == nil && uint64(m) < n) {
			return nil, truncated("payload")
		}
		return nilIfEmpty(buf.Bytes()), err
	}
	var out []byte
	for i := uint64(0); i < n; i++ {
		c, err := r.ReadByte()
		if err != nil {
			return nil, streamErr(err, "payload")
		}
		out = append(out, c)
	}
	return out, nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// errReader fails every read with err after serving b.
type errReader struct {
	b   []byte
	err error
}

func (r *errReader) ReadByte() (byte, error) {
	if len(r.b) == 0 {
		return 0, r.err
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func TestObjectStatus(t *testing.T) {
	tests := []struct {
		st    ObjectStatus
		valid bool
		name  string
	}{
		{ObjectNormal, true, "NORMAL"},
		{1, false, "0x1"},
		{2, false, "0x2"},
		{ObjectEndOfGroup, true, "END_OF_GROUP"},
		{ObjectEndOfTrack, true, "END_OF_TRACK"},
		{5, false, "0x5"},
		{0x100, false, "0x100"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.valid, tt.st.Valid(), "%d", tt.st)
		assert.Equal(t, tt.name, tt.st.String())
		err := checkStatus(tt.st, nil)
		if tt.valid {
			assert.NoError(t, err)
		} else {
			requireMalformed(t, err)
		}
	}
}

func TestCheckStatusRejectsPropertiesOnNonNormal(t *testing.T) {
	props := []byte{0x3e, 0x01}
	assert.NoError(t, checkStatus(ObjectNormal, props))
	requireMalformed(t, checkStatus(ObjectEndOfGroup, props))
	requireMalformed(t, checkStatus(ObjectEndOfTrack, props))
	assert.NoError(t, checkStatus(ObjectEndOfTrack, nil))
}

func TestCheckProperties(t *testing.T) {
	tests := []struct {
		name string
		hex  []byte
		ok   bool
	}{
		{"empty", nil, true},
		{"even", []byte{0x3e, 0x02}, true},
		{"odd", []byte{0x0b, 0x02, 0x3c, 0x01}, true},
		{"odd empty", []byte{0x0b, 0x00}, true},
		{"even value cut", []byte{0x3e}, false},
		{"even value cut inside vi64", []byte{0x3e, 0x80}, false},
		{"odd bytes cut", []byte{0x0b, 0x03, 0x00}, false},
		{"odd length over 65535", []byte{0x0b, 0xc1, 0x00, 0x00}, false},
		{"type delta overflows", []byte{0x02, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkProperties(tt.hex)
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			// A cut pair inside a length-delimited block is malformed:
			// waiting for more bytes would not help.
			requireMalformed(t, err)
		})
	}
}

func TestSourcePropertiesLimit(t *testing.T) {
	// Properties Length 1<<20 with a limit of 16: the local limit closes the
	// session with INTERNAL_ERROR before reading or allocating anything.
	in := AppendVarint(nil, 1<<20)
	s := source{r: bufio.NewReader(bytes.NewReader(in))}
	_, err := s.properties(nil, 16)
	requireCode(t, err, InternalError)

	// Under the limit, the block is read into the caller's buffer.
	in = append(AppendVarint(nil, 2), 0x3e, 0x05)
	buf := make([]byte, 0, 8)
	s = source{r: bufio.NewReader(bytes.NewReader(in))}
	p, err := s.properties(buf, 16)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x3e, 0x05}, p)
	assert.Same(t, &buf[:1][0], &p[0], "properties reuse the caller's storage")
}

func TestReadBytesGrowsOnlyAsBytesArrive(t *testing.T) {
	// A peer announces 1 GiB and sends 6000 bytes: readBytes fails, having
	// grown its buffer in proportion to the bytes that arrived, not to the
	// announced length.
	data := bytes.Repeat([]byte{0x3e, 0x01}, 3000)
	for name, mk := range readers(data) {
		t.Run(name, func(t *testing.T) {
			got, err := readBytes(mk(), nil, 1<<30)
			require.Error(t, err)
			requireTruncated(t, streamErr(err, "properties"))
			assert.Equal(t, data, got)
			assert.LessOrEqual(t, cap(got), 2*len(data)+2*readChunk)
		})
		t.Run(name+"/exact", func(t *testing.T) {
			got, err := readBytes(mk(), nil, len(data))
			require.NoError(t, err)
			assert.Equal(t, data, got)
		})
	}
}

func TestStreamErrPassesOtherErrorsThrough(t *testing.T) {
	reset := errors.New("stream reset")
	assert.Same(t, reset, streamErr(reset, "x"))
	requireTruncated(t, streamErr(io.EOF, "x"))
	requireTruncated(t, streamErr(io.ErrUnexpectedEOF, "x"))
	assert.True(t, strings.Contains(streamErr(io.EOF, "object status").Error(), "object status"))
}
