// Package authtoken keeps the two authorization token caches of a
// session (§8.9, §9.1.3, §9.1.4): the peer's registrations, which this
// endpoint stores and enforces (Cache), and a mirror of this endpoint's
// registrations with the peer (Sent), which keeps it from breaking the
// peer's rules. It imports only the wire codec and the standard library.
package authtoken

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// Token is an authorization token as the peer meant it: the Token Type and
// Token Value after any alias is resolved (§8.9).
type Token struct {
	Type uint64
	// Value is shared with the cache and must not be modified.
	Value []byte
	// Alias is the alias the token came through: set for REGISTER and
	// USE_ALIAS, unset for USE_VALUE and for a REGISTER in SETUP that did
	// not fit in the cache (§9.1.4).
	Alias wire.Opt[uint64]
	// Entry is the registration behind Alias, for Cache.Refuse; nil
	// without one.
	Entry *Entry

	hash uint64 // of Value, for the repeat check
}

// SessionError is a token from the peer that closes the session with Code.
type SessionError struct {
	Code   wire.SessionErrorCode
	Reason string
}

func (e *SessionError) Error() string { return "authtoken: " + e.Code.String() + ": " + e.Reason }

// RequestError is a message from the peer whose tokens are refused with
// Code.
type RequestError struct {
	Code   wire.RequestErrorCode
	Reason string
}

func (e *RequestError) Error() string { return "authtoken: " + e.Code.String() + ": " + e.Reason }

// tokenSeed hashes Token Values for the repeat check of one message.
var tokenSeed = maphash.MakeSeed()

// Cache holds the tokens the peer registered with this endpoint (§8.9).
// Request streams resolve their messages' tokens concurrently; each
// message is applied whole under mu, so that its tokens act in order.
type Cache struct {
	mu      sync.Mutex
	limit   uint64            // this endpoint's MAX_AUTH_TOKEN_CACHE_SIZE (§9.1.3); fixed
	size    uint64            // 16 + len(Value) summed over entries (§9.1.3)
	entries map[uint64]*Entry // by alias
}

// Entry is one registration the peer made.
type Entry struct {
	typ   uint64
	value []byte
	hash  uint64
	// refused, when set, is the error stored in place of the token: every
	// later USE_ALIAS of it fails with this code (§8.9). Guarded by the
	// cache's mu.
	refused wire.Opt[wire.RequestErrorCode]
}

// NewCache returns an empty cache holding at most limit bytes, this
// endpoint's MAX_AUTH_TOKEN_CACHE_SIZE (§9.1.3).
func NewCache(limit uint64) *Cache {
	return &Cache{limit: limit, entries: map[uint64]*Entry{}}
}

