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

func TestClassifyStream(t *testing.T) {
	tests := []struct {
		v    uint64
		want StreamType // 0: unknown, a PROTOCOL_VIOLATION
	}{
		{0x05, StreamFetch},
		{0x2F00, StreamControl},
		{0x132B3E28, StreamPadding},
		{0x10, StreamSubgroup},
		{0x1F, StreamSubgroup},
		{0x30, StreamSubgroup},
		{0x7F, StreamSubgroup},
		{0x16, StreamSubgroup}, // mode 0b11: a subgroup type, rejected by the header parser
		{0x00, 0},
		{0x01, 0},
		{0x04, 0},
		{0x06, 0},
		{0x0F, 0},
		{0x20, 0},
		{0x6F, 0},
		{0x80, 0},
		{0x90, 0}, // bit 0x10 set but 128 or more
		{0x2F01, 0},
		{0x132B3E29, 0}, // the padding datagram type is not a stream type
		{MaxVarint, 0},
	}
	for _, tt := range tests {
		got, err := ClassifyStream(tt.v)
		if tt.want == 0 {
			requireMalformed(t, err)
			continue
		}
		require.NoError(t, err, "0x%x", tt.v)
		assert.Equal(t, tt.want, got, "0x%x", tt.v)
	}
	assert.Equal(t, "SUBGROUP_HEADER", StreamSubgroup.String())
	assert.Equal(t, "StreamType(9)", StreamType(9).String())
}

func TestStreamHeaderVectors(t *testing.T) {
	vecs := loadVectors(t, "subgroup.txt")
	tests := []struct {
		vector string
		want   StreamHeader
		n      int // bytes of the header; the rest belongs to the stream body
	}{
		{"unistream-control", StreamHeader{Type: StreamControl}, 2},
		{"unistream-fetch", StreamHeader{Type: StreamFetch}, -1}, // only the type: truncated
		{"unistream-padding", StreamHeader{Type: StreamPadding}, 5},
		{"header-mode-present", StreamHeader{Type: StreamSubgroup, Subgroup: SubgroupHeader{
			TrackAlias: 1, GroupID: 2, SubgroupIDMode: SubgroupIDPresent, SubgroupID: 9}}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.vector, func(t *testing.T) {
			v, ok := vecs[tt.vector]
			require.True(t, ok)
			h, n, err := ParseStreamHeader(v.Bytes)
			if tt.n < 0 {
				// FETCH_HEADER needs a Request ID after its type.
				requireTruncated(t, err)
				h, n, err = ParseStreamHeader(append(bytes.Clone(v.Bytes), 0x07))
				tt.want.Fetch.RequestID, tt.n = 7, 2
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, h)
			assert.Equal(t, tt.n, n)
		})
	}
	fetch := loadVectors(t, "fetch.txt")["header-request-300"]
	for name, mk := range readers(fetch.Bytes) {
		h, err := ReadStreamHeader(mk())
		require.NoError(t, err, name)
		assert.Equal(t, StreamHeader{Type: StreamFetch, Fetch: FetchHeader{RequestID: 300}}, h, name)
	}
}

func TestReadStreamHeaderEnds(t *testing.T) {
	for name, mk := range readers(nil) {
		_, err := ReadStreamHeader(mk())
		assert.Same(t, io.EOF, err, "%s: a stream with no bytes ends cleanly", name)
	}
	for _, mk := range readers([]byte{0x14, 0x01, 0x02}) {
		_, err := ReadStreamHeader(mk())
		requireTruncated(t, err)
	}
	for _, mk := range readers([]byte{0x06}) {
		_, err := ReadStreamHeader(mk())
		requireMalformed(t, err)
	}
}

