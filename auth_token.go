package moqt

import (
	"fmt"

	"github.com/moqt-go/moqt/internal/authtoken"
	"github.com/moqt-go/moqt/wire"
)

// Authorization token aliases (§8.9, §9.1.3, §9.1.4). A session keeps two
// token caches, in internal/authtoken: the peer's registrations, which this
// endpoint stores and enforces (tokenCache), and a mirror of this
// endpoint's registrations with the peer (sentTokens), which keeps it from
// breaking the peer's rules. Here their verdicts get the session's error
// types and their tokens the public AuthToken form.

// AuthToken is an authorization token as the peer meant it: the Token Type
// and Token Value after any alias is resolved (§8.9). Using an alias has the
// same effect as sending the type and value, so authorization looks at Type
// and Value only.
type AuthToken struct {
	Type uint64
	// Value is shared with the session's token cache and must not be
	// modified.
	Value []byte
	// Alias is the alias the token came through: set for REGISTER and
	// USE_ALIAS, unset for USE_VALUE and for a REGISTER in SETUP that did
	// not fit in the cache (§9.1.4).
	Alias wire.Opt[uint64]

	entry *authtoken.Entry // the registration behind Alias, for StoreTokenError
}

// tokenCache holds the tokens the peer registered with this endpoint.
type tokenCache struct{ c *authtoken.Cache }

func newTokenCache(limit uint64) *tokenCache { return &tokenCache{authtoken.NewCache(limit)} }

// resolve applies the tokens of one message from the peer to the cache and
// returns those it carries, resolved (see authtoken.Cache.Resolve). A
// token that closes the session comes back as a *SessionError in err, one
// that refuses the message as rej.
func (c *tokenCache) resolve(toks []wire.Token, inSetup bool) (out []AuthToken, rej *RequestError, err error) {
	res, r, e := c.c.Resolve(toks, inSetup)
	if e != nil {
		return nil, nil, &SessionError{Code: e.Code, Reason: e.Reason}
	}
	if r != nil {
		rej = &RequestError{Code: r.Code, Reason: r.Reason}
	}
	if len(res) > 0 {
		out = make([]AuthToken, len(res))
		for i, t := range res {
			out[i] = AuthToken{Type: t.Type, Value: t.Value, Alias: t.Alias, entry: t.Entry}
		}
	}
	return out, rej, nil
}

// refuse stores code in place of the registration behind tok (§8.9).
func (c *tokenCache) refuse(tok AuthToken, code wire.RequestErrorCode) bool {
	return c.c.Refuse(tok.entry, code)
}

// take resolves the AUTHORIZATION_TOKENs of a message the peer sent
// (§8.9) and puts them back into p in their resolved form, USE_VALUE, so
// that the parameters mean the same outside this session. See resolve.
func (c *tokenCache) take(p *wire.Params) ([]AuthToken, *RequestError, error) {
	if p == nil || len(p.AuthorizationTokens) == 0 {
		return nil, nil, nil
	}
	toks, rej, err := c.resolve(p.AuthorizationTokens, false)
	if err != nil {
		return nil, nil, err
	}
	p.AuthorizationTokens = useValues(toks)
	return toks, rej, nil
}

// useValues returns toks as USE_VALUE tokens.
func useValues(toks []AuthToken) []wire.Token {
	if len(toks) == 0 {
		return nil
	}
	out := make([]wire.Token, len(toks))
	for i, t := range toks {
		out[i] = wire.UseToken(t.Type, t.Value)
	}
	return out
}

// sentTokens mirrors the token cache of the peer: what this endpoint has
// registered there (see authtoken.Sent). Its lock is taken after a
// Subscription's mu, never before: an update's tokens are checked and
// written under the subscription's lock so that they keep their order on
// the stream.
type sentTokens struct{ s *authtoken.Sent }

// tokenStream identifies a request stream to sentTokens; tokenUse is what
// one message did to the peer's cache.
type (
	tokenStream = authtoken.Stream
	tokenUse    = authtoken.Use
)

func newSentTokens() *sentTokens { return &sentTokens{authtoken.NewSent()} }

// setup records this endpoint's SETUP tokens once the peer's SETUP has set
// the limit (§9.1.4).
func (c *sentTokens) setup(toks []wire.Token, limit uint64) { c.s.Setup(toks, limit) }

// prepare checks the tokens of a message about to be sent on stream and
// applies them, pending until the message is answered or abandoned. It
// returns an error wrapping ErrAuthToken, and changes nothing, if the
// message would break a rule of §8.9 at the peer. A nil use means the
// message carries no tokens.
func (c *sentTokens) prepare(toks []wire.Token, stream *tokenStream) (*tokenUse, error) {
	use, err := c.s.Prepare(toks, stream)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrAuthToken, err)
	}
	return use, nil
}

// abort reverts a use whose message was never sent.
func (c *sentTokens) abort(use *tokenUse) { c.s.Abort(use) }

// answered settles a use whose message got its response (§8.9).
func (c *sentTokens) answered(use *tokenUse) { c.s.Answered(use) }

// checkSetupTokens vets Config.AuthorizationTokens (see
// authtoken.CheckSetup); the error wraps ErrAuthToken.
func checkSetupTokens(toks []wire.Token) error {
	if err := authtoken.CheckSetup(toks); err != nil {
		return fmt.Errorf("%w: %v", ErrAuthToken, err)
	}
	return nil
}