// Resolve applies the tokens of one message from the peer to the cache, in
// order, and returns the tokens the message carries: every one but DELETE,
// resolved. The rules of §8.9, and §9.1.4 when inSetup:
//   - REGISTER of a registered alias: DUPLICATE_AUTH_TOKEN_ALIAS.
//   - REGISTER past the cache limit: AUTH_TOKEN_CACHE_OVERFLOW; in SETUP the
//     token is used as USE_VALUE instead.
//   - USE_ALIAS or DELETE of an alias that is not registered: the spec says
//     to "reject the message with UNKNOWN_AUTH_TOKEN_ALIAS", a code that
//     exists only among the session close codes (§12.2, 0x17), so the
//     session is closed with it. A sender must not race a USE_ALIAS or a
//     DELETE ahead of its REGISTER or the answers to its uses (§8.9), so an
//     unknown alias means the peer broke a rule.
//   - Two tokens with the same Type and Value: the message is rejected with
//     MALFORMED_AUTH_TOKEN; a USE_ALIAS of a token with a stored error is
//     rejected with that error.
//
// A session error comes back as err; a request-level one as rej, after
// every REGISTER of the message has registered: a registration stands even
// when its message fails for another reason (§8.9).
func (c *Cache) Resolve(toks []wire.Token, inSetup bool) (out []Token, rej *RequestError, err *SessionError) {
	if len(toks) == 0 {
		return nil, nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out = make([]Token, 0, len(toks))
	for _, t := range toks {
		switch t.AliasType {
		case wire.TokenUseValue:
			v := bytes.Clone(t.Value)
			out = append(out, Token{Type: t.Type, Value: v, hash: maphash.Bytes(tokenSeed, v)})
		case wire.TokenRegister:
			if _, dup := c.entries[t.Alias]; dup {
				return nil, nil, &SessionError{Code: wire.DuplicateAuthTokenAlias, Reason: fmt.Sprintf("token alias %d registered twice", t.Alias)}
			}
			v := bytes.Clone(t.Value)
			h := maphash.Bytes(tokenSeed, v)
			if t.CacheSize() > c.limit-c.size {
				if !inSetup {
					return nil, nil, &SessionError{Code: wire.AuthTokenCacheOverflow,
						Reason: fmt.Sprintf("token alias %d: %d bytes would pass MAX_AUTH_TOKEN_CACHE_SIZE %d", t.Alias, c.size+t.CacheSize(), c.limit)}
				}
				out = append(out, Token{Type: t.Type, Value: v, hash: h})
				continue
			}
			e := &Entry{typ: t.Type, value: v, hash: h}
			c.entries[t.Alias] = e
			c.size += t.CacheSize()
			out = append(out, Token{Type: t.Type, Value: v, Alias: wire.Some(t.Alias), Entry: e, hash: h})
		case wire.TokenUseAlias:
			e, ok := c.entries[t.Alias]
			if !ok {
				return nil, nil, unknownAlias(t)
			}
			if e.refused.Set && rej == nil {
				rej = &RequestError{Code: e.refused.Value, Reason: fmt.Sprintf("token alias %d refused", t.Alias)}
			}
			out = append(out, Token{Type: e.typ, Value: e.value, Alias: wire.Some(t.Alias), Entry: e, hash: e.hash})
		case wire.TokenDelete:
			e, ok := c.entries[t.Alias]
			if !ok {
				return nil, nil, unknownAlias(t)
			}
			delete(c.entries, t.Alias)
			c.size -= 16 + uint64(len(e.value))
		}
	}
	if rej == nil && repeated(out) {
		rej = &RequestError{Code: wire.ReqMalformedAuthToken, Reason: "authorization token repeated"}
	}
	return out, rej, nil
}

func unknownAlias(t wire.Token) *SessionError {
	return &SessionError{Code: wire.UnknownAuthTokenAlias, Reason: fmt.Sprintf("%s of unregistered token alias %d", t.AliasType, t.Alias)}
}

// Refuse stores code in place of the registration e (§8.9): every later
// USE_ALIAS of it is refused with code. It reports false for a nil e, a
// token that came without an alias.
func (c *Cache) Refuse(e *Entry, code wire.RequestErrorCode) bool {
	if e == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refused = wire.Some(code)
	return true
}

type tokenID struct{ typ, hash uint64 }

// repeated reports whether two tokens share a Token Type and Value (§8.9).
// Values are compared by a hash kept with each registration, so a message
// that names one large registered token many times costs little to check.
func repeated(toks []Token) bool {
	if len(toks) < 2 {
		return false
	}
	seen := make(map[tokenID][]int, len(toks))
	for i, t := range toks {
		id := tokenID{t.Type, t.hash}
		for _, j := range seen[id] {
			if bytes.Equal(toks[j].Value, t.Value) {
				return true
			}
		}
		seen[id] = append(seen[id], i)
	}
	return false
}

// Sent mirrors the token cache of the peer: what this endpoint has
// registered there (§8.9). Messages on different request streams may be
// processed by the peer in any order, so a registration or deletion is
// pending until its message is answered, and only messages on the same
// stream may refer to the alias meanwhile. A message that is never
// answered (cancelled, or its stream failed) leaves its aliases pending for
// the rest of the session: whether the peer processed it is unknown.
type Sent struct {
	// mu is taken after a Subscription's mu, never before: an update's
	// tokens are checked and written under the subscription's lock so that
	// they keep their order on the stream.
	mu    sync.Mutex
	limit uint64 // the peer's MAX_AUTH_TOKEN_CACHE_SIZE, from its SETUP (§9.1.3)
	// size is what the peer may be holding: registrations, pending ones,
	// and pending deletions, which count until answered.
	size    uint64
	entries map[uint64]*sentEntry // by alias
}

// sentEntry is one alias registered with the peer.
type sentEntry struct {
	alias, typ uint64
	value      []byte
	hash       uint64
	// by is the unanswered message that registered or deletes the alias;
	// nil once settled.
	by       *Use
	deleting bool
	// users counts the unanswered messages that used the alias with
	// USE_ALIAS: it cannot be deleted until they are answered (§8.9).
	users int
}

func (e *sentEntry) size() uint64 { return 16 + uint64(len(e.value)) }

// Stream identifies a request stream to Sent: messages on one stream
// reach the peer in order. It is not zero-sized, so that two of them never
// compare equal; make one with new(Stream) per request stream.
type Stream struct{ _ byte }

// Use is what one message did to the peer's cache, settled when the
// message is answered.
type Use struct {
	stream  *Stream
	changes []tokenChange
	used    []*sentEntry // entries it referred to with USE_ALIAS
	settled bool
}

// tokenChange is one REGISTER or DELETE of a message, with what it
// replaced so that it can be undone.
type tokenChange struct {
	e        *sentEntry
	register bool
	prevBy   *Use
}

// NewSent returns an empty mirror; Setup sets the peer's limit.
func NewSent() *Sent { return &Sent{entries: map[uint64]*sentEntry{}} }

// Setup records this endpoint's SETUP tokens once the peer's SETUP has set
// the limit: a REGISTER that does not fit was used as USE_VALUE by the peer
// and is purged, summing sizes in order as the peer does (§9.1.4). Requests
// wait for SETUP at the peer (§6.3), so the rest are settled at once.
func (c *Sent) Setup(toks []wire.Token, limit uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.limit = limit
	for _, t := range toks {
		if t.AliasType != wire.TokenRegister || t.CacheSize() > c.limit-c.size {
			continue
		}
		v := bytes.Clone(t.Value)
		c.entries[t.Alias] = &sentEntry{alias: t.Alias, typ: t.Type, value: v, hash: maphash.Bytes(tokenSeed, v)}
		c.size += t.CacheSize()
	}
}

// Prepare checks the tokens of a message about to be sent on stream and
// applies them, pending until the message is answered or abandoned. It
// returns an error saying why, and changes nothing, if the message would
// break a rule of §8.9 at the peer. A nil use means the
// message carries no tokens.
func (c *Sent) Prepare(toks []wire.Token, stream *Stream) (*Use, error) {
	if len(toks) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	use := &Use{stream: stream}
	resolved := make([]Token, 0, len(toks))
	fail := func(format string, args ...any) (*Use, error) {
		c.undo(use)
		return nil, fmt.Errorf(format, args...)
	}
	for _, t := range toks {
		e, known := c.entries[t.Alias]
		if known && t.AliasType != wire.TokenUseValue {
			switch {
			case e.deleting:
				return fail("alias %d is being deleted", t.Alias)
			case e.by != nil && e.by.stream != stream:
				// §8.9 names USE_ALIAS; a DELETE that overtook its
				// REGISTER would fail at the peer just the same.
				return fail("alias %d is not usable on another stream until its REGISTER is answered", t.Alias)
			}
		}
		switch t.AliasType {
		case wire.TokenUseValue:
			resolved = append(resolved, Token{Type: t.Type, Value: t.Value, hash: maphash.Bytes(tokenSeed, t.Value)})
		case wire.TokenRegister:
			if known {
				return fail("alias %d is already registered", t.Alias)
			}
			if t.CacheSize() > c.limit-c.size {
				return fail("alias %d: %d bytes would pass the peer's MAX_AUTH_TOKEN_CACHE_SIZE %d", t.Alias, c.size+t.CacheSize(), c.limit)
			}
			v := bytes.Clone(t.Value)
			e = &sentEntry{alias: t.Alias, typ: t.Type, value: v, hash: maphash.Bytes(tokenSeed, v), by: use}
			c.entries[t.Alias] = e
			c.size += e.size()
			use.changes = append(use.changes, tokenChange{e: e, register: true})
			resolved = append(resolved, Token{Type: e.typ, Value: e.value, hash: e.hash})
		case wire.TokenUseAlias:
			if !known {
				return fail("USE_ALIAS of unregistered alias %d", t.Alias)
			}
			e.users++
			use.used = append(use.used, e)
			resolved = append(resolved, Token{Type: e.typ, Value: e.value, hash: e.hash})
		case wire.TokenDelete:
			if !known {
				return fail("DELETE of unregistered alias %d", t.Alias)
			}
			if e.users > 0 {
				return fail("DELETE of alias %d while a USE_ALIAS of it awaits its answer", t.Alias)
			}
			use.changes = append(use.changes, tokenChange{e: e, prevBy: e.by})
			e.deleting, e.by = true, use
		default:
			return fail("unknown alias type %s", t.AliasType)
		}
	}
	if repeated(resolved) {
		return fail("a token is repeated")
	}
	return use, nil
}

// undo reverts what use did, newest first. Called with mu held.
func (c *Sent) undo(use *Use) {
	for i := len(use.changes) - 1; i >= 0; i-- {
		ch := use.changes[i]
		if ch.register {
			delete(c.entries, ch.e.alias)
			c.size -= ch.e.size()
		} else {
			ch.e.deleting, ch.e.by = false, ch.prevBy
			if ch.prevBy != nil && ch.prevBy.settled {
				ch.e.by = nil // its answer came while this use had the entry
			}
		}
	}
	for _, e := range use.used {
		e.users--
	}
	use.settled = true
}

// Abort reverts a use whose message was never sent. Nothing else can have
// touched its entries: they are pending on a stream that never opened.
func (c *Sent) Abort(use *Use) {
	if use == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !use.settled {
		c.undo(use)
	}
}

// Answered settles a use whose message got its response: the peer has
// processed it, so its registrations are usable from every stream, its
// deletions are done, and its uses no longer hold off a DELETE (§8.9).
func (c *Sent) Answered(use *Use) {
	if use == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if use.settled {
		return
	}
	use.settled = true
	for _, ch := range use.changes {
		e := ch.e
		if e.by != use {
			continue // a later message on the stream has it now
		}
		if e.deleting {
			c.size -= e.size()
			if c.entries[e.alias] == e {
				delete(c.entries, e.alias)
			}
		}
		e.by = nil
	}
	for _, e := range use.used {
		e.users--
	}
}

// CheckSetup vets the tokens this endpoint is to send in SETUP. SETUP may carry only
// REGISTER and USE_VALUE: a server refuses DELETE and USE_ALIAS from a
// client (§9.1.4), and from a server they would refer to a registration
// earlier in the same SETUP, which the client drops if it does not fit in
// a cache whose size is unknown when SETUP is sent. Aliases and tokens must
// not repeat (§8.9).
func CheckSetup(toks []wire.Token) error {
	aliases := map[uint64]bool{}
	resolved := make([]Token, 0, len(toks))
	for _, t := range toks {
		switch t.AliasType {
		case wire.TokenRegister:
			if aliases[t.Alias] {
				return fmt.Errorf("SETUP registers alias %d twice", t.Alias)
			}
			aliases[t.Alias] = true
		case wire.TokenUseValue:
		default:
			return fmt.Errorf("SETUP may carry only REGISTER and USE_VALUE tokens, not %s", t.AliasType)
		}
		resolved = append(resolved, Token{Type: t.Type, Value: t.Value, hash: maphash.Bytes(tokenSeed, t.Value)})
	}
	if repeated(resolved) {
		return errors.New("a SETUP token is repeated")
	}
	return nil
}