// subgroupHeaders maps the header-* vectors to the headers they encode.
var subgroupHeaders = map[string]SubgroupHeader{
	"header-mode-zero":            {TrackAlias: 1, GroupID: 2, Priority: 0x7f},
	"header-mode-first-object-id": {TrackAlias: 1, GroupID: 2, SubgroupIDMode: SubgroupIDFirstObject, Priority: 0x40},
	"header-mode-present":         {TrackAlias: 1, GroupID: 2, SubgroupIDMode: SubgroupIDPresent, SubgroupID: 9},
	"header-properties":           {TrackAlias: 1, GroupID: 2, HasProperties: true, Priority: 0x80},
	"header-end-of-group":         {TrackAlias: 1, GroupID: 2, EndOfGroup: true, Priority: 0x80},
	"header-default-priority":     {TrackAlias: 1, GroupID: 2, DefaultPriority: true},
	"header-first-object":         {TrackAlias: 1, GroupID: 2, FirstObject: true, Priority: 0x80},
	"header-first-object-id-end-of-group-default-priority": {TrackAlias: 5, GroupID: 0,
		SubgroupIDMode: SubgroupIDFirstObject, EndOfGroup: true, DefaultPriority: true},
	"header-all-flags": {TrackAlias: 37, GroupID: 15293, SubgroupIDMode: SubgroupIDPresent, SubgroupID: 226442877,
		HasProperties: true, EndOfGroup: true, DefaultPriority: true, FirstObject: true},
	"header-large-values": {TrackAlias: MaxVarint, GroupID: 151288809941952, SubgroupIDMode: SubgroupIDPresent,
		SubgroupID: 70423237261249041, Priority: 0xff},
	"header-mode-zero-noncanonical": {TrackAlias: 1, GroupID: 2, Priority: 1},
}

func TestSubgroupHeaderVectors(t *testing.T) {
	vecs := loadVectors(t, "subgroup.txt")
	seen := 0
	for name, v := range vecs {
		if !strings.HasPrefix(name, "header-") {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			want, ok := subgroupHeaders[name]
			require.True(t, ok, "no expected value for %s", name)
			h, n, err := ParseSubgroupHeader(v.Bytes)
			require.NoError(t, err)
			assert.Equal(t, want, h)
			assert.Equal(t, len(v.Bytes), n)
			for rname, mk := range readers(v.Bytes) {
				h, err := ReadSubgroupHeader(mk())
				require.NoError(t, err, rname)
				assert.Equal(t, want, h, rname)
			}
			if !strings.HasSuffix(name, "-noncanonical") {
				b, err := want.Append(nil)
				require.NoError(t, err)
				assert.Equal(t, v.Bytes, b, "encoding matches the vector")
			}
		})
	}
	assert.Equal(t, len(subgroupHeaders), seen, "every expected header has a vector")
}

func TestSubgroupHeaderPrefixes(t *testing.T) {
	for name, v := range loadVectors(t, "subgroup.txt") {
		if !strings.HasPrefix(name, "header-") {
			continue
		}
		for i := 0; i < len(v.Bytes); i++ {
			_, _, err := ParseSubgroupHeader(v.Bytes[:i])
			requireTruncated(t, err)
			for _, mk := range readers(v.Bytes[:i]) {
				_, err := ReadSubgroupHeader(mk())
				if i == 0 {
					assert.Same(t, io.EOF, err, "%s: empty stream", name)
				} else {
					requireTruncated(t, err)
				}
			}
		}
	}
}

// validSubgroupType is §11.3.1's rule, written out: below 128, bit 4 set,
// SUBGROUP_ID_MODE not 0b11.
func validSubgroupType(v uint64) bool {
	return v < 128 && v&0x10 != 0 && (v>>1)&3 != 3
}

func TestSubgroupHeaderTypeFlagsExhaustive(t *testing.T) {
	valid := 0
	for v := uint64(0); v < 256; v++ {
		// A body long enough for every optional field.
		b := append(AppendVarint(nil, v), 0x01, 0x02, 0x03, 0x04)
		h, _, err := ParseSubgroupHeader(b)
		if !validSubgroupType(v) {
			requireMalformed(t, err)
			continue
		}
		valid++
		require.NoError(t, err, "type 0x%x", v)
		got, err := h.TypeFlags()
		require.NoError(t, err)
		assert.Equal(t, v, got, "flags survive decoding")
	}
	// 0x10-0x7F with bit 4 set is 64 values; a quarter have mode 0b11.
	assert.Equal(t, 48, valid)
	for _, v := range []uint64{0x110, 0x2F00, 0x132B3E28, 1 << 40, MaxVarint} {
		b := append(AppendVarint(nil, v), 0x01, 0x02, 0x03, 0x04)
		_, _, err := ParseSubgroupHeader(b)
		requireMalformed(t, err)
	}
}

