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
