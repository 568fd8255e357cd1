package wire

// SetupOptionType is a Setup Option type (§9.1, §16.4). Setup Options are
// Key-Value-Pairs, so an even type carries a vi64 and an odd type bytes.
type SetupOptionType uint64

// Setup Option types (§16.4).
const (
	SetupPath                  SetupOptionType = 0x01 // bytes: path-abempty ["?" query]
	SetupAuthorizationToken    SetupOptionType = 0x03 // bytes: Token; may repeat
	SetupMaxAuthTokenCacheSize SetupOptionType = 0x04 // vi64: cache size in bytes
	SetupAuthority             SetupOptionType = 0x05 // bytes: RFC 3986 authority
	SetupMaxFilterRanges       SetupOptionType = 0x06 // vi64
	SetupMoqtImplementation    SetupOptionType = 0x07 // bytes: UTF-8 name and version
	SetupMaxRequestUpdates     SetupOptionType = 0x08 // vi64; 0 = unlimited
)

var setupOptionNames = map[SetupOptionType]string{
	SetupPath:                  "PATH",
	SetupAuthorizationToken:    "AUTHORIZATION_TOKEN",
	SetupMaxAuthTokenCacheSize: "MAX_AUTH_TOKEN_CACHE_SIZE",
	SetupAuthority:             "AUTHORITY",
	SetupMaxFilterRanges:       "MAX_FILTER_RANGES",
	SetupMoqtImplementation:    "MOQT_IMPLEMENTATION",
	SetupMaxRequestUpdates:     "MAX_REQUEST_UPDATES",
}

func (t SetupOptionType) String() string { return codeName(setupOptionNames, t) }

// Known reports whether t is a Setup Option of this draft (§16.4).
func (t SetupOptionType) Known() bool { _, ok := setupOptionNames[t]; return ok }

// setupOrder lists the known options in ascending type order, the order
// they are encoded in.
var setupOrder = [...]SetupOptionType{
	SetupPath, SetupAuthorizationToken, SetupMaxAuthTokenCacheSize, SetupAuthority,
	SetupMaxFilterRanges, SetupMoqtImplementation, SetupMaxRequestUpdates,
}

// Setup is SETUP (§9.1), the first message on each endpoint's control
// stream. Its body is Setup Options to the end of the message. The known
// options have typed fields, unset when absent (the session applies the
// defaults of §9.1.3–§9.1.7); text options are copied, while Token values
// and Unknown alias the parsed body.
//
// Decoding follows §8.3 and §9.1:
//   - Unknown options, including grease and repeats of the same unknown
//     type, are ignored but kept in Unknown in wire order, so they can be
//     logged and re-encoded.
//   - A repeated known option other than AUTHORIZATION_TOKEN closes the
//     session with PROTOCOL_VIOLATION. §9.1 forbids the repeat to the sender
//     but names no receiver action; PROTOCOL_VIOLATION is the code for a
//     peer breaking a MUST NOT (§12.2), and it matches the treatment of a
//     repeated Message Parameter (§9.20). The value itself is well
//     formatted, so KEY_VALUE_FORMATTING_ERROR does not fit.
//   - A known option whose value does not match its serialization closes
//     the session with KEY_VALUE_FORMATTING_ERROR (§8.3). A Key-Value-Pair's
//     parity fixes its shape, so among the known options only an
//     undecodable AUTHORIZATION_TOKEN can be misformatted (§8.9).
//
// Which options are known is per draft (Profile.HasSetupOption): in draft
// 18, MAX_FILTER_RANGES and MAX_REQUEST_UPDATES are unknown options, so
// they decode into Unknown there, and setting their fields fails to encode
// with a *NotInDraftError.
//
// Rules that depend on the sender and the transport, and the URI syntax of
// PATH and AUTHORITY, are left to Check.
type Setup struct {
	Path                  Opt[string]
	AuthorizationTokens   []Token
	MaxAuthTokenCacheSize Opt[uint64]
	Authority             Opt[string]
	MaxFilterRanges       Opt[uint64]
	MoqtImplementation    Opt[string]
	MaxRequestUpdates     Opt[uint64]
	// Unknown holds the options this draft does not define. Their types
	// must be non-decreasing and must not be known types.
	Unknown KVList
}