func TestSubgroupHeaderAppendErrors(t *testing.T) {
	tests := []struct {
		name string
		h    SubgroupHeader
	}{
		{"mode 3", SubgroupHeader{SubgroupIDMode: 3}},
		{"mode 9", SubgroupHeader{SubgroupIDMode: 9}},
		{"zero mode with an ID", SubgroupHeader{SubgroupIDMode: SubgroupIDZero, SubgroupID: 4}},
	}
	for _, tt := range tests {
		b, err := tt.h.Append([]byte{0xaa})
		requireCode(t, err, ProtocolViolation)
		assert.Equal(t, []byte{0xaa}, b, "%s: nothing appended", tt.name)
	}
}

// subgroupEntry is one object of a subgroup stream and its payload.
type subgroupEntry struct {
	Object  SubgroupObject
	Payload []byte
}

// parseSubgroupStream decodes a whole subgroup stream held in b, as if a FIN
// followed it. It returns the header with the Subgroup ID resolved.
func parseSubgroupStream(b []byte) (SubgroupHeader, []subgroupEntry, error) {
	h, n, err := ParseSubgroupHeader(b)
	if err != nil {
		return SubgroupHeader{}, nil, err
	}
	b = b[n:]
	d := SubgroupDecoder{Header: h}
	var out []subgroupEntry
	for len(b) > 0 {
		o, n, err := d.Parse(b)
		if err != nil {
			return SubgroupHeader{}, nil, err
		}
		b = b[n:]
		if o.PayloadLength > uint64(len(b)) {
			return SubgroupHeader{}, nil, truncated("payload")
		}
		out = append(out, subgroupEntry{o, nilIfEmpty(b[:o.PayloadLength])})
		b = b[o.PayloadLength:]
	}
	return d.Header, out, nil
}

// readSubgroupStream is parseSubgroupStream through the io.ByteReader path,
// reusing one properties buffer.
func readSubgroupStream(r io.ByteReader) (SubgroupHeader, []subgroupEntry, error) {
	h, err := ReadSubgroupHeader(r)
	if err != nil {
		return SubgroupHeader{}, nil, err
	}
	d := SubgroupDecoder{Header: h}
	var out []subgroupEntry
	props := make([]byte, 0, 4)
	for {
		o, err := d.Read(r, props)
		if err == io.EOF {
			return d.Header, out, nil
		}
		if err != nil {
			return SubgroupHeader{}, nil, err
		}
		if o.Properties != nil {
			props = o.Properties[:0]
			o.Properties = bytes.Clone(o.Properties)
		}
		p, err := readPayload(r, o.PayloadLength)
		if err != nil {
			return SubgroupHeader{}, nil, err
		}
		out = append(out, subgroupEntry{o, p})
	}
}

// appendSubgroupStream encodes a whole subgroup stream.
func appendSubgroupStream(b []byte, h SubgroupHeader, entries []subgroupEntry) ([]byte, error) {
	b, err := h.Append(b)
	if err != nil {
		return b, err
	}
	e := SubgroupEncoder{Header: h}
	for _, en := range entries {
		if b, err = e.AppendObject(b, en.Object); err != nil {
			return b, err
		}
		b = append(b, en.Payload...)
	}
	return b, nil
}

