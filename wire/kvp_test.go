package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKVListGolden(t *testing.T) {
	vecs := loadVectors(t, "kvp.txt")
	cases := map[string]KVList{
		"empty": nil,
		"even-and-odd": {
			{Type: 0x02, Value: 5000},
			{Type: 0x07, Bytes: []byte("moqt-go")},
		},
		"repeat-type": {
			{Type: 0x3C, Value: 2},
			{Type: 0x3C, Value: 3},
		},
		"empty-bytes": {{Type: 0x01, Bytes: []byte{}}},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			vec, ok := vecs[name]
			require.True(t, ok)
			got, err := ParseKVList(vec.Bytes)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			enc, err := want.Append(nil)
			require.NoError(t, err)
			assert.Equal(t, vec.Bytes, enc)
			// A KVP block is bounded by an outer length, so every proper
			// prefix that cuts a pair in two must fail.
			boundaries := map[int]bool{}
			for k := range len(want) + 1 {
				head, err := want[:k].Append(nil)
				require.NoError(t, err)
				boundaries[len(head)] = true
			}
			for i := range len(vec.Bytes) {
				_, err := ParseKVList(vec.Bytes[:i])
				if boundaries[i] {
					assert.NoError(t, err, "prefix %d ends on a pair boundary", i)
				} else {
					assert.ErrorIs(t, err, ErrTruncated, "prefix %d", i)
				}
			}
		})
	}
}

