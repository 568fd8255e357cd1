package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fetchEntry is one entry of a FETCH stream and its payload.
type fetchEntry struct {
	Object  FetchObject
	Payload []byte
}

// parseFetchStream decodes a whole FETCH stream held in b, as if a FIN
// followed it.
func parseFetchStream(b []byte, descending bool) (FetchHeader, []fetchEntry, error) {
	return parseFetchStreamIn(b, descending, 0)
}

// parseFetchStreamIn is parseFetchStream for draft v.
func parseFetchStreamIn(b []byte, descending bool, v Version) (FetchHeader, []fetchEntry, error) {
	h, n, err := ParseFetchHeader(b)
	if err != nil {
		return FetchHeader{}, nil, err
	}
	b = b[n:]
	d := FetchDecoder{Descending: descending, Version: v}
	var out []fetchEntry
	for len(b) > 0 {
		o, n, err := d.Parse(b)
		if err != nil {
			return FetchHeader{}, nil, err
		}
		b = b[n:]
		if o.PayloadLength > uint64(len(b)) {
			return FetchHeader{}, nil, truncated("payload")
		}
		out = append(out, fetchEntry{o, nilIfEmpty(b[:o.PayloadLength])})
		b = b[o.PayloadLength:]
	}
	return h, out, nil
}

// readFetchStream is parseFetchStream through the io.ByteReader path,
// reusing one properties buffer.
func readFetchStream(r io.ByteReader, descending bool) (FetchHeader, []fetchEntry, error) {
	return readFetchStreamIn(r, descending, 0)
}

// readFetchStreamIn is readFetchStream for draft v.
func readFetchStreamIn(r io.ByteReader, descending bool, v Version) (FetchHeader, []fetchEntry, error) {
	h, err := ReadFetchHeader(r)
	if err != nil {
		return FetchHeader{}, nil, err
	}
	d := FetchDecoder{Descending: descending, Version: v}
	var out []fetchEntry
	props := make([]byte, 0, 4)
	for {
		o, err := d.Read(r, props)
		if err == io.EOF {
			return h, out, nil
		}
		if err != nil {
			return FetchHeader{}, nil, err
		}
		if o.Properties != nil {
			props = o.Properties[:0]
			o.Properties = bytes.Clone(o.Properties)
		}
		p, err := readPayload(r, o.PayloadLength)
		if err != nil {
			return FetchHeader{}, nil, err
		}
		out = append(out, fetchEntry{o, p})
	}
}

// appendFetchStream encodes a whole FETCH stream.
func appendFetchStream(b []byte, h FetchHeader, descending bool, entries []fetchEntry) ([]byte, error) {
	return appendFetchStreamIn(b, h, descending, 0, entries)
}

// appendFetchStreamIn is appendFetchStream for draft v.
func appendFetchStreamIn(b []byte, h FetchHeader, descending bool, v Version, entries []fetchEntry) ([]byte, error) {
	b = h.Append(b)
	e := FetchEncoder{Descending: descending, Version: v}
	for _, en := range entries {
		var err error
		if b, err = e.AppendObject(b, en.Object); err != nil {
			return b, err
		}
		b = append(b, en.Payload...)
	}
	return b, nil
}

