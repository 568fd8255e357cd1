package wire

import "fmt"

// ParamType is a Message Parameter type (§9.20, §16.7). Message Parameters
// are not Key-Value-Pairs: each type defines its own value encoding, and an
// unknown type closes the session because it cannot be skipped.
type ParamType uint64

// Message Parameter types (§9.20).
const (
	ParamObjectDeliveryTimeout   ParamType = 0x02 // vi64 ms
	ParamAuthorizationToken      ParamType = 0x03 // length-prefixed Token; may repeat (§8.9)
	ParamRendezvousTimeout       ParamType = 0x04 // vi64 ms
	ParamSubgroupDeliveryTimeout ParamType = 0x06 // vi64 ms
	ParamExpires                 ParamType = 0x08 // vi64 ms
	ParamLargestObject           ParamType = 0x09 // Location
	ParamFillTimeout             ParamType = 0x0A // vi64 ms
	ParamForward                 ParamType = 0x10 // uint8 0/1
	ParamSubscriberPriority      ParamType = 0x20 // uint8
	ParamLocationFilter          ParamType = 0x21 // length-prefixed vi64s
	ParamGroupOrder              ParamType = 0x22 // uint8 1/2
	ParamFillParameters          ParamType = 0x23 // length-prefixed parameter list
	ParamSubgroupFilter          ParamType = 0x25 // range filter; may repeat
	ParamObjectIDFilter          ParamType = 0x26 // range filter; may repeat
	ParamPriorityFilter          ParamType = 0x27 // range filter; may repeat
	ParamObjectPropertyFilter    ParamType = 0x28 // range filter with property type; may repeat
	ParamTrackPropertyFilter     ParamType = 0x29 // range filter with property type; may repeat
	ParamNewGroupRequest         ParamType = 0x32 // vi64
	ParamTrackNamespacePrefix    ParamType = 0x34 // Track Namespace
	ParamIncludeProperties       ParamType = 0x35 // uint8 0/1
)

var paramNames = map[ParamType]string{
	ParamObjectDeliveryTimeout:   "OBJECT_DELIVERY_TIMEOUT",
	ParamAuthorizationToken:      "AUTHORIZATION_TOKEN",
	ParamRendezvousTimeout:       "RENDEZVOUS_TIMEOUT",
	ParamSubgroupDeliveryTimeout: "SUBGROUP_DELIVERY_TIMEOUT",
	ParamExpires:                 "EXPIRES",
	ParamLargestObject:           "LARGEST_OBJECT",
	ParamFillTimeout:             "FILL_TIMEOUT",
	ParamForward:                 "FORWARD",
	ParamSubscriberPriority:      "SUBSCRIBER_PRIORITY",
	ParamLocationFilter:          "LOCATION_FILTER",
	ParamGroupOrder:              "GROUP_ORDER",
	ParamFillParameters:          "FILL_PARAMETERS",
	ParamSubgroupFilter:          "SUBGROUP_FILTER",
	ParamObjectIDFilter:          "OBJECTID_FILTER",
	ParamPriorityFilter:          "PRIORITY_FILTER",
	ParamObjectPropertyFilter:    "OBJECT_PROPERTY_FILTER",
	ParamTrackPropertyFilter:     "TRACK_PROPERTY_FILTER",
	ParamNewGroupRequest:         "NEW_GROUP_REQUEST",
	ParamTrackNamespacePrefix:    "TRACK_NAMESPACE_PREFIX",
	ParamIncludeProperties:       "INCLUDE_PROPERTIES",
}

func (t ParamType) String() string { return codeName(paramNames, t) }

// IsRangeFilter reports whether t is one of the range filters 0x25–0x29
// (§3.3.2).
func (t ParamType) IsRangeFilter() bool {
	return t >= ParamSubgroupFilter && t <= ParamTrackPropertyFilter
}

// hasPropertyType reports whether a range filter of type t carries a
// Property Type after its SetID (§9.20.14, §9.20.15).
func (t ParamType) hasPropertyType() bool {
	return t == ParamObjectPropertyFilter || t == ParamTrackPropertyFilter
}

// ParamContext names a place where a parameter list appears. Which
// parameters are allowed depends on it (§9.20.1): an allowed parameter
// elsewhere closes the session with PROTOCOL_VIOLATION. REQUEST_OK and
// REQUEST_UPDATE serve several requests, so they have one context per
// request kind. Contexts are bits and can be combined.
type ParamContext uint32