func TestKVListErrors(t *testing.T) {
	t.Run("descending types cannot be encoded", func(t *testing.T) {
		_, err := KVList{{Type: 4}, {Type: 2}}.Append(nil)
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("odd length over 65535", func(t *testing.T) {
		b := AppendVarint(AppendVarint(nil, 1), MaxKVBytesLen+1)
		b = append(b, make([]byte, MaxKVBytesLen+1)...)
		_, err := ParseKVList(b)
		requireProtocolError(t, err, ProtocolViolation)
		_, err = KVList{{Type: 1, Bytes: make([]byte, MaxKVBytesLen+1)}}.Append(nil)
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("odd length 65535 ok", func(t *testing.T) {
		l := KVList{{Type: 1, Bytes: make([]byte, MaxKVBytesLen)}}
		b, err := l.Append(nil)
		require.NoError(t, err)
		got, err := ParseKVList(b)
		require.NoError(t, err)
		assert.Len(t, got[0].Bytes, MaxKVBytesLen)
	})
	t.Run("type delta overflow", func(t *testing.T) {
		b := AppendVarint(nil, 2)
		b = AppendVarint(b, 0)
		b = AppendVarint(b, MaxVarint-1) // 2 + (2^64-2) overflows
		b = AppendVarint(b, 0)
		_, err := ParseKVList(b)
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("type reaching 2^64-1 exactly is fine", func(t *testing.T) {
		b := AppendVarint(nil, 2)
		b = AppendVarint(b, 0)
		b = AppendVarint(b, MaxVarint-2)
		b = appendLenBytes(b, []byte("x"))
		got, err := ParseKVList(b)
		require.NoError(t, err)
		assert.Equal(t, uint64(MaxVarint), got[1].Type)
	})
}

func TestWalkKVAllocatesNothing(t *testing.T) {
	b, err := KVList{{Type: 2, Value: 9}, {Type: 0x0B, Bytes: []byte("imm")}, {Type: 0x3C, Value: 1}}.Append(nil)
	require.NoError(t, err)
	count := 0
	allocs := testing.AllocsPerRun(100, func() {
		count = 0
		_ = WalkKV(b, func(KeyValue) error { count++; return nil })
	})
	assert.Zero(t, allocs)
	assert.Equal(t, 3, count)
}

// immutableKV wraps inner in an IMMUTABLE_PROPERTIES pair (§10.7).
func immutableKV(t *testing.T, inner KVList) KeyValue {
	t.Helper()
	b, err := inner.Append(nil)
	require.NoError(t, err)
	return KeyValue{Type: PropImmutableProperties, Bytes: b}
}

// TestPropertyLookup: a property's value is looked for among the
// properties and inside IMMUTABLE_PROPERTIES (§10.7); when both hold it,
// the immutable one is taken (§10.7 is silent). Lists and encoded blocks
// give the same answers.
func TestPropertyLookup(t *testing.T) {
	const p = PropDefaultPublisherPriority
	cases := []struct {
		name  string
		props KVList
		want  uint64
		found bool
	}{
		{"absent", KVList{{Type: 0x02, Value: 5}}, 0, false},
		{"mutable", KVList{{Type: p, Value: 7}}, 7, true},
		{"mutable repeated: the first", KVList{{Type: p, Value: 7}, {Type: p, Value: 8}}, 7, true},
		{"immutable only", KVList{immutableKV(t, KVList{{Type: 0x02, Value: 1}, {Type: p, Value: 9}})}, 9, true},
		{"both: the immutable", KVList{immutableKV(t, KVList{{Type: p, Value: 9}}), {Type: p, Value: 7}}, 9, true},
		{"immutable without it", KVList{immutableKV(t, KVList{{Type: 0x02, Value: 1}}), {Type: p, Value: 7}}, 7, true},
		{"nested immutable not searched", KVList{immutableKV(t, KVList{immutableKV(t, KVList{{Type: p, Value: 9}})})}, 0, false},
		{"after an unparseable pair: not searched", KVList{{Type: PropImmutableProperties, Bytes: []byte{0x02}}}, 0, false},
		{"before an unparseable pair", KVList{{Type: PropImmutableProperties, Bytes: []byte{0x0E, 0x09, 0x02}}}, 9, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kv, ok := c.props.Lookup(p)
			assert.Equal(t, c.found, ok)
			assert.Equal(t, c.want, kv.Value)
			block, err := c.props.Append(nil)
			require.NoError(t, err)
			kv, ok = LookupProperty(block, p)
			assert.Equal(t, c.found, ok, "encoded")
			assert.Equal(t, c.want, kv.Value, "encoded")
		})
	}
	t.Run("odd type", func(t *testing.T) {
		l := KVList{immutableKV(t, KVList{{Type: 0x79, Bytes: []byte("in")}})}
		kv, ok := l.Lookup(0x79)
		require.True(t, ok)
		assert.Equal(t, []byte("in"), kv.Bytes)
	})
}

// TestEachProperty: every instance is visited in order, those inside
// IMMUTABLE_PROPERTIES marked, until the callback stops.
func TestEachProperty(t *testing.T) {
	const p = PropObjectDeliveryTimeout
	l := KVList{{Type: p, Value: 1}, immutableKV(t, KVList{{Type: p, Value: 2}, {Type: p, Value: 3}}), {Type: 0x3C, Value: 4}}
	block, err := l.Append(nil)
	require.NoError(t, err)
	type seen struct {
		v   uint64
		imm bool
	}
	collect := func(each func(fn func(KeyValue, bool) bool), limit int) []seen {
		var got []seen
		each(func(kv KeyValue, imm bool) bool {
			got = append(got, seen{kv.Value, imm})
			return len(got) < limit
		})
		return got
	}
	all := []seen{{1, false}, {2, true}, {3, true}}
	fromList := func(fn func(KeyValue, bool) bool) { l.EachProperty(p, fn) }
	fromBlock := func(fn func(KeyValue, bool) bool) { EachProperty(block, p, fn) }
	assert.Equal(t, all, collect(fromList, 10))
	assert.Equal(t, all, collect(fromBlock, 10))
	assert.Equal(t, all[:2], collect(fromList, 2), "stopped inside IMMUTABLE_PROPERTIES")
	assert.Equal(t, all[:2], collect(fromBlock, 2), "stopped inside IMMUTABLE_PROPERTIES")
	assert.Equal(t, all[:1], collect(fromBlock, 1))
}

// TestLookupPropertyAllocatesNothing: object-level lookups run per object.
func TestLookupPropertyAllocatesNothing(t *testing.T) {
	l := KVList{{Type: PropObjectDeliveryTimeout, Value: 1}, immutableKV(t, KVList{{Type: PropSubgroupDeliveryTimeout, Value: 2}}), {Type: 0x3C, Value: 4}}
	block, err := l.Append(nil)
	require.NoError(t, err)
	var got uint64
	allocs := testing.AllocsPerRun(100, func() {
		kv, _ := LookupProperty(block, PropSubgroupDeliveryTimeout)
		got = kv.Value
		kv, _ = l.Lookup(PropSubgroupDeliveryTimeout)
		got += kv.Value
	})
	assert.Zero(t, allocs)
	assert.Equal(t, uint64(4), got)
}

func TestTokenRoundTrip(t *testing.T) {
	vecs := loadVectors(t, "token.txt")
	// Built by the constructors: the golden bytes check them too.
	cases := map[string]Token{
		"delete":    DeleteTokenAlias(7),
		"register":  RegisterToken(1, TokenTypeOutOfBand, []byte("jwt")),
		"use-alias": UseTokenAlias(300),
		"use-value": UseToken(2, []byte{}),
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			vec, ok := vecs[name]
			require.True(t, ok)
			got, err := ParseToken(vec.Bytes)
			require.NoError(t, err)
			if want.Value == nil {
				assert.Nil(t, got.Value)
			}
			assert.Equal(t, want.AliasType, got.AliasType)
			assert.Equal(t, want.Alias, got.Alias)
			assert.Equal(t, want.Type, got.Type)
			assert.Equal(t, string(want.Value), string(got.Value))
			enc, err := want.Append(nil)
			require.NoError(t, err)
			assert.Equal(t, vec.Bytes, enc)
		})
	}
	assert.Equal(t, uint64(19), cases["register"].CacheSize())
}

// TestTokenConstructors: each constructor fills the fields its alias type
// carries, and only those.
func TestTokenConstructors(t *testing.T) {
	v := []byte("secret")
	assert.Equal(t, Token{AliasType: TokenUseValue, Type: 5, Value: v}, UseToken(5, v))
	assert.Equal(t, Token{AliasType: TokenRegister, Alias: 3, Type: 5, Value: v}, RegisterToken(3, 5, v))
	assert.Equal(t, Token{AliasType: TokenUseAlias, Alias: 3}, UseTokenAlias(3))
	assert.Equal(t, Token{AliasType: TokenDelete, Alias: 3}, DeleteTokenAlias(3))
	assert.Equal(t, uint64(0), uint64(TokenTypeOutOfBand), "§8.9: Type 0 is negotiated out of band")
}

func TestTokenErrors(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":              {},
		"unknown alias type": {0x04},
		"delete no alias":    {0x00},
		"delete with value":  {0x00, 0x01, 0x02},
		"register no type":   {0x01, 0x01},
		"use-value no type":  {0x03},
		"use-alias extra":    {0x02, 0x05, 0x00},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseToken(b)
			requireProtocolError(t, err, KeyValueFormattingError)
		})
	}
	_, err := Token{AliasType: 9}.Append(nil)
	assert.Error(t, err)
}