var fetchStreams = map[string]struct {
	header  FetchHeader
	entries []fetchEntry
}{
	"asc-objects": {FetchHeader{0}, []fetchEntry{
		{FetchObject{GroupID: 5, SubgroupID: 0, ObjectID: 0, Priority: 0x80, PayloadLength: 1}, []byte("a")},
		{FetchObject{GroupID: 5, SubgroupID: 0, ObjectID: 1, Priority: 0x80, PayloadLength: 1}, []byte("b")},
		{FetchObject{GroupID: 5, SubgroupID: 1, ObjectID: 2, Priority: 0x80, PayloadLength: 1}, []byte("c")},
		{FetchObject{GroupID: 5, SubgroupID: 1, ObjectID: 5, Priority: 0x40, PayloadLength: 1}, []byte("d")},
		{FetchObject{GroupID: 6, SubgroupID: 7, ObjectID: 0, Priority: 0x40, Properties: []byte{0x78, 0x01}}, nil},
		{FetchObject{GroupID: 9, SubgroupID: 0, ObjectID: 1, Priority: 0x40, PayloadLength: 1}, []byte("e")},
	}},
	"desc-objects": {FetchHeader{2}, []fetchEntry{
		{FetchObject{GroupID: 10, SubgroupID: 3, ObjectID: 4, Priority: 1, PayloadLength: 1}, []byte("A")},
		{FetchObject{GroupID: 8, SubgroupID: 3, ObjectID: 0, Priority: 1, PayloadLength: 1}, []byte("B")},
		{FetchObject{GroupID: 7, SubgroupID: 4, ObjectID: 1, Priority: 1, PayloadLength: 1}, []byte("C")},
		{FetchObject{GroupID: 0, SubgroupID: 0, ObjectID: 0, Priority: 1}, nil},
	}},
	"asc-datagram-objects": {FetchHeader{4}, []fetchEntry{
		{FetchObject{GroupID: 1, ObjectID: 0, Datagram: true, Priority: 0x80, PayloadLength: 1}, []byte("x")},
		{FetchObject{GroupID: 1, ObjectID: 1, Datagram: true, Priority: 0x80, PayloadLength: 1}, []byte("y")},
		{FetchObject{GroupID: 1, SubgroupID: 2, ObjectID: 2, Priority: 0x80, PayloadLength: 1}, []byte("z")},
	}},
	"asc-datagram-low-bits-noncanonical": {FetchHeader{4}, []fetchEntry{
		{FetchObject{GroupID: 1, ObjectID: 0, Datagram: true, Priority: 0x80}, nil},
		{FetchObject{GroupID: 1, ObjectID: 1, Datagram: true, Priority: 0x80}, nil},
	}},
	"asc-end-of-range": {FetchHeader{6}, []fetchEntry{
		{FetchObject{EndOfRange: EndOfUnknownRange, GroupID: 2, ObjectID: 5}, nil},
		{FetchObject{GroupID: 2, SubgroupID: 0, ObjectID: 6, Priority: 0x80, PayloadLength: 1}, []byte("a")},
		{FetchObject{EndOfRange: EndOfNonExistentRange, GroupID: 2, ObjectID: 9}, nil},
		{FetchObject{EndOfRange: EndOfTimedOutRange, GroupID: 4, ObjectID: 3}, nil},
		{FetchObject{GroupID: 4, SubgroupID: 1, ObjectID: 10, Priority: 0x80}, nil},
	}},
	"desc-end-of-range": {FetchHeader{8}, []fetchEntry{
		{FetchObject{GroupID: 9, SubgroupID: 0, ObjectID: 2, Priority: 5}, nil},
		{FetchObject{EndOfRange: EndOfNonExistentRange, GroupID: 7, ObjectID: 3}, nil},
		{FetchObject{GroupID: 6, SubgroupID: 0, ObjectID: 0, Priority: 5}, nil},
	}},
	"asc-large-values": {FetchHeader{MaxVarint}, []fetchEntry{
		{FetchObject{GroupID: MaxVarint, SubgroupID: MaxVarint, ObjectID: MaxVarint, Priority: 0xff}, nil},
	}},
	"asc-two-byte-group-delta": {FetchHeader{1}, []fetchEntry{
		{FetchObject{GroupID: 0, ObjectID: 0, Priority: 0x80}, nil},
		{FetchObject{GroupID: 301, ObjectID: 1, Priority: 0x80}, nil},
	}},
	"asc-properties": {FetchHeader{3}, []fetchEntry{
		{FetchObject{GroupID: 7, ObjectID: 0, Priority: 0x10, Properties: []byte{0x0b, 0x00, 0x33, 0x01},
			PayloadLength: 2}, []byte("hi")},
	}},
}