// Parameter contexts.
const (
	InSubscribe ParamContext = 1 << iota
	InSubscribeOK
	InPublish
	InPublishOK // REQUEST_OK answering PUBLISH
	InFetch
	InFetchOK
	InTrackStatus
	InTrackStatusOK // REQUEST_OK answering TRACK_STATUS
	InPublishNamespace
	InPublishNamespaceOK // REQUEST_OK answering PUBLISH_NAMESPACE
	InSubscribeNamespace
	InSubscribeNamespaceOK // REQUEST_OK answering SUBSCRIBE_NAMESPACE
	InSubscribeTracks
	InSubscribeTracksOK  // REQUEST_OK answering SUBSCRIBE_TRACKS
	InUpdateSubscription // REQUEST_UPDATE on a SUBSCRIBE or PUBLISH stream
	InUpdateFetch
	InUpdatePublishNamespace
	InUpdateSubscribeNamespace
	InUpdateSubscribeTracks
	InUpdateOK // REQUEST_OK answering REQUEST_UPDATE
	InPublishStateNotify
	InFillParameters // inside FILL_PARAMETERS (§9.20.16)

	// InAnyUpdate is every REQUEST_UPDATE context.
	InAnyUpdate = InUpdateSubscription | InUpdateFetch | InUpdatePublishNamespace |
		InUpdateSubscribeNamespace | InUpdateSubscribeTracks
	// InAnyRequestOK is every REQUEST_OK context.
	InAnyRequestOK = InPublishOK | InTrackStatusOK | InPublishNamespaceOK |
		InSubscribeNamespaceOK | InSubscribeTracksOK | InUpdateOK
)

// GroupOrder is the GROUP_ORDER parameter and the
// DEFAULT_PUBLISHER_GROUP_ORDER property (§9.20.9, §10.5).
type GroupOrder uint8

// Group orders.
const (
	GroupOrderAscending  GroupOrder = 0x1
	GroupOrderDescending GroupOrder = 0x2
)

func (o GroupOrder) String() string {
	switch o {
	case GroupOrderAscending:
		return "ascending"
	case GroupOrderDescending:
		return "descending"
	}
	return fmt.Sprintf("GroupOrder(%d)", uint8(o))
}

// Opt is an optional parameter value: Set reports whether it was present.
type Opt[T any] struct {
	Value T
	Set   bool
}

// Some returns a present Opt holding v.
func Some[T any](v T) Opt[T] { return Opt[T]{Value: v, Set: true} }

// Get returns the value and whether it is present, for the comma-ok
// idiom: if t, ok := p.Expires.Get(); ok { ... }. An absent Opt gives the
// zero T, whatever its Value field holds.
func (o Opt[T]) Get() (T, bool) {
	if !o.Set {
		var zero T
		return zero, false
	}
	return o.Value, true
}

// Params is a decoded Message Parameter list (§9.20). A zero Params has no
// parameters. Absent parameters take the defaults their sections define;
// applying those defaults is the session's job, not the codec's.
type Params struct {
	ObjectDeliveryTimeout   Opt[uint64]
	AuthorizationTokens     []Token
	RendezvousTimeout       Opt[uint64]
	SubgroupDeliveryTimeout Opt[uint64]
	Expires                 Opt[uint64]
	LargestObject           Opt[Location]
	FillTimeout             Opt[uint64]
	Forward                 Opt[bool]
	SubscriberPriority      Opt[uint8]
	LocationFilter          Opt[LocationFilter]
	GroupOrder              Opt[GroupOrder]
	// FillParameters, when non-nil, requests a fill fetch stream and holds the
	// parameters that apply to it, a separate scope (§9.20.16).
	FillParameters       *Params
	RangeFilters         []RangeFilter
	NewGroupRequest      Opt[uint64]
	TrackNamespacePrefix Opt[Namespace]
	IncludeProperties    Opt[bool]
}

// RangeCount returns the number of Ranges over all range filters, the figure
// limited by the peer's MAX_FILTER_RANGES (§9.1.6). Ranges inside
// FILL_PARAMETERS are not included.
func (p *Params) RangeCount() int {
	n := 0
	for _, f := range p.RangeFilters {
		n += len(f.Ranges)
	}
	return n
}