// Type returns MsgSetup (§9.1).
func (*Setup) Type() MessageType { return MsgSetup }

// AppendBody appends the Setup Options in ascending type order, merging the
// known options with Unknown (§9.1, Figure 5).
func (s *Setup) AppendBody(v Version, b []byte) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	w := kvWriter{b: b}
	u := 0
	// unknownBelow appends the Unknown options whose type is below t.
	unknownBelow := func(t uint64, all bool) error {
		for ; u < len(s.Unknown) && (all || s.Unknown[u].Type < t); u++ {
			kv := s.Unknown[u]
			if prof.HasSetupOption(SetupOptionType(kv.Type)) {
				return violation("setup option %s in Unknown", SetupOptionType(kv.Type))
			}
			if err := w.kv(kv); err != nil {
				return err
			}
		}
		return nil
	}
	for _, t := range setupOrder {
		if err := unknownBelow(uint64(t), false); err != nil {
			return w.b, err
		}
		if !prof.HasSetupOption(t) {
			if s.has(t) {
				return b, prof.notIn("setup option " + t.String())
			}
			continue
		}
		if err := s.appendOption(&w, t); err != nil {
			return w.b, err
		}
	}
	return w.b, unknownBelow(0, true)
}

// has reports whether the known option t is set.
func (s *Setup) has(t SetupOptionType) bool {
	switch t {
	case SetupPath:
		return s.Path.Set
	case SetupAuthorizationToken:
		return len(s.AuthorizationTokens) > 0
	case SetupMaxAuthTokenCacheSize:
		return s.MaxAuthTokenCacheSize.Set
	case SetupAuthority:
		return s.Authority.Set
	case SetupMaxFilterRanges:
		return s.MaxFilterRanges.Set
	case SetupMoqtImplementation:
		return s.MoqtImplementation.Set
	case SetupMaxRequestUpdates:
		return s.MaxRequestUpdates.Set
	}
	return false
}

// appendOption appends the known option t, if set.
func (s *Setup) appendOption(w *kvWriter, t SetupOptionType) error {
	switch t {
	case SetupPath:
		return w.text(t, s.Path)
	case SetupAuthorizationToken:
		for _, tok := range s.AuthorizationTokens {
			if err := w.token(uint64(t), tok); err != nil {
				return err
			}
		}
	case SetupMaxAuthTokenCacheSize:
		return w.number(t, s.MaxAuthTokenCacheSize)
	case SetupAuthority:
		return w.text(t, s.Authority)
	case SetupMaxFilterRanges:
		return w.number(t, s.MaxFilterRanges)
	case SetupMoqtImplementation:
		return w.text(t, s.MoqtImplementation)
	case SetupMaxRequestUpdates:
		return w.number(t, s.MaxRequestUpdates)
	}
	return nil
}

