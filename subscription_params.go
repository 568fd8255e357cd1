package moqt

import "github.com/moqt-go/moqt/wire"

// mergeParams overlays the parameters present in update onto p, the rule for
// REQUEST_UPDATE (§9.5). FILL_PARAMETERS is never sticky (§9.20.16); a
// range filter of a type in update replaces that type's filters, and a
// Clear one removes them (§3.3.2).
func mergeParams(p, update *wire.Params) {
	set := func(dst *wire.Opt[uint64], src wire.Opt[uint64]) {
		if src.Set {
			*dst = src
		}
	}
	set(&p.ObjectDeliveryTimeout, update.ObjectDeliveryTimeout)
	set(&p.SubgroupDeliveryTimeout, update.SubgroupDeliveryTimeout)
	set(&p.NewGroupRequest, update.NewGroupRequest)
	if len(update.AuthorizationTokens) > 0 {
		p.AuthorizationTokens = update.AuthorizationTokens
	}
	if update.Forward.Set {
		p.Forward = update.Forward
	}
	if update.SubscriberPriority.Set {
		p.SubscriberPriority = update.SubscriberPriority
	}
	if update.LocationFilter.Set {
		p.LocationFilter = update.LocationFilter
		if update.LocationFilter.Value.Fields == 0 {
			p.LocationFilter = wire.Opt[wire.LocationFilter]{}
		}
	}
	if len(update.RangeFilters) > 0 {
		replaced := map[wire.ParamType]bool{}
		for _, f := range update.RangeFilters {
			replaced[f.Type] = true
		}
		kept := p.RangeFilters[:0:0]
		for _, f := range p.RangeFilters {
			if !replaced[f.Type] {
				kept = append(kept, f)
			}
		}
		for _, f := range update.RangeFilters {
			if !f.Clear {
				kept = append(kept, f)
			}
		}
		p.RangeFilters = kept
	}
}

// ownKVList copies l so that it no longer aliases a read buffer.
func ownKVList(l wire.KVList) (wire.KVList, error) {
	b, err := l.Append(nil)
	if err != nil {
		return nil, &SessionError{Code: wire.InternalError, Reason: err.Error()}
	}
	return wire.ParseKVList(b)
}

// publishOKParams returns the parameters of a PUBLISH-initiated
// subscription once a PUBLISH_OK carrying ok is sent or received, on a
// draft where it carries the subscriber's choice (draftRules.
// publishOKParams). What ok omits takes the default a SUBSCRIBE would
// give, not the PUBLISH's value: FORWARD 1, no filter, SUBSCRIBER_PRIORITY
// 128, the track's GROUP_ORDER (18 §10.2.5–§10.2.12, 19 the same). The
// publisher's own EXPIRES, LARGEST_OBJECT and tokens stay; range filters
// of ok replace those of their type, as in REQUEST_UPDATE.
func publishOKParams(pub, ok *wire.Params) wire.Params {
	p := *pub
	p.Forward, p.SubscriberPriority, p.GroupOrder = ok.Forward, ok.SubscriberPriority, ok.GroupOrder
	p.ObjectDeliveryTimeout, p.SubgroupDeliveryTimeout = ok.ObjectDeliveryTimeout, ok.SubgroupDeliveryTimeout
	p.NewGroupRequest = ok.NewGroupRequest
	p.LocationFilter = ok.LocationFilter
	if ok.LocationFilter.Set && ok.LocationFilter.Value.Fields == 0 {
		p.LocationFilter = wire.Opt[wire.LocationFilter]{} // AbsoluteStart {0,0}: unfiltered
	}
	mergeParams(&p, &wire.Params{RangeFilters: ok.RangeFilters})
	return p
}

// publishOKChange is what a PUBLISH_OK carrying ok changes in a routing
// filter (filter.Filter.Update): the Forward State and the Location filter
// always, absent ones taking their defaults; range filters as given.
func publishOKChange(ok *wire.Params) *wire.Params {
	loc := ok.LocationFilter
	if !loc.Set {
		loc = wire.Some(wire.LocationFilter{}) // no fields: no filter
	}
	return &wire.Params{Forward: wire.Some(forwardOf(ok)), LocationFilter: loc, RangeFilters: ok.RangeFilters}
}