// Check reports a PROTOCOL_VIOLATION if p holds a parameter that ctx does
// not allow in draft 21 (§9.20.1). Parsing already checks against the
// message's possible contexts; a session calls Check on REQUEST_OK and
// REQUEST_UPDATE parameters once it knows which request they belong to.
func (p *Params) Check(ctx ParamContext) error { return p.CheckFor(Draft21, ctx) }

// CheckFor is Check under the parameter table of draft v.
func (p *Params) CheckFor(v Version, ctx ParamContext) error {
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	p.each(func(t ParamType) bool {
		if allowed, ok := prof.params[t]; !ok || allowed&ctx == 0 {
			err = violation("parameter %s not allowed here in %s", t, v)
			return false
		}
		return true
	})
	return err
}

// permit reports, for encoding, whether every parameter present in p is
// defined by the draft and allowed in one of ctx.
func (p *Params) permit(prof *Profile, ctx ParamContext) error {
	var err error
	p.each(func(t ParamType) bool {
		allowed, ok := prof.params[t]
		switch {
		case !ok:
			err = prof.notIn("parameter " + t.String())
		case allowed&ctx == 0:
			err = prof.notIn("parameter " + t.String() + " in this message")
		}
		return err == nil
	})
	return err
}

// each calls fn once for every parameter type present in p, in ascending
// order, stopping when fn returns false.
func (p *Params) each(fn func(ParamType) bool) {
	present := []struct {
		t  ParamType
		ok bool
	}{
		{ParamObjectDeliveryTimeout, p.ObjectDeliveryTimeout.Set},
		{ParamAuthorizationToken, len(p.AuthorizationTokens) > 0},
		{ParamRendezvousTimeout, p.RendezvousTimeout.Set},
		{ParamSubgroupDeliveryTimeout, p.SubgroupDeliveryTimeout.Set},
		{ParamExpires, p.Expires.Set},
		{ParamLargestObject, p.LargestObject.Set},
		{ParamFillTimeout, p.FillTimeout.Set},
		{ParamForward, p.Forward.Set},
		{ParamSubscriberPriority, p.SubscriberPriority.Set},
		{ParamLocationFilter, p.LocationFilter.Set},
		{ParamGroupOrder, p.GroupOrder.Set},
		{ParamFillParameters, p.FillParameters != nil},
	}
	for _, e := range present {
		if e.ok && !fn(e.t) {
			return
		}
	}
	for t := ParamSubgroupFilter; t <= ParamTrackPropertyFilter; t++ {
		for _, f := range p.RangeFilters {
			if f.Type == t {
				if !fn(t) {
					return
				}
				break
			}
		}
	}
	if p.NewGroupRequest.Set && !fn(ParamNewGroupRequest) ||
		p.TrackNamespacePrefix.Set && !fn(ParamTrackNamespacePrefix) {
		return
	}
	if p.IncludeProperties.Set {
		fn(ParamIncludeProperties)
	}
}

// appendLenPrefixed appends a vi64 length followed by what fn appends. The
// length is written minimally: one byte is reserved and the value shifted if
// it turns out longer, so a reused buffer needs no scratch space.
func appendLenPrefixed(b []byte, fn func([]byte) ([]byte, error)) ([]byte, error) {
	at := len(b)
	b = append(b, 0)
	b, err := fn(b)
	if err != nil {
		return b[:at], err
	}
	n := uint64(len(b) - at - 1)
	extra := VarintLen(n) - 1
	for range extra {
		b = append(b, 0)
	}
	copy(b[at+1+extra:], b[at+1:len(b)-extra])
	AppendVarint(b[:at], n)
	return b, nil
}

// Append appends Number of Parameters followed by the parameters in
// ascending type order (§9.20), in draft 21's encoding and without checking
// where they may appear.
func (p *Params) Append(b []byte) ([]byte, error) { return p.appendIn(&profile21, b) }

// AppendFor appends p as draft v encodes it for a message of context ctx.
// A parameter the draft lacks, or does not allow in ctx, or a value it
// cannot express, fails with a *NotInDraftError.
func (p *Params) AppendFor(v Version, ctx ParamContext, b []byte) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	if err := p.permit(prof, ctx); err != nil {
		return b, err
	}
	return p.appendIn(prof, b)
}