func TestFetchHeaderVectors(t *testing.T) {
	vecs := loadVectors(t, "fetch.txt")
	for name, want := range map[string]FetchHeader{"header-request-12": {12}, "header-request-300": {300}} {
		v := vecs[name]
		h, n, err := ParseFetchHeader(v.Bytes)
		require.NoError(t, err)
		assert.Equal(t, want, h)
		assert.Equal(t, len(v.Bytes), n)
		assert.Equal(t, v.Bytes, want.Append(nil))
		for rname, mk := range readers(v.Bytes) {
			h, err := ReadFetchHeader(mk())
			require.NoError(t, err, rname)
			assert.Equal(t, want, h)
		}
		for i := 0; i < len(v.Bytes); i++ {
			_, _, err := ParseFetchHeader(v.Bytes[:i])
			requireTruncated(t, err)
		}
	}
	_, _, err := ParseFetchHeader([]byte{0x04, 0x00})
	requireMalformed(t, err)
	_, err = ReadFetchHeader(bytes.NewReader(nil))
	assert.Same(t, io.EOF, err)
}

func TestFetchStreamVectors(t *testing.T) {
	vecs := loadVectors(t, "fetch.txt")
	seen := 0
	for name, v := range vecs {
		if strings.HasPrefix(name, "header-") {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			want, ok := fetchStreams[name]
			require.True(t, ok, "no expected value for %s", name)
			desc := strings.HasPrefix(name, "desc-")
			h, entries, err := parseFetchStream(v.Bytes, desc)
			require.NoError(t, err)
			assert.Equal(t, want.header, h)
			assert.Equal(t, want.entries, entries)
			for rname, mk := range readers(v.Bytes) {
				h, entries, err := readFetchStream(mk(), desc)
				require.NoError(t, err, rname)
				assert.Equal(t, want.header, h, rname)
				assert.Equal(t, want.entries, entries, rname)
			}
			b, err := appendFetchStream(nil, want.header, desc, want.entries)
			require.NoError(t, err)
			if strings.HasSuffix(name, "-noncanonical") {
				_, again, err := parseFetchStream(b, desc)
				require.NoError(t, err)
				assert.Equal(t, want.entries, again, "our encoding decodes to the same entries")
				return
			}
			assert.Equal(t, v.Bytes, b, "encoding matches the vector")
		})
	}
	assert.Equal(t, len(fetchStreams), seen)
}

// TestFetchStreamPrefixes cuts every stream vector at every length. A FETCH
// stream ends with a FIN, so a prefix ending exactly after the FETCH_HEADER
// or after an entry (and its payload) is itself a complete, valid stream.
// Every other prefix must fail as truncated.
func TestFetchStreamPrefixes(t *testing.T) {
	for name, v := range loadVectors(t, "fetch.txt") {
		if strings.HasPrefix(name, "header-") {
			continue
		}
		want := fetchStreams[name]
		desc := strings.HasPrefix(name, "desc-")
		_, hn, err := ParseFetchHeader(v.Bytes)
		require.NoError(t, err)
		boundaries := map[int]int{hn: 0}
		d := FetchDecoder{Descending: desc}
		for k, rest := 1, v.Bytes[hn:]; len(rest) > 0; k++ {
			o, n, err := d.Parse(rest)
			require.NoError(t, err)
			rest = rest[n+int(o.PayloadLength):]
			boundaries[len(v.Bytes)-len(rest)] = k
		}
		for i := 0; i < len(v.Bytes); i++ {
			prefix := v.Bytes[:i]
			k, complete := boundaries[i]
			_, entries, err := parseFetchStream(prefix, desc)
			if complete {
				require.NoError(t, err, "%s[:%d]", name, i)
				assert.Equal(t, len(want.entries[:k]), len(entries))
				if k > 0 {
					assert.Equal(t, want.entries[:k], entries)
				}
			} else {
				requireTruncated(t, err)
			}
			for _, mk := range readers(prefix) {
				_, entries, err := readFetchStream(mk(), desc)
				switch {
				case i == 0:
					assert.Same(t, io.EOF, err)
				case complete:
					require.NoError(t, err)
					assert.Equal(t, len(want.entries[:k]), len(entries))
				default:
					requireTruncated(t, err)
				}
			}
		}
	}
}