var subgroupStreams = map[string]struct {
	header  SubgroupHeader
	entries []subgroupEntry
}{
	"stream-sequential": {
		SubgroupHeader{TrackAlias: 1, GroupID: 0, Priority: 0x80},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: 0, PayloadLength: 2}, []byte("hi")},
			{SubgroupObject{ObjectID: 1, PayloadLength: 1}, []byte("!")},
			{SubgroupObject{ObjectID: 2, Status: ObjectEndOfGroup}, nil},
		},
	},
	"stream-present-subgroup-gaps": {
		SubgroupHeader{TrackAlias: 3, GroupID: 7, SubgroupIDMode: SubgroupIDPresent, SubgroupID: 1, Priority: 0x10},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: 5, PayloadLength: 1}, []byte("a")},
			{SubgroupObject{ObjectID: 8, PayloadLength: 1}, []byte("b")},
			{SubgroupObject{ObjectID: 9}, nil},
		},
	},
	"stream-subgroup-id-from-first-object": {
		SubgroupHeader{TrackAlias: 1, GroupID: 4, SubgroupIDMode: SubgroupIDFirstObject, SubgroupID: 3,
			FirstObject: true, Priority: 0x20},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: 3, PayloadLength: 1}, []byte("A")},
			{SubgroupObject{ObjectID: 4, Status: ObjectEndOfTrack}, nil},
		},
	},
	"stream-properties": {
		SubgroupHeader{TrackAlias: 1, GroupID: 1, HasProperties: true, DefaultPriority: true},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: 0, Properties: []byte{0x02, 0x64, 0x3c, 0x02}, PayloadLength: 3}, []byte("abc")},
			{SubgroupObject{ObjectID: 1, PayloadLength: 1}, []byte("d")},
			{SubgroupObject{ObjectID: 2, Status: ObjectEndOfGroup}, nil},
		},
	},
	"stream-properties-odd-type": {
		SubgroupHeader{TrackAlias: 2, GroupID: 3, HasProperties: true, Priority: 5},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: 0, Properties: []byte{0x0b, 0x02, 0x3c, 0x01, 0x6d, 0x7f}}, nil},
		},
	},
	"stream-end-of-group-flag": {
		SubgroupHeader{TrackAlias: 1, GroupID: 9, EndOfGroup: true, DefaultPriority: true},
		[]subgroupEntry{{SubgroupObject{ObjectID: 0}, nil}},
	},
	"stream-max-object-id": {
		SubgroupHeader{TrackAlias: 1, GroupID: 0, Priority: 0x80},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: MaxVarint - 1, PayloadLength: 1}, []byte("z")},
			{SubgroupObject{ObjectID: MaxVarint, PayloadLength: 1}, []byte("z")},
		},
	},
	"stream-two-byte-deltas": {
		SubgroupHeader{TrackAlias: 1, GroupID: 0, Priority: 0x80},
		[]subgroupEntry{
			{SubgroupObject{ObjectID: 300, PayloadLength: 1}, []byte("a")},
			{SubgroupObject{ObjectID: 501, PayloadLength: 1}, []byte("b")},
		},
	},
}

func TestSubgroupStreamVectors(t *testing.T) {
	vecs := loadVectors(t, "subgroup.txt")
	seen := 0
	for name, v := range vecs {
		if !strings.HasPrefix(name, "stream-") {
			continue
		}
		seen++
		t.Run(name, func(t *testing.T) {
			want, ok := subgroupStreams[name]
			require.True(t, ok, "no expected value for %s", name)
			h, entries, err := parseSubgroupStream(v.Bytes)
			require.NoError(t, err)
			assert.Equal(t, want.header, h)
			assert.Equal(t, want.entries, entries)
			for rname, mk := range readers(v.Bytes) {
				h, entries, err := readSubgroupStream(mk())
				require.NoError(t, err, rname)
				assert.Equal(t, want.header, h, rname)
				assert.Equal(t, want.entries, entries, rname)
			}
			b, err := appendSubgroupStream(nil, want.header, want.entries)
			require.NoError(t, err)
			assert.Equal(t, v.Bytes, b, "encoding matches the vector")
		})
	}
	assert.Equal(t, len(subgroupStreams), seen)
}

// TestSubgroupStreamPrefixes cuts every stream vector at every length. A
// subgroup stream ends with a FIN, so a prefix that ends exactly after the
// header or after an object's payload is itself a complete, valid stream
// holding the objects before the cut. Every other prefix ends inside a
// header or a payload and must fail as truncated.
func TestSubgroupStreamPrefixes(t *testing.T) {
	for name, v := range loadVectors(t, "subgroup.txt") {
		if !strings.HasPrefix(name, "stream-") {
			continue
		}
		want := subgroupStreams[name]
		h0, hn, err := ParseSubgroupHeader(v.Bytes)
		require.NoError(t, err)
		boundaries := map[int]int{hn: 0} // prefix length -> objects complete
		d := SubgroupDecoder{Header: h0}
		for k, rest := 1, v.Bytes[hn:]; len(rest) > 0; k++ {
			o, n, err := d.Parse(rest)
			require.NoError(t, err)
			rest = rest[n+int(o.PayloadLength):]
			boundaries[len(v.Bytes)-len(rest)] = k
		}
		for i := 0; i < len(v.Bytes); i++ {
			prefix := v.Bytes[:i]
			k, complete := boundaries[i]
			if !complete {
				_, _, err := parseSubgroupStream(prefix)
				requireTruncated(t, err)
				for _, mk := range readers(prefix) {
					_, _, err := readSubgroupStream(mk())
					if i == 0 {
						assert.Same(t, io.EOF, err)
					} else {
						requireTruncated(t, err)
					}
				}
				continue
			}
			h, entries, err := parseSubgroupStream(prefix)
			require.NoError(t, err, "%s[:%d] ends at a boundary", name, i)
			if want.header.SubgroupIDMode != SubgroupIDFirstObject || k > 0 {
				assert.Equal(t, want.header, h)
			}
			assert.Equal(t, want.entries[:k], nilIfNoEntries(entries))
			for rname, mk := range readers(prefix) {
				_, entries, err := readSubgroupStream(mk())
				require.NoError(t, err, rname)
				assert.Equal(t, want.entries[:k], nilIfNoEntries(entries), rname)
			}
		}
	}
}