// appendIn appends p in the encoding of prof.
func (p *Params) appendIn(prof *Profile, b []byte) ([]byte, error) {
	n := 0
	p.each(func(t ParamType) bool {
		switch {
		case t == ParamAuthorizationToken:
			n += len(p.AuthorizationTokens)
		case t.IsRangeFilter():
			for _, f := range p.RangeFilters {
				if f.Type == t {
					n++
				}
			}
		default:
			n++
		}
		return true
	})
	b = AppendVarint(b, uint64(n))
	var prev ParamType
	var err error
	param := func(t ParamType) {
		b = AppendVarint(b, uint64(t-prev))
		prev = t
	}
	p.each(func(t ParamType) bool {
		switch t {
		case ParamObjectDeliveryTimeout, ParamRendezvousTimeout, ParamSubgroupDeliveryTimeout,
			ParamExpires, ParamFillTimeout, ParamNewGroupRequest:
			param(t)
			b = AppendVarint(b, p.varintParam(t).Value)
		case ParamAuthorizationToken:
			for _, tok := range p.AuthorizationTokens {
				param(t)
				if b, err = appendLenPrefixed(b, tok.Append); err != nil {
					return false
				}
			}
		case ParamLargestObject:
			param(t)
			b = p.LargestObject.Value.Append(b)
		case ParamForward:
			param(t)
			b = append(b, boolByte(p.Forward.Value))
		case ParamSubscriberPriority:
			param(t)
			b = append(b, p.SubscriberPriority.Value)
		case ParamLocationFilter:
			param(t)
			b, err = p.LocationFilter.Value.appendIn(prof, b)
		case ParamGroupOrder:
			if o := p.GroupOrder.Value; o != GroupOrderAscending && o != GroupOrderDescending {
				err = violation("invalid group order %d", o)
				return false
			}
			param(t)
			b = append(b, byte(p.GroupOrder.Value))
		case ParamFillParameters:
			if err = p.FillParameters.permit(prof, InFillParameters); err != nil {
				return false
			}
			param(t)
			b, err = appendLenPrefixed(b, func(b []byte) ([]byte, error) { return p.FillParameters.appendIn(prof, b) })
		case ParamTrackNamespacePrefix:
			param(t)
			b, err = p.TrackNamespacePrefix.Value.Append(b)
		case ParamIncludeProperties:
			param(t)
			b = append(b, boolByte(p.IncludeProperties.Value))
		default: // range filters
			for i := range p.RangeFilters {
				if f := &p.RangeFilters[i]; f.Type == t {
					param(t)
					if b, err = appendLenPrefixed(b, f.appendValue); err != nil {
						return false
					}
				}
			}
		}
		return err == nil
	})
	return b, err
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// varintParam returns the field of a parameter whose value is one vi64.
func (p *Params) varintParam(t ParamType) *Opt[uint64] {
	switch t {
	case ParamObjectDeliveryTimeout:
		return &p.ObjectDeliveryTimeout
	case ParamRendezvousTimeout:
		return &p.RendezvousTimeout
	case ParamSubgroupDeliveryTimeout:
		return &p.SubgroupDeliveryTimeout
	case ParamExpires:
		return &p.Expires
	case ParamFillTimeout:
		return &p.FillTimeout
	case ParamNewGroupRequest:
		return &p.NewGroupRequest
	}
	return nil
}

// params parses Number of Parameters and the parameters (§9.20), allowing
// only those that the draft of prof defines and some context in ctx
// permits. Session-level violations are
// returned at once; a request-level *RejectError (a bad range filter) is
// returned only once the whole list has parsed cleanly, with p filled in.
func (c *cursor) params(prof *Profile, ctx ParamContext) (p Params, err error) {
	count, err := c.varint("number of parameters")
	if err != nil {
		return p, err
	}
	// Every parameter takes at least two bytes.
	if count > uint64(len(c.b)) {
		return p, truncated("parameters")
	}
	var rej error
	type filterKey struct {
		t     ParamType
		set   uint8
		ptype uint64
	}
	var prev ParamType
	for i := uint64(0); i < count; i++ {
		d, err := c.varint("parameter type")
		if err != nil {
			return p, err
		}
		if i > 0 && d > MaxVarint-uint64(prev) {
			return p, violation("parameter type delta overflows")
		}
		t := prev + ParamType(d)
		allowed, known := prof.params[t]
		if !known {
			return p, violation("unknown parameter type 0x%x in %s", uint64(t), prof.Version)
		}
		if allowed&ctx == 0 {
			return p, violation("parameter %s not allowed here", t)
		}
		repeatable := t == ParamAuthorizationToken || t.IsRangeFilter()
		if i > 0 && d == 0 && !repeatable {
			return p, violation("parameter %s repeated", t)
		}
		prev = t
		switch t {
		case ParamObjectDeliveryTimeout, ParamRendezvousTimeout, ParamSubgroupDeliveryTimeout,
			ParamExpires, ParamFillTimeout, ParamNewGroupRequest:
			v, err := c.varint(t.String())
			if err != nil {
				return p, err
			}
			*p.varintParam(t) = Some(v)
		case ParamAuthorizationToken:
			raw, err := c.lenBytes(t.String(), MaxMessageBody)
			if err != nil {
				return p, err
			}
			tok, err := ParseToken(raw)
			if err != nil {
				return p, err
			}
			p.AuthorizationTokens = append(p.AuthorizationTokens, tok)
		case ParamLargestObject:
			l, err := c.location(t.String())
			if err != nil {
				return p, err
			}
			p.LargestObject = Some(l)
		case ParamForward, ParamIncludeProperties:
			v, err := c.uint8(t.String())
			if err != nil {
				return p, err
			}
			if v > 1 {
				return p, violation("%s value %d is not 0 or 1", t, v) // C017
			}
			if t == ParamForward {
				p.Forward = Some(v == 1)
			} else {
				p.IncludeProperties = Some(v == 1)
			}
		case ParamSubscriberPriority:
			v, err := c.uint8(t.String())
			if err != nil {
				return p, err
			}
			p.SubscriberPriority = Some(v)
		case ParamLocationFilter:
			f, err := c.locationFilterIn(prof)
			if err != nil {
				return p, err
			}
			p.LocationFilter = Some(f)
		case ParamGroupOrder:
			v, err := c.uint8(t.String())
			if err != nil {
				return p, err
			}
			if o := GroupOrder(v); o != GroupOrderAscending && o != GroupOrderDescending {
				return p, violation("GROUP_ORDER value %d", v) // C015
			}
			p.GroupOrder = Some(GroupOrder(v))
		case ParamFillParameters:
			raw, err := c.lenBytes(t.String(), MaxMessageBody)
			if err != nil {
				return p, err
			}
			in := cursor{raw}
			fill, err := in.params(prof, InFillParameters) // C097
			var re *RejectError
			if err != nil && !asReject(err, &re) {
				return p, err
			}
			if err := in.done(t.String()); err != nil {
				return p, err
			}
			if re != nil && rej == nil {
				rej = re
			}
			p.FillParameters = &fill
		case ParamTrackNamespacePrefix:
			ns, err := c.namespace()
			if err != nil {
				return p, err
			}
			p.TrackNamespacePrefix = Some(ns)
		default: // range filters
			f, err := c.rangeFilter(t)
			var re *RejectError
			if err != nil && !asReject(err, &re) {
				return p, err
			}
			if re != nil && rej == nil {
				rej = re
			}
			if !f.Clear && rej == nil {
				key := filterKey{t, f.SetID, f.PropertyType}
				for _, g := range p.RangeFilters {
					if !g.Clear && (filterKey{g.Type, g.SetID, g.PropertyType}) == key {
						rej = reject(ReqInvalidFilter, "%s with SetID %d repeated", t, f.SetID) // C025
						break
					}
				}
			}
			p.RangeFilters = append(p.RangeFilters, f)
		}
	}
	return p, rej
}

// asReject reports whether err is a *RejectError, storing it in *re.
func asReject(err error, re **RejectError) bool {
	r, ok := err.(*RejectError)
	if ok {
		*re = r
	}
	return ok
}

// ParseParams decodes a draft-21 parameter list that fills all of b,
// allowing the parameters of ctx. See Params for the two error kinds.
func ParseParams(b []byte, ctx ParamContext) (Params, error) { return ParseParamsFor(Draft21, b, ctx) }

// ParseParamsFor is ParseParams under the tables and encodings of draft v.
func ParseParamsFor(v Version, b []byte, ctx ParamContext) (Params, error) {
	prof, err := profileFor(v)
	if err != nil {
		return Params{}, err
	}
	c := cursor{b}
	p, err := c.params(prof, ctx)
	if _, ok := err.(*RejectError); err != nil && !ok {
		return p, err
	}
	if derr := c.done("parameters"); derr != nil {
		return p, derr
	}
	return p, err
}
