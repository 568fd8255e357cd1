package moqt

import (
	"github.com/moqt-go/moqt/internal/priority"
	"github.com/moqt-go/moqt/wire"
)

// Priorities (§5.1). The ranking of data streams onto quic-go urgencies
// lives in internal/priority; this file holds what comes from the session
// and its requests: which sessions rank at all, and the priorities and
// group order requests and tracks carry.

// priorities returns the session's data stream priorities, or nil on
// WebTransport, where streams have none.
func (s *Session) priorities() *priority.Table {
	if s.conn.WebTransport() {
		return nil
	}
	return &s.prio
}

// subscriberPriority is the SUBSCRIBER_PRIORITY in force: 128 when the
// subscriber set none (§9.20.8).
func subscriberPriority(p *wire.Params) uint8 {
	if p.SubscriberPriority.Set {
		return p.SubscriberPriority.Value
	}
	return DefaultSubscriberPriority
}

// DefaultSubscriberPriority is the subscriber priority of a request that
// does not set SUBSCRIBER_PRIORITY (§9.20.8).
const DefaultSubscriberPriority = 128

// trackGroupOrder is the track's DEFAULT_PUBLISHER_GROUP_ORDER, Ascending
// when absent or invalid (§10.5).
func trackGroupOrder(props wire.KVList) wire.GroupOrder {
	if kv, ok := props.Get(wire.PropDefaultPublisherGroupOrder); ok && kv.Value == uint64(wire.GroupOrderDescending) {
		return wire.GroupOrderDescending
	}
	return wire.GroupOrderAscending
}

// refreshPriority re-reads the subscriber priority of ss and applies it to
// its open data streams. The data path does this on the next object
// anyway; calling it when a REQUEST_UPDATE changes SUBSCRIBER_PRIORITY
// applies the change to streams that are waiting for no new object.
func (ss *ServedSubscription) refreshPriority() {
	ss.mu.Lock()
	prio := subscriberPriority(&ss.params)
	ss.mu.Unlock()
	ss.sess.priorities().SetSubscriber(ss.rs.id, prio)
}