// fetchPriorObject is {Group 5, Subgroup 3, Object 7, Priority 9} as a first
// entry: flags 0x1F, every field present.
var fetchPriorObject = []byte{0x1f, 0x05, 0x03, 0x07, 0x09, 0x00}

// fetchEntryWith builds an entry with Serialization Flags f < 128 whose
// fields are: Group ID Delta 1, Subgroup ID 11, Object ID Delta 2,
// Priority 0x42, Properties {0x3E: 1}, empty payload.
func fetchEntryWith(f byte) []byte {
	b := []byte{f}
	if f&0x08 != 0 {
		b = append(b, 0x01)
	}
	if f&0x40 == 0 && f&0x03 == 0x03 {
		b = append(b, 0x0b)
	}
	if f&0x04 != 0 {
		b = append(b, 0x02)
	}
	if f&0x10 != 0 {
		b = append(b, 0x42)
	}
	if f&0x20 != 0 {
		b = append(b, 0x02, 0x3e, 0x01)
	}
	return append(b, 0x00)
}

// TestFetchFlagsBelow128 decodes every Serialization Flags value below 128
// after fetchPriorObject, in both group orders, against the rules of
// §11.4.1.1 written out for this one case, then re-encodes it.
func TestFetchFlagsBelow128(t *testing.T) {
	for _, desc := range []bool{false, true} {
		for f := byte(0); f < 128; f++ {
			want := FetchObject{GroupID: 5, ObjectID: 8, Priority: 9}
			if f&0x08 != 0 {
				want.GroupID, want.ObjectID = 7, 2 // 5 + 1 + 1; Object ID Delta is absolute
				if desc {
					want.GroupID = 3 // 5 - (1 + 1)
				}
				if f&0x04 == 0 {
					want.ObjectID = 8 // prior + 1, across the group change
				}
			} else if f&0x04 != 0 {
				want.ObjectID = 9 // 7 + 2
			}
			if f&0x40 != 0 {
				want.Datagram = true
			} else {
				want.SubgroupID = [4]uint64{0, 3, 4, 11}[f&0x03]
			}
			if f&0x10 != 0 {
				want.Priority = 0x42
			}
			if f&0x20 != 0 {
				want.Properties = []byte{0x3e, 0x01}
			}

			d := FetchDecoder{Descending: desc}
			_, _, err := d.Parse(fetchPriorObject)
			require.NoError(t, err)
			entry := fetchEntryWith(f)
			got, n, err := d.Parse(entry)
			require.NoError(t, err, "flags 0x%x", f)
			assert.Equal(t, len(entry), n, "flags 0x%x", f)
			assert.Equal(t, want, got, "flags 0x%x descending=%v", f, desc)

			e := FetchEncoder{Descending: desc}
			prior, err := e.AppendObject(nil, FetchObject{GroupID: 5, SubgroupID: 3, ObjectID: 7, Priority: 9})
			require.NoError(t, err)
			assert.Equal(t, fetchPriorObject, prior)
			b, err := e.AppendObject(nil, want)
			require.NoError(t, err)
			if f&0x40 == 0 || f&0x03 == 0 {
				// Every other choice here is already the most compact.
				assert.Equal(t, entry, b, "flags 0x%x re-encodes to the same bytes", f)
			} else {
				assert.Equal(t, f&^0x03, b[0], "the encoder clears the low bits of a datagram object")
			}
		}
	}
}

