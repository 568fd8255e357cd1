package wire

// Profile describes what one draft has on the wire: the messages,
// parameters, setup options and codes it defines, and switches for the
// features whose encoding differs. The codec consults the profile of the
// negotiated version rather than comparing version numbers, so a draft is a
// table, not a branch. docs/drafts.md lists the differences and their
// sections.
type Profile struct {
	// Version is the draft this profile describes.
	Version Version

	// JoiningFetch: FETCH carries a Fetch Type and, for Standalone, the
	// track and Start/End Location fields; Relative and Absolute Joining
	// forms exist (18/19 §10.12). Without it FETCH is SUBSCRIBE-shaped and
	// its range is LOCATION_FILTER (21 §9.11).
	JoiningFetch bool
	// FetchEndPlusOne: the End Location of FETCH and FETCH_OK is the last
	// Object plus one, with Object 0 meaning the whole End Group (18/19
	// §10.12.1, §10.13). Without it FETCH_OK's End Location is inclusive
	// (21 §9.12).
	FetchEndPlusOne bool
	// FillStreams: FILL_PARAMETERS and fill fetch streams exist (21 §3.4).
	FillStreams bool
	// GoawayRequestID: a control-stream GOAWAY ends with a Request ID
	// (18 §10.4).
	GoawayRequestID bool
	// RangeFilters: the range filter parameters 0x25–0x29 and
	// MAX_FILTER_RANGES exist (19 §5.1.3, 21 §3.3.2).
	RangeFilters bool
	// LocationFilter is the value format of parameter 0x21.
	LocationFilter LocationFilterFormat
	// TimedOutRange: the FETCH stream End of Timed-Out Range (0x20C) exists
	// (21 §11.4.1.2).
	TimedOutRange bool
	// UnknownStreamCount is the PUBLISH_DONE Stream Count that means "not
	// known exactly": 2^62-1 in 18/19 (§10.11), 2^64-1 in 21 (§9.9).
	UnknownStreamCount uint64

	messages      map[MessageType]string
	params        map[ParamType]ParamContext
	setupOptions  map[SetupOptionType]bool
	sessionErrors map[SessionErrorCode]bool
	requestErrors map[RequestErrorCode]bool
	publishDone   map[PublishDoneCode]bool
}

// LocationFilterFormat is how a draft encodes the value of parameter 0x21.
type LocationFilterFormat uint8

// Location filter formats.
const (
	// FilterFieldCount is 21's form: 0–4 vi64 fields whose count comes from
	// the length (21 §9.20.10).
	FilterFieldCount LocationFilterFormat = iota
	// FilterTyped is 18/19's Subscription/Location Filter: Filter Type,
	// then Start Location and End Group Delta as the type requires (18/19
	// §5.1.2).
	FilterTyped
)

// HasMessage reports whether t is a control message of the draft. A type it
// lacks is an unknown message type there, which closes the session.
func (p *Profile) HasMessage(t MessageType) bool { _, ok := p.messages[t]; return ok }

// MessageName is the draft's name for t (0x0F is PUBLISH_BLOCKED in 18).
func (p *Profile) MessageName(t MessageType) string {
	if s, ok := p.messages[t]; ok {
		return s
	}
	return t.String()
}

// ParamContexts returns the contexts the draft allows parameter t in, and
// whether the draft defines t at all.
func (p *Profile) ParamContexts(t ParamType) (ParamContext, bool) {
	c, ok := p.params[t]
	return c, ok
}

// HasSetupOption reports whether the draft defines option t. Options it
// lacks are unknown there and ignored on receipt.
func (p *Profile) HasSetupOption(t SetupOptionType) bool { return p.setupOptions[t] }

// HasSessionError reports whether the draft defines session code c.
func (p *Profile) HasSessionError(c SessionErrorCode) bool { return p.sessionErrors[c] }

// HasRequestError reports whether the draft defines REQUEST_ERROR code c.
// An undefined code received is read as INTERNAL_ERROR.
func (p *Profile) HasRequestError(c RequestErrorCode) bool { return p.requestErrors[c] }

// HasPublishDoneCode reports whether the draft defines PUBLISH_DONE code c.
func (p *Profile) HasPublishDoneCode(c PublishDoneCode) bool { return p.publishDone[c] }

// HasResetCode reports whether the draft defines stream reset code c. The
// registry is the same in every draft this package speaks.
func (p *Profile) HasResetCode(c ResetCode) bool { _, ok := resetNames[c]; return ok }

// Profile returns the profile of v, or nil if the package does not speak v.
func (v Version) Profile() *Profile {
	switch v {
	case Draft18:
		return &profile18
	case Draft19:
		return &profile19
	case Draft20:
		return &profile20
	case Draft21:
		return &profile21
	}
	return nil
}

// profileFor returns v's profile or the error for a version the codec does
// not speak.
func profileFor(v Version) (*Profile, error) {
	if p := v.Profile(); p != nil {
		return p, nil
	}
	return nil, &NotInDraftError{What: "this codec", Version: v}
}

// latest returns v's profile, or draft 21's for a zero or unknown v: the
// data-plane coders are struct literals whose zero Version means the
// newest draft.
func latest(v Version) *Profile {
	if p := v.Profile(); p != nil {
		return p
	}
	return &profile21
}

// notIn returns the error for something the draft of p cannot express.
func (p *Profile) notIn(what string) error {
	return &NotInDraftError{What: what, Version: p.Version}
}

// setOf builds a set from a list.
func setOf[K comparable](keys ...K) map[K]bool {
	m := make(map[K]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// with returns a copy of m with add set and drop removed.
func with[K comparable](m map[K]bool, add []K, drop ...K) map[K]bool {
	out := make(map[K]bool, len(m)+len(add))
	for k := range m {
		out[k] = true
	}
	for _, k := range add {
		out[k] = true
	}
	for _, k := range drop {
		delete(out, k)
	}
	return out
}