func nilIfNoEntries(e []subgroupEntry) []subgroupEntry {
	if len(e) == 0 {
		return []subgroupEntry{}
	}
	return e
}

func TestSubgroupObjectErrors(t *testing.T) {
	plain := SubgroupHeader{TrackAlias: 1, Priority: 1}
	props := SubgroupHeader{TrackAlias: 1, Priority: 1, HasProperties: true}
	tests := []struct {
		name   string
		header SubgroupHeader
		hex    []byte
	}{
		{"status 0x1", plain, []byte{0x00, 0x00, 0x01}},
		{"status 0x2", plain, []byte{0x00, 0x00, 0x02}},
		{"status 0x5", plain, []byte{0x00, 0x00, 0x05}},
		{"status 0x100", plain, []byte{0x00, 0x00, 0x81, 0x00}},
		{"properties on End of Group", props, []byte{0x00, 0x02, 0x3e, 0x01, 0x00, 0x03}},
		{"properties on End of Track", props, []byte{0x00, 0x02, 0x3e, 0x01, 0x00, 0x04}},
		{"malformed properties", props, []byte{0x00, 0x01, 0x3e, 0x01, 0x61}},
		{"properties length over 65535 value", props, []byte{0x00, 0x04, 0x0b, 0xc1, 0x00, 0x00, 0x00, 0x00}},
		{"object after End of Group", plain, []byte{0x00, 0x00, 0x03, 0x00, 0x01, 0x61}},
		{"object after End of Track", plain, []byte{0x00, 0x00, 0x04, 0x00, 0x00, 0x00}},
		{"object ID overflow", plain, []byte{
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, // ID 2^64-1
			0x00, 0x00, 0x00, // 2^64-1 + 0 + 1
		}},
		{"object ID overflow by delta", plain, []byte{
			0x05, 0x00, 0x00,
			0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfa, 0x00, 0x00, // 5 + (2^64-6) + 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := SubgroupDecoder{Header: tt.header}
			b := tt.hex
			var err error
			for err == nil && len(b) > 0 {
				var o SubgroupObject
				var n int
				o, n, err = d.Parse(b)
				if err == nil {
					b = b[n+int(o.PayloadLength):]
				}
			}
			requireMalformed(t, err)
			for _, mk := range readers(tt.hex) {
				d := SubgroupDecoder{Header: tt.header}
				r := mk()
				for err = nil; err == nil; {
					var o SubgroupObject
					if o, err = d.Read(r, nil); err == nil {
						_, err = readPayload(r, o.PayloadLength)
					}
				}
				requireMalformed(t, err)
			}
		})
	}
}

func TestSubgroupObjectMaxOverflowBoundary(t *testing.T) {
	// 2^64-2 then delta 0 reaches 2^64-1 exactly: valid.
	d := SubgroupDecoder{Header: SubgroupHeader{}}
	first := append(AppendVarint(nil, MaxVarint-1), 0x00, 0x00)
	_, _, err := d.Parse(first)
	require.NoError(t, err)
	o, _, err := d.Parse([]byte{0x00, 0x00, 0x00})
	require.NoError(t, err)
	assert.Equal(t, uint64(MaxVarint), o.ObjectID)
}

func TestSubgroupDecoderStateUnchangedOnTruncation(t *testing.T) {
	d := SubgroupDecoder{Header: SubgroupHeader{SubgroupIDMode: SubgroupIDFirstObject, HasProperties: true}}
	full := []byte{0x07, 0x02, 0x3e, 0x01, 0x01, 0x61}
	for i := 1; i < 5; i++ {
		_, _, err := d.Parse(full[:i])
		requireTruncated(t, err)
		_, known := d.SubgroupID()
		assert.False(t, known, "a failed parse does not resolve the Subgroup ID")
	}
	o, n, err := d.Parse(full)
	require.NoError(t, err)
	assert.Equal(t, 5, n)
	assert.Equal(t, uint64(7), o.ObjectID)
	id, known := d.SubgroupID()
	assert.True(t, known)
	assert.Equal(t, uint64(7), id)
}