func TestFetchFlagsAbove127(t *testing.T) {
	markers := 0
	values := []uint64{0x3FF + 1, 0x40C, 0x80C, 0x2F00, 1 << 40, MaxVarint}
	for v := uint64(128); v <= 0x3FF; v++ {
		values = append(values, v)
	}
	for _, v := range values {
		b := append(AppendVarint(nil, v), 0x02, 0x05)
		d := FetchDecoder{}
		o, n, err := d.Parse(b)
		switch v {
		case 0x8C, 0x10C, 0x20C:
			markers++
			require.NoError(t, err)
			assert.Equal(t, FetchObject{EndOfRange: EndOfRange(v), GroupID: 2, ObjectID: 5}, o)
			assert.Equal(t, len(b), n, "a marker carries no payload length")
		default:
			requireMalformed(t, err)
		}
	}
	assert.Equal(t, 3, markers)
	assert.Equal(t, "END_OF_TIMED_OUT_RANGE", EndOfTimedOutRange.String())
	assert.Equal(t, "EndOfRange(0x8d)", EndOfRange(0x8d).String())
}

func TestC098_FirstObjectCarriesAbsoluteIDs(t *testing.T) {
	for _, desc := range []bool{false, true} {
		// The encoder writes Group ID Delta and Object ID Delta on the first
		// object as the absolute IDs, whatever the order.
		e := FetchEncoder{Descending: desc}
		b, err := e.AppendObject(nil, FetchObject{GroupID: 12, ObjectID: 4, Priority: 3})
		require.NoError(t, err)
		assert.Equal(t, []byte{0x1c, 0x0c, 0x04, 0x03, 0x00}, b)

		// Even an object that follows in ID order gets absolute IDs when it
		// is first (no prior Object to be "prior + 1" of).
		e = FetchEncoder{Descending: desc}
		b, err = e.AppendObject(nil, FetchObject{GroupID: 0, ObjectID: 1, Priority: 3})
		require.NoError(t, err)
		assert.Equal(t, byte(0x0c), b[0]&0x0c)

		// The decoder reads the first object's deltas as absolute IDs.
		d := FetchDecoder{Descending: desc}
		o, _, err := d.Parse([]byte{0x1c, 0x0c, 0x04, 0x03, 0x00})
		require.NoError(t, err)
		assert.Equal(t, Location{Group: 12, Object: 4}, o.Location())
	}
}

func TestC099_FirstObjectReferencingPriorFields(t *testing.T) {
	tests := []struct {
		name  string
		entry []byte
	}{
		{"no Group ID Delta", []byte{0x14, 0x00, 0x80, 0x00}},
		{"no Object ID Delta", []byte{0x18, 0x05, 0x80, 0x00}},
		{"no Group or Object ID Delta", []byte{0x10, 0x80, 0x00}},
		{"prior Subgroup ID", []byte{0x1d, 0x05, 0x00, 0x80, 0x00}},
		{"prior Subgroup ID + 1", []byte{0x1e, 0x05, 0x00, 0x80, 0x00}},
		{"prior Priority", []byte{0x0c, 0x05, 0x00, 0x00}},
	}
	for _, tt := range tests {
		for _, desc := range []bool{false, true} {
			d := FetchDecoder{Descending: desc}
			_, _, err := d.Parse(tt.entry)
			requireMalformed(t, err)
		}
	}
	// After an End of Range, the prior Group and Object IDs exist but the
	// prior Subgroup ID and Priority do not (§11.4.1.2).
	afterMarker := []struct {
		name  string
		entry []byte
		ok    bool
	}{
		{"prior Group and Object", []byte{0x10, 0x80, 0x00}, true},
		{"prior Subgroup ID", []byte{0x11, 0x80, 0x00}, false},
		{"prior Subgroup ID + 1", []byte{0x12, 0x80, 0x00}, false},
		{"prior Priority", []byte{0x00, 0x00}, false},
	}
	for _, tt := range afterMarker {
		d := FetchDecoder{}
		_, _, err := d.Parse([]byte{0x81, 0x0c, 0x02, 0x05})
		require.NoError(t, err)
		o, _, err := d.Parse(tt.entry)
		if tt.ok {
			require.NoError(t, err, tt.name)
			assert.Equal(t, Location{Group: 2, Object: 6}, o.Location())
			continue
		}
		requireMalformed(t, err)
	}
	// A datagram object has no Subgroup ID to refer to.
	d := FetchDecoder{}
	_, _, err := d.Parse([]byte{0x5c, 0x01, 0x00, 0x80, 0x00})
	require.NoError(t, err)
	_, _, err = d.Parse([]byte{0x01, 0x00})
	requireMalformed(t, err)
}

