package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// datagrams maps datagram.txt vectors to their decoded value; nil means a
// padding datagram.
var datagrams = map[string]*ObjectDatagram{
	"payload":           {TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 0x80, Payload: []byte("hello")},
	"properties":        {TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 0x80, Properties: []byte{0x0b, 0x02, 0x3c, 0x01}, Payload: []byte("x")},
	"end-of-group":      {TrackAlias: 1, GroupID: 2, ObjectID: 3, EndOfGroup: true, Priority: 0x80, Payload: []byte("y")},
	"zero-object-id":    {TrackAlias: 1, GroupID: 2, ObjectID: 0, Priority: 0x80, Payload: []byte("z")},
	"default-priority":  {TrackAlias: 1, GroupID: 2, ObjectID: 3, DefaultPriority: true, Payload: []byte("a")},
	"all-payload-flags": {TrackAlias: 5, GroupID: 6, EndOfGroup: true, DefaultPriority: true, Properties: []byte{0x3e, 0x01}, Payload: []byte("AB")},
	"empty-payload":     {TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 0x80},
	"status-end-of-group": {TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 0x80,
		HasStatus: true, Status: ObjectEndOfGroup},
	"status-end-of-track-default-priority": {TrackAlias: 1, GroupID: 2, ObjectID: 7, DefaultPriority: true,
		HasStatus: true, Status: ObjectEndOfTrack},
	"status-normal-properties": {TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 0x80,
		Properties: []byte{0x3e, 0x00}, HasStatus: true, Status: ObjectNormal},
	"status-zero-object-id": {TrackAlias: 1, GroupID: 2, Priority: 0x80, HasStatus: true, Status: ObjectEndOfTrack},
	"status-all-flags": {TrackAlias: 1, GroupID: 2, DefaultPriority: true, Properties: []byte{0x3c, 0x05},
		HasStatus: true, Status: ObjectNormal},
	"large-values":                         {TrackAlias: MaxVarint, GroupID: 226442877, ObjectID: 15293},
	"padding":                              nil,
	"padding-empty":                        nil,
	"explicit-zero-object-id-noncanonical": {TrackAlias: 1, GroupID: 2, Priority: 0x80},
	"two-byte-type-noncanonical":           {TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 0x80, Payload: []byte("A")},
}

func TestDatagramVectors(t *testing.T) {
	vecs := loadVectors(t, "datagram.txt")
	assert.Len(t, vecs, len(datagrams), "every vector has an expected value")
	for name, v := range vecs {
		t.Run(name, func(t *testing.T) {
			want, ok := datagrams[name]
			require.True(t, ok, "no expected value for %s", name)
			d, padding, err := ParseDatagram(v.Bytes)
			require.NoError(t, err)
			if want == nil {
				assert.True(t, padding)
				assert.Equal(t, ObjectDatagram{}, d)
				assert.Equal(t, v.Bytes, AppendPaddingDatagram(nil, len(v.Bytes)-5))
				return
			}
			assert.False(t, padding)
			assert.Equal(t, *want, d)
			if !strings.HasSuffix(name, "-noncanonical") {
				b, err := want.Append(nil)
				require.NoError(t, err)
				assert.Equal(t, v.Bytes, b, "encoding matches the vector")
			}
		})
	}
}

// TestDatagramPrefixes cuts every vector at every length. A datagram's
// payload runs to its end (§11.2.1), so a prefix that keeps the whole header
// of a payload-carrying datagram is itself a valid datagram with a shorter
// payload; likewise a padding datagram cut after its type is a shorter
// padding datagram (§11.5.2). Every other strict prefix must fail as
// truncated.
func TestDatagramPrefixes(t *testing.T) {
	for name, v := range loadVectors(t, "datagram.txt") {
		want := datagrams[name]
		validFrom := len(v.Bytes) // shortest prefix that is itself valid
		switch {
		case want == nil:
			validFrom = 5 // the padding type is a 5-byte vi64
		case !want.HasStatus:
			validFrom = len(v.Bytes) - len(want.Payload)
		}
		for i := 0; i < len(v.Bytes); i++ {
			d, padding, err := ParseDatagram(v.Bytes[:i])
			if i < validFrom {
				requireTruncated(t, err)
				continue
			}
			require.NoError(t, err, "%s[:%d]", name, i)
			if want == nil {
				assert.True(t, padding)
				continue
			}
			shorter := *want
			shorter.Payload = nilIfEmpty(v.Bytes[validFrom:i])
			assert.Equal(t, shorter, d, "%s[:%d]", name, i)
		}
	}
}

// validDatagramType is §11.2.1's rule, written out: only bits 0x01, 0x02,
// 0x04, 0x08 and 0x20 may be set, and not both STATUS and END_OF_GROUP.
func validDatagramType(v uint64) bool {
	if v&^0x2F != 0 {
		return false
	}
	return !(v&0x20 != 0 && v&0x02 != 0)
}

// datagramBody builds an otherwise valid datagram of type v.
func datagramBody(v uint64) []byte {
	b := append(AppendVarint(nil, v), 0x01, 0x02) // alias, group
	if v&0x04 == 0 {
		b = append(b, 0x03) // object ID
	}
	if v&0x08 == 0 {
		b = append(b, 0x80) // priority
	}
	if v&0x01 != 0 {
		b = append(b, 0x02, 0x3e, 0x01) // properties
	}
	if v&0x20 != 0 {
		return append(b, 0x00) // status Normal
	}
	return append(b, 'p')
}