func TestSubgroupReadEnds(t *testing.T) {
	// An object header cut by FIN is a PROTOCOL_VIOLATION (§11.3); a FIN at
	// a boundary is io.EOF; a reset passes through.
	for _, cut := range [][]byte{{0x00}, {0x00, 0x00}, {0x00, 0x80}} {
		d := SubgroupDecoder{}
		_, err := d.Read(bytes.NewReader(cut), nil)
		requireTruncated(t, err)
	}

	d := SubgroupDecoder{}
	r := bytes.NewReader([]byte{0x00, 0x00, 0x00})
	_, err := d.Read(r, nil)
	require.NoError(t, err)
	_, err = d.Read(r, nil)
	assert.Same(t, io.EOF, err)

	reset := errors.New("reset")
	d = SubgroupDecoder{}
	_, err = d.Read(&errReader{b: []byte{0x00}, err: reset}, nil)
	assert.Same(t, reset, err)
	_, err = d.Read(&errReader{err: reset}, nil)
	assert.Same(t, reset, err)
}

func TestSubgroupReadPropertiesLimit(t *testing.T) {
	d := SubgroupDecoder{Header: SubgroupHeader{HasProperties: true}, MaxPropertiesLen: 3}
	_, err := d.Read(bytes.NewReader([]byte{0x00, 0x04, 0x3e, 0x01, 0x3e, 0x01, 0x00, 0x00}), nil)
	requireCode(t, err, InternalError)
	// Slices need no limit: the input bounds the block.
	_, _, err = d.Parse([]byte{0x00, 0x04, 0x3e, 0x01, 0x3e, 0x01, 0x00, 0x00})
	assert.NoError(t, err)
}

func TestSubgroupSubgroupIDModes(t *testing.T) {
	d := SubgroupDecoder{Header: SubgroupHeader{SubgroupIDMode: SubgroupIDZero}}
	id, known := d.SubgroupID()
	assert.True(t, known)
	assert.Zero(t, id)
	d = SubgroupDecoder{Header: SubgroupHeader{SubgroupIDMode: SubgroupIDPresent, SubgroupID: 4}}
	id, known = d.SubgroupID()
	assert.True(t, known)
	assert.Equal(t, uint64(4), id)
}

func TestSubgroupEncoderErrors(t *testing.T) {
	tests := []struct {
		name   string
		header SubgroupHeader
		prior  []SubgroupObject
		o      SubgroupObject
	}{
		{"repeated ID", SubgroupHeader{}, []SubgroupObject{{ObjectID: 4, PayloadLength: 1}}, SubgroupObject{ObjectID: 4, PayloadLength: 1}},
		{"decreasing ID", SubgroupHeader{}, []SubgroupObject{{ObjectID: 4, PayloadLength: 1}}, SubgroupObject{ObjectID: 2, PayloadLength: 1}},
		{"properties without flag", SubgroupHeader{}, nil, SubgroupObject{Properties: []byte{0x3e, 0x01}, PayloadLength: 1}},
		{"payload with status", SubgroupHeader{}, nil, SubgroupObject{PayloadLength: 1, Status: ObjectEndOfGroup}},
		{"properties with status", SubgroupHeader{HasProperties: true}, nil, SubgroupObject{Properties: []byte{0x3e, 0x01}, Status: ObjectEndOfTrack}},
		{"unknown status", SubgroupHeader{}, nil, SubgroupObject{Status: 2}},
		{"malformed properties", SubgroupHeader{HasProperties: true}, nil, SubgroupObject{Properties: []byte{0x3e}, PayloadLength: 1}},
		{"after End of Group", SubgroupHeader{}, []SubgroupObject{{ObjectID: 1, Status: ObjectEndOfGroup}}, SubgroupObject{ObjectID: 2, PayloadLength: 1}},
		{"first ID is not the subgroup ID", SubgroupHeader{SubgroupIDMode: SubgroupIDFirstObject, SubgroupID: 3}, nil, SubgroupObject{ObjectID: 4, PayloadLength: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := SubgroupEncoder{Header: tt.header}
			var b []byte
			for _, p := range tt.prior {
				var err error
				b, err = e.AppendObject(b, p)
				require.NoError(t, err)
			}
			before := bytes.Clone(b)
			b, err := e.AppendObject(b, tt.o)
			requireCode(t, err, ProtocolViolation)
			assert.Equal(t, before, b, "nothing appended")
		})
	}
}