func TestC100_GroupIDOutOfRange(t *testing.T) {
	maxGroup := append(append([]byte{0x1c}, AppendVarint(nil, MaxVarint)...), 0x00, 0x80, 0x00)
	tests := []struct {
		name  string
		desc  bool
		first []byte
		next  []byte
	}{
		{"ascending past 2^64-1", false, maxGroup, []byte{0x08, 0x00, 0x00}},
		{"ascending large delta", false, []byte{0x1c, 0x05, 0x00, 0x80, 0x00},
			append(append([]byte{0x08}, AppendVarint(nil, MaxVarint-5)...), 0x00)},
		{"ascending delta 2^64-1", false, []byte{0x1c, 0x00, 0x00, 0x80, 0x00},
			append(append([]byte{0x08}, AppendVarint(nil, MaxVarint)...), 0x00)},
		{"descending below 0", true, []byte{0x1c, 0x00, 0x00, 0x80, 0x00}, []byte{0x08, 0x00, 0x00}},
		{"descending delta equal to group", true, []byte{0x1c, 0x05, 0x00, 0x80, 0x00}, []byte{0x08, 0x05, 0x00}},
		{"descending delta 2^64-1", true, maxGroup,
			append(append([]byte{0x08}, AppendVarint(nil, MaxVarint)...), 0x00)},
	}
	for _, tt := range tests {
		d := FetchDecoder{Descending: tt.desc}
		_, _, err := d.Parse(tt.first)
		require.NoError(t, err, tt.name)
		_, _, err = d.Parse(tt.next)
		requireMalformed(t, err)
	}
	// The edges themselves are valid.
	d := FetchDecoder{}
	_, _, _ = d.Parse([]byte{0x1c, 0x05, 0x00, 0x80, 0x00})
	o, _, err := d.Parse(append(append([]byte{0x08}, AppendVarint(nil, MaxVarint-6)...), 0x00))
	require.NoError(t, err)
	assert.Equal(t, uint64(MaxVarint), o.GroupID)
	d = FetchDecoder{Descending: true}
	_, _, _ = d.Parse([]byte{0x1c, 0x05, 0x00, 0x80, 0x00})
	o, _, err = d.Parse([]byte{0x08, 0x04, 0x00})
	require.NoError(t, err)
	assert.Equal(t, uint64(0), o.GroupID)
}

func TestC101_ObjectIDOverflow(t *testing.T) {
	maxObject := append(append([]byte{0x1c, 0x01}, AppendVarint(nil, MaxVarint)...), 0x80, 0x00)
	tests := []struct {
		name string
		next []byte
	}{
		{"prior + 1", []byte{0x00, 0x00}},
		{"prior + 1 across a group change", []byte{0x08, 0x00, 0x00}},
		{"prior + delta", []byte{0x04, 0x01, 0x00}},
		{"subgroup prior + 1", []byte{0x02, 0x00}}, // with Subgroup ID 2^64-1 below
	}
	for _, tt := range tests {
		d := FetchDecoder{}
		first := maxObject
		if strings.HasPrefix(tt.name, "subgroup") {
			first = append(append([]byte{0x1f, 0x01}, AppendVarint(nil, MaxVarint)...), 0x00, 0x80, 0x00)
		}
		_, _, err := d.Parse(first)
		require.NoError(t, err, tt.name)
		_, _, err = d.Parse(tt.next)
		requireMalformed(t, err)
	}
	// prior + delta landing exactly on 2^64-1 is valid.
	d := FetchDecoder{}
	_, _, _ = d.Parse([]byte{0x1c, 0x01, 0x05, 0x80, 0x00})
	o, _, err := d.Parse(append(append([]byte{0x04}, AppendVarint(nil, MaxVarint-5)...), 0x00))
	require.NoError(t, err)
	assert.Equal(t, uint64(MaxVarint), o.ObjectID)
}