// ParseBody decodes the Setup Options that fill body (§9.1). See Setup for
// the error rules.
func (s *Setup) ParseBody(v Version, body []byte) error {
	*s = Setup{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	var seen [SetupMaxRequestUpdates + 1]bool
	return WalkKV(body, func(kv KeyValue) error {
		t := SetupOptionType(kv.Type)
		if !prof.HasSetupOption(t) {
			s.Unknown = append(s.Unknown, kv)
			return nil
		}
		if t != SetupAuthorizationToken {
			if seen[t] {
				return violation("setup option %s repeated", t)
			}
			seen[t] = true
		}
		switch t {
		case SetupPath:
			s.Path = Some(string(kv.Bytes))
		case SetupAuthorizationToken:
			tok, err := ParseToken(kv.Bytes)
			if err != nil {
				return err
			}
			s.AuthorizationTokens = append(s.AuthorizationTokens, tok)
		case SetupMaxAuthTokenCacheSize:
			s.MaxAuthTokenCacheSize = Some(kv.Value)
		case SetupAuthority:
			s.Authority = Some(string(kv.Bytes))
		case SetupMaxFilterRanges:
			s.MaxFilterRanges = Some(kv.Value)
		case SetupMoqtImplementation:
			s.MoqtImplementation = Some(string(kv.Bytes))
		case SetupMaxRequestUpdates:
			s.MaxRequestUpdates = Some(kv.Value)
		}
		return nil
	})
}

// Check applies the SETUP rules that depend on the sender and transport.
// fromClient reports that the client sent s (so the receiver is the
// server); webTransport that the session runs over WebTransport. In order:
//   - PATH from a server or over WebTransport: INVALID_PATH (§9.1.2); a PATH
//     that is not path-abempty ["?" query]: MALFORMED_PATH.
//   - AUTHORITY from a server or over WebTransport: INVALID_AUTHORITY
//     (§9.1.1); one that is not an RFC 3986 authority with a non-empty host
//     (§6.1): MALFORMED_AUTHORITY.
//   - AUTHORIZATION_TOKEN with Alias Type DELETE or USE_ALIAS received by a
//     server: PROTOCOL_VIOLATION (§9.1.4).
//
// Whether the server serves the path or authority is left to the session.
func (s *Setup) Check(fromClient, webTransport bool) error {
	if s.Path.Set {
		if !fromClient || webTransport {
			return &ProtocolError{Code: InvalidPath, Reason: "PATH sent by a server or over WebTransport"}
		}
		if !ValidPath(s.Path.Value) {
			return &ProtocolError{Code: MalformedPath, Reason: "PATH is not path-abempty [\"?\" query]"}
		}
	}
	if s.Authority.Set {
		if !fromClient || webTransport {
			return &ProtocolError{Code: InvalidAuthority, Reason: "AUTHORITY sent by a server or over WebTransport"}
		}
		if !ValidAuthority(s.Authority.Value) {
			return &ProtocolError{Code: MalformedAuthority, Reason: "AUTHORITY is not an RFC 3986 authority"}
		}
	}
	if fromClient {
		for _, tok := range s.AuthorizationTokens {
			if tok.AliasType == TokenDelete || tok.AliasType == TokenUseAlias {
				return violation("SETUP carries an authorization token with alias type %s", tok.AliasType)
			}
		}
	}
	return nil
}

// kvWriter appends a Key-Value-Pair list (§8.3), delta-encoding the types.
type kvWriter struct {
	b    []byte
	prev uint64
}

// key appends the delta from the previous type to t.
func (w *kvWriter) key(t uint64) error {
	if t < w.prev {
		return violation("key-value types not in ascending order (%d after %d)", t, w.prev)
	}
	w.b = AppendVarint(w.b, t-w.prev)
	w.prev = t
	return nil
}

// kv appends one pair as KVList.Append does.
func (w *kvWriter) kv(kv KeyValue) error {
	if kv.Type%2 == 0 {
		if err := w.key(kv.Type); err != nil {
			return err
		}
		w.b = AppendVarint(w.b, kv.Value)
		return nil
	}
	if len(kv.Bytes) > MaxKVBytesLen {
		return violation("key-value type %d: %d bytes, more than %d", kv.Type, len(kv.Bytes), MaxKVBytesLen)
	}
	if err := w.key(kv.Type); err != nil {
		return err
	}
	w.b = appendLenBytes(w.b, kv.Bytes)
	return nil
}

func (w *kvWriter) number(t SetupOptionType, v Opt[uint64]) error {
	if !v.Set {
		return nil
	}
	if err := w.key(uint64(t)); err != nil {
		return err
	}
	w.b = AppendVarint(w.b, v.Value)
	return nil
}

func (w *kvWriter) text(t SetupOptionType, v Opt[string]) error {
	if !v.Set {
		return nil
	}
	if len(v.Value) > MaxKVBytesLen {
		return violation("setup option %s: %d bytes, more than %d", t, len(v.Value), MaxKVBytesLen)
	}
	if err := w.key(uint64(t)); err != nil {
		return err
	}
	w.b = appendLenString(w.b, v.Value)
	return nil
}

func (w *kvWriter) token(t uint64, tok Token) error {
	if err := w.key(t); err != nil {
		return err
	}
	at := len(w.b)
	b, err := appendLenPrefixed(w.b, tok.Append)
	if err != nil {
		return err
	}
	if n, _ := ParseVarint(b[at:]); n > MaxKVBytesLen {
		return violation("authorization token of %d bytes, more than %d", n, MaxKVBytesLen)
	}
	w.b = b
	return nil
}