func TestCodesString(t *testing.T) {
	assert.Equal(t, "PROTOCOL_VIOLATION", ProtocolViolation.String())
	assert.Equal(t, "TOO_MANY_REQUEST_UPDATES", TooManyRequestUpdates.String())
	assert.Equal(t, "INVALID_FILTER", ReqInvalidFilter.String())
	assert.Equal(t, "MALFORMED_TRACK", DoneMalformedTrack.String())
	assert.Equal(t, "DELIVERY_TIMEOUT", ResetDeliveryTimeout.String())
	// Unknown codes stay representable.
	assert.Equal(t, "0x9d", RequestErrorCode(0x9d).String())
	assert.False(t, RequestErrorCode(0x9d).Known())
	assert.False(t, PublishDoneCode(0x3).Known(), "SUBSCRIPTION_ENDED was removed in draft 20")
	assert.False(t, SessionErrorCode(0x15).Known(), "VERSION_NEGOTIATION_FAILED was removed")
	assert.True(t, ResetMalformedTrack.Known())
	assert.True(t, IsGrease(0x9D))
	assert.True(t, IsGrease(0x11C))
	assert.True(t, IsGrease(0x3fffffffffffffde))
	assert.False(t, IsGrease(0x9E))
	assert.False(t, IsGrease(0x3fffffffffffffde+0x7f))
}

func TestVersion(t *testing.T) {
	assert.Equal(t, []string{"moqt-21", "moqt-20", "moqt-19", "moqt-18"}, ALPNs())
	v, ok := ParseALPN("moqt-20")
	require.True(t, ok)
	assert.Equal(t, Draft20, v)
	v, ok = ParseALPN("moqt-18")
	require.True(t, ok)
	assert.Equal(t, Draft18, v)
	_, ok = ParseALPN("moqt-17")
	assert.False(t, ok)
	_, ok = ParseALPN("h3")
	assert.False(t, ok)
	assert.True(t, Draft21.Supported())
	assert.True(t, Version(19).Supported())
	assert.False(t, Version(17).Supported())
	assert.Nil(t, Version(17).Profile())
}
