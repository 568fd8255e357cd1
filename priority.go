package moqt

import (
	"github.com/moqt-go/moqt/wire"
)

// Priorities (§5.1). The ranking of data streams onto quic-go urgencies
// lives in internal/priority; here is what requests and tracks carry: the
// subscriber priority and the group order.

// subscriberPriority is the SUBSCRIBER_PRIORITY in force: 128 when the
// subscriber set none (§9.20.8).
func subscriberPriority(p *wire.Params) uint8 {
	if p.SubscriberPriority.Set {
		return p.SubscriberPriority.Value
	}
	return defaultSubscriberPriority
}

// defaultSubscriberPriority is the subscriber priority of a request that
// does not set SUBSCRIBER_PRIORITY (§9.20.8).
const defaultSubscriberPriority = 128

// trackGroupOrder is the track's DEFAULT_PUBLISHER_GROUP_ORDER, Ascending
// when absent or invalid (§10.5), looked for inside IMMUTABLE_PROPERTIES
// too (§10.7).
func trackGroupOrder(props wire.KVList) wire.GroupOrder {
	if kv, ok := props.Lookup(wire.PropDefaultPublisherGroupOrder); ok && kv.Value == uint64(wire.GroupOrderDescending) {
		return wire.GroupOrderDescending
	}
	return wire.GroupOrderAscending
}
