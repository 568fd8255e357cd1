package wire

import "fmt"

// TokenAliasType says how a Token is serialized and processed (§8.9).
type TokenAliasType uint64

// Token alias types (§8.9).
const (
	TokenDelete   TokenAliasType = 0x0 // Alias only: retire the alias
	TokenRegister TokenAliasType = 0x1 // Alias, Type, Value: register and use
	TokenUseAlias TokenAliasType = 0x2 // Alias only: use a registered token
	TokenUseValue TokenAliasType = 0x3 // Type, Value: use as given
)

func (t TokenAliasType) String() string {
	switch t {
	case TokenDelete:
		return "DELETE"
	case TokenRegister:
		return "REGISTER"
	case TokenUseAlias:
		return "USE_ALIAS"
	case TokenUseValue:
		return "USE_VALUE"
	}
	return fmt.Sprintf("0x%x", uint64(t))
}

// Token is the Authorization Token structure (§8.9), carried by the
// AUTHORIZATION_TOKEN Setup Option and Message Parameter. Which of Alias,
// Type and Value are meaningful depends on AliasType; UseToken,
// RegisterToken, UseTokenAlias and DeleteTokenAlias make each kind.
type Token struct {
	// AliasType says how the token travels: its Type and Value as they
	// are (USE_VALUE), or registered under, used by or retired from an
	// Alias of the sender's (REGISTER, USE_ALIAS, DELETE).
	AliasType TokenAliasType
	// Alias names a registration in the receiver's token cache. Each
	// endpoint has its own alias space; the receiver's
	// MAX_AUTH_TOKEN_CACHE_SIZE bounds what may be registered.
	Alias uint64
	// Type says what kind of credential Value is and how it is encoded: a
	// number from the "MOQT Auth Token Type" registry (§16.6), or
	// TokenTypeOutOfBand for a kind the endpoints agreed on themselves.
	// It is not the AliasType. The receiver's authorization decides on
	// Type and Value together.
	Type uint64
	// Value is the credential itself, opaque to MoQT: a bearer token, a
	// signed JWT, whatever Type says.
	Value []byte
}

// TokenTypeOutOfBand is the Token Type of a credential whose kind is not in
// the "MOQT Auth Token Type" registry but agreed between client and
// receiver out of band (§8.9): what an application's own tokens use until
// the registry defines theirs.
const TokenTypeOutOfBand = 0

// UseToken returns a USE_VALUE token: typ and value sent as they are, in
// this message only. It is the simple form, valid anywhere a token is.
func UseToken(typ uint64, value []byte) Token {
	return Token{AliasType: TokenUseValue, Type: typ, Value: value}
}

// RegisterToken returns a REGISTER token: typ and value used in this
// message and stored by the receiver under alias, so that later messages
// can send UseTokenAlias(alias) instead of the value. The registration
// lasts until DeleteTokenAlias or the session's end and takes 16 bytes
// plus the value's length of the receiver's MAX_AUTH_TOKEN_CACHE_SIZE
// (0 by default: no registrations).
func RegisterToken(alias, typ uint64, value []byte) Token {
	return Token{AliasType: TokenRegister, Alias: alias, Type: typ, Value: value}
}

// UseTokenAlias returns a USE_ALIAS token: the Type and Value registered
// under alias, as if they were sent again.
func UseTokenAlias(alias uint64) Token {
	return Token{AliasType: TokenUseAlias, Alias: alias}
}

// DeleteTokenAlias returns a DELETE token: the registration under alias is
// retired and its room in the receiver's cache freed; messages it
// authorized stay authorized.
func DeleteTokenAlias(alias uint64) Token {
	return Token{AliasType: TokenDelete, Alias: alias}
}

func (t Token) hasAlias() bool { return t.AliasType != TokenUseValue }
func (t Token) hasValue() bool {
	return t.AliasType == TokenRegister || t.AliasType == TokenUseValue
}

// Append appends the Token structure (without an outer length) to b.
func (t Token) Append(b []byte) ([]byte, error) {
	if t.AliasType > TokenUseValue {
		return b, violation("unknown token alias type %d", uint64(t.AliasType))
	}
	b = AppendVarint(b, uint64(t.AliasType))
	if t.hasAlias() {
		b = AppendVarint(b, t.Alias)
	}
	if t.hasValue() {
		b = AppendVarint(b, t.Type)
		b = append(b, t.Value...)
	}
	return b, nil
}

// ParseToken decodes a Token that fills all of b; the Token Value runs to
// the end of b and aliases it. A structure that cannot be decoded closes the
// session with KEY_VALUE_FORMATTING_ERROR (§8.9).
func ParseToken(b []byte) (Token, error) {
	c := cursor{b}
	var t Token
	bad := func(why string) (Token, error) {
		return Token{}, &ProtocolError{Code: KeyValueFormattingError, Reason: "authorization token: " + why}
	}
	at, err := c.varint("token alias type")
	if err != nil {
		return bad("truncated")
	}
	if at > uint64(TokenUseValue) {
		return bad(fmt.Sprintf("unknown alias type %d", at))
	}
	t.AliasType = TokenAliasType(at)
	if t.hasAlias() {
		if t.Alias, err = c.varint("token alias"); err != nil {
			return bad("truncated")
		}
	}
	if t.hasValue() {
		if t.Type, err = c.varint("token type"); err != nil {
			return bad("truncated")
		}
		t.Value = c.b
		return t, nil
	}
	if !c.empty() {
		return bad(fmt.Sprintf("%s carries a value", t.AliasType))
	}
	return t, nil
}

// CacheSize is the size a registered token occupies in the peer's token
// cache: 16 bytes plus the Token Value (§9.1.3).
func (t Token) CacheSize() uint64 { return 16 + uint64(len(t.Value)) }
