package authtoken

import (
	"strings"
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
func tokStrings(ts []Token) []string {
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

// The receiver's cache (§8.9, §9.1.3, §9.1.4): each step is one message.
func TestTokenCacheResolve(t *testing.T) {
	type step struct {
		toks    []wire.Token
		setup   bool
		session wire.SessionErrorCode // non-zero: the message closes the session
		rej     wire.RequestErrorCode // non-zero: the message is rejected
		want    []string              // resolved tokens
	}
	big := strings.Repeat("x", 5) // 16+5 = 21 bytes in the cache
	for _, tc := range []struct {
		name  string
		limit uint64
		steps []step
		size  uint64 // after the last step that did not close the session
	}{
		{"USE_VALUE needs no cache", 0, []step{{toks: toks(tokVal("a"), tokVal("b")), want: []string{"a", "b"}}}, 0},
		{"REGISTER then USE_ALIAS", 100, []step{
			{toks: toks(tokReg(1, "abc")), want: []string{"abc@1"}},
			{toks: toks(tokUse(1)), want: []string{"abc@1"}},
		}, 19},
		{"DELETE frees its size and retires the alias", 100, []step{
			{toks: toks(tokReg(1, "abc")), want: []string{"abc@1"}},
			{toks: toks(tokDel(1), tokVal("v")), want: []string{"v"}},
			{toks: toks(tokUse(1)), session: wire.UnknownAuthTokenAlias},
		}, 0},
		{"re-REGISTER after DELETE", 100, []step{
			{toks: toks(tokReg(1, "a"))},
			{toks: toks(tokDel(1), tokReg(1, "b")), want: []string{"b@1"}},
			{toks: toks(tokUse(1)), want: []string{"b@1"}},
		}, 17},
		{"REGISTER of a registered alias", 100, []step{
			{toks: toks(tokReg(1, "a"))},
			{toks: toks(tokReg(1, "b")), session: wire.DuplicateAuthTokenAlias},
		}, 17},
		{"REGISTER twice in SETUP", 100, []step{
			{toks: toks(tokReg(1, "a"), tokReg(1, "b")), setup: true, session: wire.DuplicateAuthTokenAlias},
		}, 17},
		{"REGISTER that fits exactly", 21, []step{{toks: toks(tokReg(1, big)), want: []string{big + "@1"}}}, 21},
		{"REGISTER past the limit", 20, []step{{toks: toks(tokReg(1, big)), session: wire.AuthTokenCacheOverflow}}, 0},
		{"REGISTER with the default limit 0", 0, []step{{toks: toks(tokReg(1, "")), session: wire.AuthTokenCacheOverflow}}, 0},
		{"sizes add up", 36, []step{
			{toks: toks(tokReg(1, big))},
			{toks: toks(tokReg(2, "")), session: wire.AuthTokenCacheOverflow},
		}, 21},
		{"SETUP REGISTER past the limit is USE_VALUE", 40, []step{
			// 21 fits, the next 21 does not and is used as given, 17 fits.
			{toks: toks(tokReg(1, big), tokReg(2, big+"2"), tokReg(3, "c")), setup: true, want: []string{big + "@1", big + "2", "c@3"}},
			{toks: toks(tokUse(3)), want: []string{"c@3"}},
			{toks: toks(tokUse(2)), session: wire.UnknownAuthTokenAlias},
		}, 38},
		{"USE_ALIAS of an unknown alias", 100, []step{{toks: toks(tokUse(4)), session: wire.UnknownAuthTokenAlias}}, 0},
		{"DELETE of an unknown alias", 100, []step{{toks: toks(tokDel(4)), session: wire.UnknownAuthTokenAlias}}, 0},
		{"repeated value", 0, []step{{toks: toks(tokVal("a"), tokVal("a")), rej: wire.ReqMalformedAuthToken}}, 0},
		{"same value, other type", 0, []step{
			{toks: toks(tokVal("a"), wire.UseToken(2, []byte("a"))), want: []string{"a", "a"}},
		}, 0},
		{"a rejected message still registers", 100, []step{
			{toks: toks(tokReg(1, "a"), tokVal("a")), rej: wire.ReqMalformedAuthToken},
			{toks: toks(tokUse(1)), want: []string{"a@1"}},
		}, 17},
		{"one alias used twice", 100, []step{
			{toks: toks(tokReg(1, "a"))},
			{toks: toks(tokUse(1), tokUse(1)), rej: wire.ReqMalformedAuthToken},
		}, 17},
		{"two aliases of one value", 100, []step{
			{toks: toks(tokReg(1, "a"), tokReg(2, "a")), rej: wire.ReqMalformedAuthToken},
			{toks: toks(tokUse(2)), want: []string{"a@2"}},
		}, 34},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(tc.limit)
			for i, st := range tc.steps {
				out, rej, err := c.Resolve(st.toks, st.setup)
				if st.session != 0 {
					require.NotNil(t, err, "step %d", i)
					assert.Equal(t, st.session, err.Code, "step %d", i)
					break
				}
				require.Nil(t, err, "step %d", i)
				if st.rej != 0 {
					require.NotNil(t, rej, "step %d", i)
					assert.Equal(t, st.rej, rej.Code, "step %d", i)
					continue
				}
				require.Nil(t, rej, "step %d", i)
				if st.want != nil {
					assert.Equal(t, st.want, tokStrings(out), "step %d", i)
				}
			}
			assert.Equal(t, tc.size, c.size)
		})
	}
}

