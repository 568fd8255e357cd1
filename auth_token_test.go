package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Token builders: Token Type 1 unless said otherwise.
func tokReg(alias uint64, v string) wire.Token {
	return wire.RegisterToken(alias, 1, []byte(v))
}
func tokUse(alias uint64) wire.Token { return wire.UseTokenAlias(alias) }
func tokDel(alias uint64) wire.Token { return wire.DeleteTokenAlias(alias) }
func tokVal(v string) wire.Token {
	return wire.UseToken(1, []byte(v))
}
func toks(t ...wire.Token) []wire.Token { return t }

// tokStrings renders resolved tokens as "value" or "value@alias".
func tokStrings(ts []AuthToken) []string {
	var out []string
	for _, t := range ts {
		s := string(t.Value)
		if t.Alias.Set {
			s += "@" + string(rune('0'+t.Alias.Value))
		}
		out = append(out, s)
	}
	return out
}

// The token caches' rules are tested in internal/authtoken. These tests
// check what the session makes of their verdicts: a token that closes the
// session is a *SessionError, one that refuses a message a *RequestError,
// a token this endpoint must not send wraps ErrAuthToken, and a stored
// error reaches the registration behind an AuthToken.
func TestAuthTokenVerdicts(t *testing.T) {
	reg, use, val := tokReg(1, "a"), tokUse(1), tokVal("v")

	c := newTokenCache(100)
	out, rej, err := c.resolve([]wire.Token{reg, val}, false)
	require.NoError(t, err)
	require.Nil(t, rej)
	assert.Equal(t, []string{"a@1", "v"}, tokStrings(out))
	assert.Equal(t, uint64(1), out[0].Type)
	assert.NotNil(t, out[0].entry)

	assert.False(t, c.refuse(out[1], wire.ReqUnauthorized), "USE_VALUE has no alias")
	require.True(t, c.refuse(out[0], wire.ReqExpiredAuthToken))
	_, rej, err = c.resolve([]wire.Token{use}, false)
	require.NoError(t, err)
	require.NotNil(t, rej)
	assert.Equal(t, wire.ReqExpiredAuthToken, rej.Code)

	_, _, err = c.resolve([]wire.Token{reg}, false)
	var se *SessionError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, wire.DuplicateAuthTokenAlias, se.Code)

	sent := newSentTokens()
	sent.setup(nil, 100)
	_, err = sent.prepare([]wire.Token{use}, new(tokenStream))
	assert.ErrorIs(t, err, ErrAuthToken)
	u, err := sent.prepare([]wire.Token{reg}, new(tokenStream))
	require.NoError(t, err)
	sent.answered(u)
	_, err = sent.prepare([]wire.Token{use}, new(tokenStream))
	assert.NoError(t, err, "usable once its REGISTER is answered")

	assert.NoError(t, checkSetupTokens([]wire.Token{reg, val}))
	assert.ErrorIs(t, checkSetupTokens([]wire.Token{use}), ErrAuthToken)
}
