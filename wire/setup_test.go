package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func setupBody(options ...any) []byte { return rawBody(options...) }

func TestSetupDuplicateKnownOption(t *testing.T) {
	for name, body := range map[string][]byte{
		"PATH":                      setupBody(1, 1, "/", 0, 1, "/"),
		"MAX_AUTH_TOKEN_CACHE_SIZE": setupBody(4, 10, 0, 10),
		"AUTHORITY":                 setupBody(5, 1, "a", 0, 1, "b"),
		"MAX_FILTER_RANGES":         setupBody(6, 1, 0, 1),
		"MOQT_IMPLEMENTATION":       setupBody(7, 1, "x", 0, 1, "x"),
		"MAX_REQUEST_UPDATES":       setupBody(8, 0, 0, 0),
	} {
		_, err := ParseMessage(Draft21, MsgSetup, body)
		assertCloses(t, err, ProtocolViolation)
		assert.Contains(t, err.Error(), name)
	}
	// AUTHORIZATION_TOKEN may repeat; unknown options may repeat.
	m, err := ParseMessage(Draft21, MsgSetup, setupBody(3, 2, 3, 0, 0, 2, 3, 1, 7, 0, 0, 0))
	require.NoError(t, err)
	s := m.(*Setup)
	assert.Len(t, s.AuthorizationTokens, 2)
	assert.Equal(t, KVList{{Type: 0x0A, Value: 0}, {Type: 0x0A, Value: 0}}, s.Unknown)
}

func TestSetupMalformedToken(t *testing.T) {
	for name, tok := range map[string][]byte{
		"unknown alias type":     rawBody(4),
		"USE_ALIAS with a value": rawBody(2, 1, 0),
		"truncated":              {},
	} {
		_, err := ParseMessage(Draft21, MsgSetup, setupBody(3, len(tok), tok))
		assertCloses(t, err, KeyValueFormattingError)
		_ = name
	}
}

func TestSetupMalformedKeyValue(t *testing.T) {
	// A type delta past 2^64-1 (§8.3).
	_, err := ParseMessage(Draft21, MsgSetup, setupBody(2, 0, uint64(MaxVarint), 0))
	assertCloses(t, err, ProtocolViolation)
	// An odd option whose length runs past the body.
	_, err = ParseMessage(Draft21, MsgSetup, setupBody(7, 5, "abc"))
	assertCloses(t, err, ProtocolViolation)
	assert.ErrorIs(t, err, ErrTruncated)
	// An even option without its value.
	_, err = ParseMessage(Draft21, MsgSetup, setupBody(8))
	assert.ErrorIs(t, err, ErrTruncated)
}

func TestSetupPresenceIsDistinctFromZero(t *testing.T) {
	m, err := ParseMessage(Draft21, MsgSetup, setupBody(1, 0, 3, 0, 4, 0))
	require.NoError(t, err)
	s := m.(*Setup)
	assert.Equal(t, Some(""), s.Path)
	assert.Equal(t, Some[uint64](0), s.MaxAuthTokenCacheSize)
	assert.Equal(t, Some[uint64](0), s.MaxRequestUpdates)
	assert.False(t, s.MaxFilterRanges.Set)
	assert.False(t, s.Authority.Set)
}

func TestSetupEncodeMergesUnknownInOrder(t *testing.T) {
	s := &Setup{
		Path:              Some("/x"),
		MaxRequestUpdates: Some[uint64](1),
		Unknown: KVList{
			{Type: 0x00, Value: 9},
			{Type: 0x02, Value: 7},
			{Type: 0x02, Value: 8},
			{Type: 0x3F, Bytes: []byte("e")},
			{Type: MaxVarint, Bytes: []byte{}},
			{Type: MaxVarint, Bytes: []byte("z")},
		},
	}
	body := bodyOf(t, s)
	assert.Equal(t, setupBody(0, 9, 1, 2, "/x", 1, 7, 0, 8, 6, 1, 0x37, 1, "e",
		uint64(MaxVarint-0x3F), 0, 0, 1, "z"), body)
	var got Setup
	require.NoError(t, got.ParseBody(Draft21, body))
	assert.Equal(t, s, &got)
}

func TestSetupEncodeErrors(t *testing.T) {
	for name, s := range map[string]*Setup{
		"known type in Unknown": {Unknown: KVList{{Type: uint64(SetupPath), Bytes: []byte("/")}}},
		"Unknown out of order":  {Unknown: KVList{{Type: 0x20}, {Type: 0x0A}}},
		"Unknown long value":    {Unknown: KVList{{Type: 0x21, Bytes: make([]byte, MaxKVBytesLen+1)}}},
		"long text":             {MoqtImplementation: Some(string(make([]byte, MaxKVBytesLen+1)))},
		"long token":            {AuthorizationTokens: []Token{{AliasType: TokenUseValue, Value: make([]byte, MaxKVBytesLen)}}},
		"bad token":             {AuthorizationTokens: []Token{{AliasType: 9}}},
	} {
		_, err := s.AppendBody(Draft21, nil)
		assertCloses(t, err, ProtocolViolation)
		_ = name
	}
}

func TestSetupCheck(t *testing.T) {
	tokens := func(at TokenAliasType) []Token { return []Token{{AliasType: at, Alias: 1}} }
	cases := []struct {
		name         string
		s            Setup
		fromClient   bool
		webTransport bool
		code         SessionErrorCode // NoError: accepted
	}{
		{"client PATH on QUIC", Setup{Path: Some("/live?x=1")}, true, false, NoError},
		{"server PATH", Setup{Path: Some("/")}, false, false, InvalidPath},
		{"PATH over WebTransport", Setup{Path: Some("/")}, true, true, InvalidPath},
		{"malformed PATH", Setup{Path: Some("live")}, true, false, MalformedPath},
		{"client AUTHORITY on QUIC", Setup{Authority: Some("relay.example:4433")}, true, false, NoError},
		{"server AUTHORITY", Setup{Authority: Some("a")}, false, false, InvalidAuthority},
		{"AUTHORITY over WebTransport", Setup{Authority: Some("a")}, true, true, InvalidAuthority},
		{"malformed AUTHORITY", Setup{Authority: Some(":443")}, true, false, MalformedAuthority},
		{"DELETE to a server", Setup{AuthorizationTokens: tokens(TokenDelete)}, true, false, ProtocolViolation},
		{"USE_ALIAS to a server", Setup{AuthorizationTokens: tokens(TokenUseAlias)}, true, false, ProtocolViolation},
		{"REGISTER to a server", Setup{AuthorizationTokens: tokens(TokenRegister)}, true, false, NoError},
		{"USE_VALUE to a server", Setup{AuthorizationTokens: tokens(TokenUseValue)}, true, true, NoError},
		{"USE_ALIAS to a client", Setup{AuthorizationTokens: tokens(TokenUseAlias)}, false, false, NoError},
		{"server SETUP without options", Setup{}, false, true, NoError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.Check(c.fromClient, c.webTransport)
			if c.code == NoError {
				assert.NoError(t, err)
				return
			}
			assertCloses(t, err, c.code)
		})
	}
}

func TestSetupOptionTypeString(t *testing.T) {
	assert.Equal(t, "MAX_REQUEST_UPDATES", SetupMaxRequestUpdates.String())
	assert.Equal(t, "0x9d", SetupOptionType(0x9D).String())
	assert.True(t, SetupAuthority.Known())
	assert.False(t, SetupOptionType(0x02).Known(), "MAX_REQUEST_ID is gone")
}