// A token's value is copied out of the message it came in, which aliases a
// read buffer.
func TestTokenCacheOwnsValues(t *testing.T) {
	c := NewCache(100)
	buf := []byte("abc")
	out, _, err := c.Resolve(toks(wire.RegisterToken(1, 1, buf)), false)
	require.Nil(t, err)
	copy(buf, "zzz")
	assert.Equal(t, "abc", string(out[0].Value))
	out, _, err = c.Resolve(toks(tokUse(1)), false)
	require.Nil(t, err)
	assert.Equal(t, "abc", string(out[0].Value))
}

// An error stored in place of a token fails later uses of its alias (§8.9).
func TestTokenCacheStoredError(t *testing.T) {
	c := NewCache(100)
	out, _, err := c.Resolve(toks(tokReg(1, "a"), tokVal("b")), false)
	require.Nil(t, err)
	assert.False(t, c.Refuse(out[1].Entry, wire.ReqUnauthorized), "USE_VALUE has no alias")
	require.True(t, c.Refuse(out[0].Entry, wire.ReqExpiredAuthToken))

	_, rej, err := c.Resolve(toks(tokVal("c"), tokUse(1)), false)
	require.Nil(t, err)
	require.NotNil(t, rej)
	assert.Equal(t, wire.ReqExpiredAuthToken, rej.Code)

	// The alias is retained until deleted, and its size with it.
	assert.Equal(t, uint64(17), c.size)
	_, rej, err = c.Resolve(toks(tokDel(1), tokReg(1, "a")), false)
	require.Nil(t, err)
	require.Nil(t, rej)
	_, rej, err = c.Resolve(toks(tokUse(1)), false)
	require.Nil(t, err)
	assert.Nil(t, rej, "the new registration carries no error")
}

// The sender's mirror of the peer's cache refuses what the peer would
// punish, and changes nothing when it does.
func TestSentTokensPrepareErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit uint64
		toks  []wire.Token
		err   string
	}{
		{"REGISTER with no peer cache", 0, toks(tokReg(1, "")), "MAX_AUTH_TOKEN_CACHE_SIZE 0"},
		{"REGISTER past the peer's limit", 20, toks(tokReg(1, "12345")), "21 bytes"},
		{"REGISTER twice", 100, toks(tokReg(1, "a"), tokReg(1, "b")), "already registered"},
		{"USE_ALIAS of an unknown alias", 100, toks(tokUse(1)), "unregistered alias 1"},
		{"DELETE of an unknown alias", 100, toks(tokDel(1)), "unregistered alias 1"},
		{"repeated value", 100, toks(tokVal("a"), tokVal("a")), "repeated"},
		{"REGISTER and USE_ALIAS in one message", 100, toks(tokReg(1, "a"), tokUse(1)), "repeated"},
		{"REGISTER then DELETE in one message", 100, toks(tokReg(1, "a"), tokVal("b"), tokDel(1)), ""},
		{"unknown alias type", 100, toks(wire.Token{AliasType: 7}), "alias type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewSent()
			c.Setup(nil, tc.limit)
			use, err := c.Prepare(tc.toks, new(Stream))
			if tc.err == "" {
				require.NoError(t, err)
				require.NotNil(t, use)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
			assert.Nil(t, use)
			assert.Empty(t, c.entries, "a refused message changes nothing")
			assert.Zero(t, c.size)
		})
	}
}