func TestPadding(t *testing.T) {
	assert.NoError(t, CheckPadding(nil))
	assert.NoError(t, CheckPadding(make([]byte, 100)))
	requireMalformed(t, CheckPadding([]byte{0, 0, 1}))

	b := AppendPaddingStream(nil, 3)
	h, n, err := ParseStreamHeader(b)
	require.NoError(t, err)
	assert.Equal(t, StreamPadding, h.Type)
	assert.Equal(t, []byte{0, 0, 0}, b[n:])

	big := make([]byte, 10000)
	assert.NoError(t, DiscardPadding(bytes.NewReader(big)))
	big[9999] = 0x80
	requireMalformed(t, DiscardPadding(bytes.NewReader(big)))
	reset := errors.New("reset")
	assert.Same(t, reset, DiscardPadding(io.MultiReader(bytes.NewReader(make([]byte, 10)), iotestErr{reset})))
}

type iotestErr struct{ err error }

func (r iotestErr) Read([]byte) (int, error) { return 0, r.err }

func TestSubgroupAllocations(t *testing.T) {
	h := SubgroupHeader{TrackAlias: 9, GroupID: 300, SubgroupIDMode: SubgroupIDPresent, SubgroupID: 2,
		HasProperties: true, Priority: 7}
	o := SubgroupObject{ObjectID: 5, Properties: []byte{0x3e, 0x01, 0x0b, 0x01, 0xff}, PayloadLength: 1200}
	buf := make([]byte, 0, 64)

	encode := testing.AllocsPerRun(100, func() {
		b, _ := h.Append(buf[:0])
		e := SubgroupEncoder{Header: h}
		_, _ = e.AppendObject(b, o)
	})
	assert.Zero(t, encode, "encoding a header and an object header into a reused buffer")

	e := SubgroupEncoder{Header: h}
	wire, err := e.AppendObject(nil, o)
	require.NoError(t, err)
	parse := testing.AllocsPerRun(100, func() {
		d := SubgroupDecoder{Header: h}
		if _, _, err := d.Parse(wire); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, parse, "parsing an object header from a slice")

	br := bytes.NewReader(wire)
	props := make([]byte, 0, 16)
	read := testing.AllocsPerRun(100, func() {
		br.Reset(wire)
		d := SubgroupDecoder{Header: h}
		if _, err := d.Read(br, props); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, read, "reading an object header with a reused properties buffer")
}

func BenchmarkSubgroupEncode(b *testing.B) {
	h := SubgroupHeader{TrackAlias: 9, GroupID: 300, SubgroupIDMode: SubgroupIDPresent, SubgroupID: 2, Priority: 7}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		out, _ := h.Append(buf[:0])
		e := SubgroupEncoder{Header: h}
		out, _ = e.AppendObject(out, SubgroupObject{ObjectID: uint64(i), PayloadLength: 1200})
		buf = out
	}
}

func BenchmarkSubgroupParse(b *testing.B) {
	h := SubgroupHeader{HasProperties: true}
	e := SubgroupEncoder{Header: h}
	wire, _ := e.AppendObject(nil, SubgroupObject{ObjectID: 5, Properties: []byte{0x3e, 0x01}, PayloadLength: 1200})
	b.ReportAllocs()
	for b.Loop() {
		d := SubgroupDecoder{Header: h}
		if _, _, err := d.Parse(wire); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSubgroupRead(b *testing.B) {
	h := SubgroupHeader{HasProperties: true}
	e := SubgroupEncoder{Header: h}
	wire, _ := e.AppendObject(nil, SubgroupObject{ObjectID: 5, Properties: []byte{0x3e, 0x01}, PayloadLength: 1200})
	br := bytes.NewReader(wire)
	props := make([]byte, 0, 16)
	b.ReportAllocs()
	for b.Loop() {
		br.Reset(wire)
		d := SubgroupDecoder{Header: h}
		if _, err := d.Read(br, props); err != nil {
			b.Fatal(err)
		}
	}
}