func TestC102_DatagramObjectsSetFlag0x40(t *testing.T) {
	e := FetchEncoder{}
	for i, o := range []FetchObject{
		{GroupID: 1, ObjectID: 0, Datagram: true, Priority: 1},
		{GroupID: 1, ObjectID: 1, Datagram: true, Priority: 1},
		{GroupID: 2, ObjectID: 0, Datagram: true, SubgroupID: 9, Priority: 1}, // SubgroupID is not sent
	} {
		b, err := e.AppendObject(nil, o)
		require.NoError(t, err)
		assert.Equal(t, byte(0x40), b[0]&0x40, "entry %d sets 0x40", i)
		assert.Zero(t, b[0]&0x03, "entry %d clears the low two bits", i)
	}
}

func TestC103_ReceiverIgnoresLowBitsWith0x40(t *testing.T) {
	for low := byte(0); low < 4; low++ {
		// As the first object, where modes 1 and 2 would otherwise refer to
		// a prior Subgroup ID that does not exist, and mode 3 would read a
		// field.
		d := FetchDecoder{}
		entry := []byte{0x5c | low, 0x01, 0x00, 0x80, 0x00}
		o, n, err := d.Parse(entry)
		require.NoError(t, err, "low bits %d", low)
		assert.Equal(t, len(entry), n, "no Subgroup ID field is read")
		assert.Equal(t, FetchObject{GroupID: 1, Datagram: true, Priority: 0x80}, o)
	}
}

func TestFetchEncoderErrors(t *testing.T) {
	tests := []struct {
		name  string
		desc  bool
		prior []FetchObject
		o     FetchObject
	}{
		{"ascending group goes back", false, []FetchObject{{GroupID: 5}}, FetchObject{GroupID: 4}},
		{"descending group goes up", true, []FetchObject{{GroupID: 5}}, FetchObject{GroupID: 6}},
		{"object goes back in a group", false, []FetchObject{{GroupID: 5, ObjectID: 5}}, FetchObject{GroupID: 5, ObjectID: 3}},
		{"invalid marker", false, nil, FetchObject{EndOfRange: 0x8D}},
		{"malformed properties", false, nil, FetchObject{Properties: []byte{0x0b}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := FetchEncoder{Descending: tt.desc}
			for _, p := range tt.prior {
				_, err := e.AppendObject(nil, p)
				require.NoError(t, err)
			}
			before := e
			b, err := e.AppendObject([]byte{0xaa}, tt.o)
			requireCode(t, err, ProtocolViolation)
			assert.Equal(t, []byte{0xaa}, b, "nothing appended")
			assert.Equal(t, before, e, "state unchanged")
		})
	}
}

func TestFetchDecoderStateUnchangedOnTruncation(t *testing.T) {
	d := FetchDecoder{}
	_, _, err := d.Parse([]byte{0x1f, 0x05, 0x03, 0x07, 0x09, 0x00})
	require.NoError(t, err)
	next := []byte{0x2e, 0x01, 0x02, 0x02, 0x3e, 0x01, 0x00} // group +2, object 2, subgroup 4, properties
	for i := 1; i < len(next); i++ {
		_, _, err := d.Parse(next[:i])
		requireTruncated(t, err)
	}
	o, n, err := d.Parse(next)
	require.NoError(t, err)
	assert.Equal(t, len(next), n)
	assert.Equal(t, FetchObject{GroupID: 7, SubgroupID: 4, ObjectID: 2, Priority: 9, Properties: []byte{0x3e, 0x01}}, o)
}