// The ordering rules of §8.9 across request streams.
func TestSentTokensOrdering(t *testing.T) {
	newCache := func() *Sent {
		c := NewSent()
		c.Setup(nil, 1000)
		return c
	}
	t.Run("USE_ALIAS waits for the REGISTER's answer on other streams", func(t *testing.T) {
		c := newCache()
		s1, s2 := new(Stream), new(Stream)
		reg, err := c.Prepare(toks(tokReg(1, "a")), s1)
		require.NoError(t, err)
		_, err = c.Prepare(toks(tokUse(1)), s2)
		require.Error(t, err)
		_, err = c.Prepare(toks(tokDel(1)), s2)
		require.Error(t, err, "a DELETE would race the REGISTER too")
		_, err = c.Prepare(toks(tokUse(1)), s1)
		require.NoError(t, err, "the same stream keeps the order")
		c.Answered(reg)
		_, err = c.Prepare(toks(tokUse(1)), s2)
		require.NoError(t, err)
	})
	t.Run("DELETE waits for the answers to USE_ALIAS", func(t *testing.T) {
		c := newCache()
		c.Answered(mustPrepare(t, c, toks(tokReg(1, "a")), new(Stream)))
		s := new(Stream)
		use := mustPrepare(t, c, toks(tokUse(1)), s)
		_, err := c.Prepare(toks(tokDel(1)), s)
		require.Error(t, err, "even on the same stream (§8.9 says any message)")
		c.Answered(use)
		c.Answered(use) // a second answer changes nothing
		del := mustPrepare(t, c, toks(tokDel(1)), s)
		assert.Equal(t, uint64(17), c.size, "a pending DELETE still counts")
		_, err = c.Prepare(toks(tokUse(1)), new(Stream))
		require.Error(t, err)
		_, err = c.Prepare(toks(tokReg(1, "b")), s)
		require.Error(t, err, "not before the DELETE is answered")
		c.Answered(del)
		assert.Zero(t, c.size)
		_, err = c.Prepare(toks(tokUse(1)), new(Stream))
		require.Error(t, err)
		_, err = c.Prepare(toks(tokReg(1, "b")), new(Stream))
		require.NoError(t, err)
	})
	t.Run("an aborted message is undone", func(t *testing.T) {
		c := newCache()
		c.Answered(mustPrepare(t, c, toks(tokReg(1, "a")), new(Stream)))
		use := mustPrepare(t, c, toks(tokReg(2, "b"), tokDel(1)), new(Stream))
		c.Abort(use)
		assert.Equal(t, uint64(17), c.size)
		_, err := c.Prepare(toks(tokUse(2)), new(Stream))
		require.Error(t, err)
		c.Answered(mustPrepare(t, c, toks(tokUse(1)), new(Stream)))
		c.Answered(mustPrepare(t, c, toks(tokDel(1)), new(Stream)))
		assert.Zero(t, c.size)
	})
	t.Run("an unanswered message leaves its alias pending", func(t *testing.T) {
		c := newCache()
		mustPrepare(t, c, toks(tokReg(1, "a")), new(Stream))
		_, err := c.Prepare(toks(tokUse(1)), new(Stream))
		require.Error(t, err)
		_, err = c.Prepare(toks(tokReg(1, "a")), new(Stream))
		require.Error(t, err, "the peer may hold it")
	})
}

// mustPrepare prepares a message that must pass.
func mustPrepare(t *testing.T, c *Sent, ts []wire.Token, s *Stream) *Use {
	t.Helper()
	use, err := c.Prepare(ts, s)
	require.NoError(t, err)
	return use
}

// This endpoint's SETUP registrations that did not fit in the peer's cache
// are purged, in order, as the peer sums them (§9.1.4).
func TestSentTokensSetupPurge(t *testing.T) {
	c := NewSent()
	ten := strings.Repeat("t", 10) // 26 bytes each
	c.Setup(toks(tokReg(1, ten), tokVal("v"), tokReg(2, ten+"2"), tokReg(3, "")), 45)
	assert.Equal(t, uint64(42), c.size)
	for alias, ok := range map[uint64]bool{1: true, 2: false, 3: true} {
		_, err := c.Prepare(toks(tokUse(alias)), new(Stream))
		assert.Equal(t, ok, err == nil, "alias %d: %v", alias, err)
	}
}

func TestCheckSetupTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		toks []wire.Token
		ok   bool
	}{
		{"none", nil, true},
		{"REGISTER and USE_VALUE", toks(tokReg(1, "a"), tokVal("b"), tokReg(2, "c")), true},
		{"DELETE", toks(tokDel(1)), false},
		{"USE_ALIAS", toks(tokReg(1, "a"), tokUse(1)), false},
		{"alias registered twice", toks(tokReg(1, "a"), tokReg(1, "b")), false},
		{"repeated token", toks(tokReg(1, "a"), tokVal("a")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSetup(tc.toks)
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

func TestRepeatedTokens(t *testing.T) {
	mk := func(typ uint64, v string, h uint64) Token { return Token{Type: typ, Value: []byte(v), hash: h} }
	assert.False(t, repeated(nil))
	assert.False(t, repeated([]Token{mk(1, "a", 1), mk(1, "b", 2), mk(2, "a", 1)}))
	assert.True(t, repeated([]Token{mk(1, "a", 1), mk(1, "b", 2), mk(1, "a", 1)}))
	// Equal hashes of different values are told apart.
	assert.False(t, repeated([]Token{mk(1, "a", 9), mk(1, "b", 9)}))
	assert.True(t, repeated([]Token{mk(1, "a", 9), mk(1, "b", 9), mk(1, "b", 9)}))
}
