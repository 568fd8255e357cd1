package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVarintSpecExamples decodes every example of §8.1 Table 4 and the
// zero encodings named in the text.
func TestVarintSpecExamples(t *testing.T) {
	vecs := loadVectors(t, "varint.txt")
	want := map[string]uint64{
		"one-byte-37":        37,
		"two-byte-37":        37,
		"two-byte-15293":     15293,
		"four-byte":          226442877,
		"six-byte":           2893212287960,
		"seven-byte":         151288809941952,
		"eight-byte":         70423237261249041,
		"nine-byte-max":      18446744073709551615,
		"zero-one-byte":      0,
		"zero-two-byte":      0,
		"zero-three-byte":    0,
		"zero-nine-byte":     0,
		"five-byte-boundary": 1 << 28,
	}
	require.Len(t, vecs, len(want))
	for name, v := range want {
		vec, ok := vecs[name]
		require.True(t, ok, name)
		t.Run(name, func(t *testing.T) {
			got, n := ParseVarint(vec.Bytes)
			require.Equal(t, len(vec.Bytes), n)
			assert.Equal(t, v, got)

			r, err := ReadVarint(bytes.NewReader(vec.Bytes))
			require.NoError(t, err)
			assert.Equal(t, v, r)

			// Re-encoding at the vector's own length reproduces it exactly.
			enc, ok := AppendVarintLen(nil, v, len(vec.Bytes))
			require.True(t, ok)
			assert.Equal(t, hex.EncodeToString(vec.Bytes), hex.EncodeToString(enc))

			for i := range len(vec.Bytes) {
				_, n := ParseVarint(vec.Bytes[:i])
				assert.Zero(t, n, "prefix of %d bytes decoded", i)
			}
		})
	}
}

func TestVarintBoundaries(t *testing.T) {
	for n := 1; n <= 9; n++ {
		bitsUsable := []int{0, 7, 14, 21, 28, 35, 42, 49, 56, 64}[n]
		var max uint64 = MaxVarint
		if bitsUsable < 64 {
			max = 1<<bitsUsable - 1
		}
		for _, v := range []uint64{max, max / 2, 0} {
			enc := AppendVarint(nil, v)
			if v == max {
				assert.Len(t, enc, n, "max of %d bytes", n)
			}
			assert.Equal(t, len(enc), VarintLen(v))
			got, m := ParseVarint(enc)
			assert.Equal(t, len(enc), m)
			assert.Equal(t, v, got)
			// Every longer form decodes to the same value.
			for k := VarintLen(v); k <= 9; k++ {
				long, ok := AppendVarintLen(nil, v, k)
				require.True(t, ok)
				require.Len(t, long, k)
				got, m := ParseVarint(long)
				assert.Equal(t, k, m)
				assert.Equal(t, v, got, "value %d in %d bytes", v, k)
			}
		}
		if n < 9 {
			// One past the maximum needs a longer form.
			assert.Equal(t, n+1, VarintLen(max+1))
			_, ok := AppendVarintLen(nil, max+1, n)
			assert.False(t, ok)
		}
	}
	_, ok := AppendVarintLen(nil, 1, 0)
	assert.False(t, ok)
	_, ok = AppendVarintLen(nil, 1, 10)
	assert.False(t, ok)
}

func TestReadVarintErrors(t *testing.T) {
	_, err := ReadVarint(bytes.NewReader(nil))
	assert.ErrorIs(t, err, io.EOF)
	_, err = ReadVarint(bytes.NewReader([]byte{0xc0, 0x01}))
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = ReadVarint(bufio.NewReader(iotest.ErrReader(io.ErrClosedPipe)))
	assert.ErrorIs(t, err, io.ErrClosedPipe)
}

// TestReadVarintNoOverread checks ReadVarint consumes exactly the integer.
func TestReadVarintNoOverread(t *testing.T) {
	r := bytes.NewReader([]byte{0x80, 0x25, 0x99})
	v, err := ReadVarint(r)
	require.NoError(t, err)
	assert.Equal(t, uint64(37), v)
	assert.Equal(t, 1, r.Len())
}

func FuzzVarint(f *testing.F) {
	for _, v := range []uint64{0, 37, 15293, 1 << 63, MaxVarint} {
		f.Add(AppendVarint(nil, v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, n := ParseVarint(b)
		if n == 0 {
			return
		}
		require.Equal(t, varintSize(b[0]), n)
		got, m := ParseVarint(AppendVarint(nil, v))
		require.Equal(t, v, got)
		require.Equal(t, VarintLen(v), m)
		r, err := ReadVarint(bytes.NewReader(b))
		require.NoError(t, err)
		require.Equal(t, v, r)
	})
}

func BenchmarkAppendVarint(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 16)
	for i := 0; b.Loop(); i++ {
		buf = AppendVarint(buf[:0], uint64(i)*0x9E3779B97F4A7C15)
	}
}

func BenchmarkParseVarint(b *testing.B) {
	b.ReportAllocs()
	enc := AppendVarint(nil, 151288809941952)
	for b.Loop() {
		if _, n := ParseVarint(enc); n == 0 {
			b.Fatal("parse failed")
		}
	}
}
