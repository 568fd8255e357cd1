package wire

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fuzz targets check, for every decoder of the data plane: no input
// panics; the slice and io.ByteReader paths agree; and whatever decodes
// re-encodes to bytes that decode to the same value.

// addVectors seeds f with every vector of a golden file whose name has
// prefix (all of them for "").
func addVectors(f *testing.F, file, prefix string, seed func(v []byte)) {
	for name, v := range loadVectors(f, file) {
		if strings.HasPrefix(name, prefix) {
			seed(v.Bytes)
		}
	}
}

func FuzzStreamHeader(f *testing.F) {
	addVectors(f, "subgroup.txt", "", func(v []byte) { f.Add(v) })
	addVectors(f, "fetch.txt", "", func(v []byte) { f.Add(v) })
	f.Add(AppendPaddingStream(nil, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseStreamHeader(b)
		rh, rerr := ReadStreamHeader(bytes.NewReader(b))
		require.Equal(t, err == nil, rerr == nil, "slice: %v, reader: %v", err, rerr)
		if err != nil {
			return
		}
		assert.Equal(t, h, rh)
		var enc []byte
		switch h.Type {
		case StreamSubgroup:
			enc, err = h.Subgroup.Append(nil)
			require.NoError(t, err)
		case StreamFetch:
			enc = h.Fetch.Append(nil)
		case StreamControl:
			enc = AppendVarint(nil, ControlStreamType)
		case StreamPadding:
			enc = AppendVarint(nil, PaddingStreamType)
		}
		require.LessOrEqual(t, len(enc), n, "re-encoding is never longer")
		again, m, err := ParseStreamHeader(enc)
		require.NoError(t, err)
		assert.Equal(t, len(enc), m)
		assert.Equal(t, h, again)
	})
}

func FuzzSubgroupHeader(f *testing.F) {
	addVectors(f, "subgroup.txt", "header-", func(v []byte) { f.Add(v) })
	for _, h := range subgroupHeaders {
		b, err := h.Append(nil)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, _, err := ParseSubgroupHeader(b)
		rh, rerr := ReadSubgroupHeader(bytes.NewReader(b))
		require.Equal(t, err == nil, rerr == nil, "slice: %v, reader: %v", err, rerr)
		if err != nil {
			return
		}
		assert.Equal(t, h, rh)
		enc, err := h.Append(nil)
		require.NoError(t, err)
		again, n, err := ParseSubgroupHeader(enc)
		require.NoError(t, err)
		assert.Equal(t, len(enc), n)
		assert.Equal(t, h, again)
	})
}

func FuzzSubgroupObjects(f *testing.F) {
	addVectors(f, "subgroup.txt", "stream-", func(v []byte) { f.Add(v) })
	for _, s := range subgroupStreams {
		b, err := appendSubgroupStream(nil, s.header, s.entries)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, entries, err := parseSubgroupStream(b)
		for name, mk := range readers(b) {
			rh, rentries, rerr := readSubgroupStream(mk())
			require.Equal(t, err == nil, rerr == nil, "%s: slice: %v, reader: %v", name, err, rerr)
			if err == nil {
				assert.Equal(t, h, rh, name)
				assert.Equal(t, entries, rentries, name)
			}
		}
		if err != nil {
			return
		}
		enc, err := appendSubgroupStream(nil, h, entries)
		require.NoError(t, err)
		h2, entries2, err := parseSubgroupStream(enc)
		require.NoError(t, err)
		if len(entries) > 0 || h.SubgroupIDMode != SubgroupIDFirstObject {
			assert.Equal(t, h, h2)
		}
		assert.Equal(t, entries, entries2)
	})
}

func FuzzDatagram(f *testing.F) {
	addVectors(f, "datagram.txt", "", func(v []byte) { f.Add(v) })
	for v := uint64(0); v <= 0x3F; v++ {
		f.Add(datagramBody(v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, padding, err := ParseDatagram(b)
		if err != nil {
			return
		}
		if padding {
			assert.Equal(t, ObjectDatagram{}, d)
			_, n := ParseVarint(b)
			assert.NoError(t, CheckPadding(b[n:]))
			return
		}
		enc, err := d.Append(nil)
		require.NoError(t, err)
		require.LessOrEqual(t, len(enc), len(b), "re-encoding is never longer")
		again, padding, err := ParseDatagram(enc)
		require.NoError(t, err)
		assert.False(t, padding)
		assert.Equal(t, d, again)
	})
}

func FuzzFetchObjects(f *testing.F) {
	for name, v := range loadVectors(f, "fetch.txt") {
		order := byte(0)
		if strings.HasPrefix(name, "desc-") {
			order = 1
		}
		for i := range Versions {
			f.Add(order|byte(i)<<1, v.Bytes)
		}
	}
	for name, s := range fetchStreams {
		desc := strings.HasPrefix(name, "desc-")
		b, err := appendFetchStream(nil, s.header, desc, s.entries)
		require.NoError(f, err)
		f.Add(map[bool]byte{false: 0, true: 1}[desc], b)
	}
	// Bit 0 of order is the Group Order; the bits above pick the draft,
	// which decides whether 0x20C is an End of Range.
	f.Fuzz(func(t *testing.T, order byte, b []byte) {
		desc := order&1 == 1
		v := Versions[int(order>>1)%len(Versions)]
		h, entries, err := parseFetchStreamIn(b, desc, v)
		for name, mk := range readers(b) {
			rh, rentries, rerr := readFetchStreamIn(mk(), desc, v)
			require.Equal(t, err == nil, rerr == nil, "%s: slice: %v, reader: %v", name, err, rerr)
			if err == nil {
				assert.Equal(t, h, rh, name)
				assert.Equal(t, entries, rentries, name)
			}
		}
		if err != nil {
			return
		}
		enc, err := appendFetchStreamIn(nil, h, desc, v, entries)
		require.NoError(t, err, "every decoded stream can be re-encoded")
		h2, entries2, err := parseFetchStreamIn(enc, desc, v)
		require.NoError(t, err)
		assert.Equal(t, h, h2)
		assert.Equal(t, entries, entries2)
	})
}

func FuzzPadding(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		slice := CheckPadding(b)
		stream := DiscardPadding(bytes.NewReader(b))
		assert.Equal(t, slice == nil, stream == nil)
		assert.Equal(t, bytes.Count(b, []byte{0}) == len(b), slice == nil)
	})
}