func TestDatagramTypesExhaustive(t *testing.T) {
	valid := 0
	for v := uint64(0); v <= 0x3F; v++ {
		d, padding, err := ParseDatagram(datagramBody(v))
		if !validDatagramType(v) {
			requireMalformed(t, err)
			continue
		}
		valid++
		require.NoError(t, err, "type 0x%x", v)
		assert.False(t, padding)
		b, err := d.Append(nil)
		require.NoError(t, err)
		assert.Equal(t, datagramBody(v), b, "type 0x%x re-encodes to the same bytes", v)
	}
	// 0x00-0x0F, then 0x20-0x2F without END_OF_GROUP.
	assert.Equal(t, 16+8, valid)
	for _, v := range []uint64{0x40, 0x41, 0x50, 0x7F, 0x80, 0xFF, 0x100, 0x2F00, PaddingStreamType, 1 << 40, MaxVarint} {
		_, _, err := ParseDatagram(datagramBody(v))
		requireMalformed(t, err)
	}
}

func TestDatagramErrors(t *testing.T) {
	tests := []struct {
		name string
		hex  []byte
	}{
		{"zero-length properties", []byte{0x01, 0x01, 0x02, 0x03, 0x80, 0x00, 0x61}},
		{"zero-length properties with status", []byte{0x21, 0x01, 0x02, 0x03, 0x80, 0x00, 0x00}},
		{"properties on End of Group status", []byte{0x21, 0x01, 0x02, 0x03, 0x80, 0x02, 0x3e, 0x01, 0x03}},
		{"properties on End of Track status", []byte{0x21, 0x01, 0x02, 0x03, 0x80, 0x02, 0x3e, 0x01, 0x04}},
		{"status 0x1", []byte{0x20, 0x01, 0x02, 0x03, 0x80, 0x01}},
		{"status 0x2", []byte{0x20, 0x01, 0x02, 0x03, 0x80, 0x02}},
		{"status 0x5", []byte{0x20, 0x01, 0x02, 0x03, 0x80, 0x05}},
		{"bytes after the status", []byte{0x20, 0x01, 0x02, 0x03, 0x80, 0x03, 0x00}},
		{"malformed properties", []byte{0x01, 0x01, 0x02, 0x03, 0x80, 0x01, 0x3e, 0x61}},
		{"STATUS and END_OF_GROUP", []byte{0x22, 0x01, 0x02, 0x03, 0x80, 0x03}},
		{"reserved bit 0x10", []byte{0x10, 0x01, 0x02, 0x03, 0x80}},
		{"non-zero padding", []byte{0xf0, 0x13, 0x2b, 0x3e, 0x29, 0x00, 0x01}},
	}
	for _, tt := range tests {
		_, _, err := ParseDatagram(tt.hex)
		requireMalformed(t, err)
	}
	_, _, err := ParseDatagram(nil)
	requireTruncated(t, err)
}

func TestDatagramAppendErrors(t *testing.T) {
	tests := []struct {
		name string
		d    ObjectDatagram
	}{
		{"status with END_OF_GROUP", ObjectDatagram{HasStatus: true, EndOfGroup: true}},
		{"End of Group status with END_OF_GROUP", ObjectDatagram{Status: ObjectEndOfGroup, EndOfGroup: true}},
		{"status with payload", ObjectDatagram{Status: ObjectEndOfTrack, Payload: []byte("x")}},
		{"explicit status with payload", ObjectDatagram{HasStatus: true, Payload: []byte("x")}},
		{"properties on a non-Normal status", ObjectDatagram{Status: ObjectEndOfGroup, Properties: []byte{0x3e, 0x01}}},
		{"unknown status", ObjectDatagram{Status: 7}},
		{"malformed properties", ObjectDatagram{Properties: []byte{0x0b, 0x05}}},
	}
	for _, tt := range tests {
		b, err := tt.d.Append([]byte{0xaa})
		requireCode(t, err, ProtocolViolation)
		assert.Equal(t, []byte{0xaa}, b, "%s: nothing appended", tt.name)
	}
	// A non-Normal Status implies the STATUS flag.
	b, err := ObjectDatagram{TrackAlias: 1, GroupID: 2, ObjectID: 3, Priority: 4, Status: ObjectEndOfGroup}.Append(nil)
	require.NoError(t, err)
	assert.Equal(t, []byte{0x20, 0x01, 0x02, 0x03, 0x04, 0x03}, b)
}

func TestDatagramAllocations(t *testing.T) {
	d := ObjectDatagram{TrackAlias: 3, GroupID: 1000, ObjectID: 7, Priority: 9,
		Properties: []byte{0x3e, 0x01}, Payload: make([]byte, 1000)}
	buf := make([]byte, 0, 1100)
	encode := testing.AllocsPerRun(100, func() { _, _ = d.Append(buf[:0]) })
	assert.Zero(t, encode)
	wire, err := d.Append(nil)
	require.NoError(t, err)
	parse := testing.AllocsPerRun(100, func() {
		if _, _, err := ParseDatagram(wire); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, parse)
}

func BenchmarkDatagramEncode(b *testing.B) {
	d := ObjectDatagram{TrackAlias: 3, GroupID: 1000, ObjectID: 7, Priority: 9, Payload: make([]byte, 1000)}
	buf := make([]byte, 0, 1100)
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = d.Append(buf[:0])
	}
}

func BenchmarkDatagramParse(b *testing.B) {
	d := ObjectDatagram{TrackAlias: 3, GroupID: 1000, ObjectID: 7, Priority: 9,
		Properties: []byte{0x3e, 0x01}, Payload: make([]byte, 1000)}
	wire, _ := d.Append(nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseDatagram(wire); err != nil {
			b.Fatal(err)
		}
	}
}