func TestFetchReadEnds(t *testing.T) {
	d := FetchDecoder{}
	r := bytes.NewReader([]byte{0x81, 0x0c, 0x02, 0x05})
	_, err := d.Read(r, nil)
	require.NoError(t, err)
	_, err = d.Read(r, nil)
	assert.Same(t, io.EOF, err, "a FIN between entries is the normal end")

	for _, cut := range [][]byte{{0x81}, {0x81, 0x0c}, {0x81, 0x0c, 0x02}, {0x1c, 0x05, 0x00, 0x80}} {
		d := FetchDecoder{}
		_, err := d.Read(bytes.NewReader(cut), nil)
		requireTruncated(t, err)
	}
	reset := errors.New("reset")
	d = FetchDecoder{}
	_, err = d.Read(&errReader{b: []byte{0x1c}, err: reset}, nil)
	assert.Same(t, reset, err)

	d = FetchDecoder{MaxPropertiesLen: 1}
	_, err = d.Read(bytes.NewReader([]byte{0x3c, 0x01, 0x00, 0x80, 0x02, 0x3e, 0x01, 0x00}), nil)
	requireCode(t, err, InternalError)
}

func TestFetchAllocations(t *testing.T) {
	objs := []FetchObject{
		{GroupID: 7, SubgroupID: 2, ObjectID: 4, Priority: 3, PayloadLength: 1000},
		{GroupID: 7, SubgroupID: 2, ObjectID: 5, Priority: 3, Properties: []byte{0x3e, 0x01}, PayloadLength: 1000},
	}
	buf := make([]byte, 0, 64)
	encode := testing.AllocsPerRun(100, func() {
		e := FetchEncoder{}
		b := buf[:0]
		for _, o := range objs {
			b, _ = e.AppendObject(b, o)
		}
	})
	assert.Zero(t, encode)

	e := FetchEncoder{}
	first, _ := e.AppendObject(nil, objs[0])
	second, _ := e.AppendObject(nil, objs[1])
	parse := testing.AllocsPerRun(100, func() {
		d := FetchDecoder{}
		_, _, _ = d.Parse(first)
		if _, _, err := d.Parse(second); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, parse)

	wire := append(bytes.Clone(first), second...)
	br := bytes.NewReader(wire)
	props := make([]byte, 0, 8)
	read := testing.AllocsPerRun(100, func() {
		br.Reset(wire)
		d := FetchDecoder{}
		_, _ = d.Read(br, props)
		if _, err := d.Read(br, props); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, read)
}

func BenchmarkFetchEncode(b *testing.B) {
	buf := make([]byte, 0, 64)
	e := FetchEncoder{}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf, _ = e.AppendObject(buf[:0], FetchObject{GroupID: uint64(i / 8), SubgroupID: 1, ObjectID: uint64(i % 8), Priority: 3, PayloadLength: 1000})
	}
}

func BenchmarkFetchParse(b *testing.B) {
	e := FetchEncoder{}
	first, _ := e.AppendObject(nil, FetchObject{GroupID: 7, SubgroupID: 2, ObjectID: 4, Priority: 3, PayloadLength: 1000})
	next, _ := e.AppendObject(nil, FetchObject{GroupID: 7, SubgroupID: 2, ObjectID: 5, Priority: 3, PayloadLength: 1000})
	d := FetchDecoder{}
	if _, _, err := d.Parse(first); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		saved := d
		if _, _, err := d.Parse(next); err != nil {
			b.Fatal(err)
		}
		d = saved
	}
}
