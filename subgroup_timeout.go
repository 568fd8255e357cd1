package moqt

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// Delivery timeouts (§5.2) for subgroups this end publishes.
//
// Each subscription's copy of a subgroup (one stream) has two timeouts, in
// milliseconds, 0 for none. The publisher's value is the Object Property
// of that type on the subgroup's first object when present, else the Track
// Property (§10.1, §10.2); the subscriber's is its OBJECT_DELIVERY_TIMEOUT
// or SUBGROUP_DELIVERY_TIMEOUT parameter as it stands after every
// REQUEST_UPDATE. When both are non-zero the smaller applies
// (effectiveTimeout).
//
//   - OBJECT_DELIVERY_TIMEOUT starts when an object's header is handed to
//     the SubgroupWriter (WriteObject, BeginObject: the last
//     header byte, -20 #1844) and covers the object until all of its bytes
//     have been passed to the transport, including bytes that wait in the
//     stream's backlog (served_backlog.go). Each write is checked against it
//     first, and a timer per stream (created once, reset per object) fires
//     for a write that is stuck on flow control, a backlog that is not
//     written in time, or a payload the application is slow to produce.
//   - SUBGROUP_DELIVERY_TIMEOUT starts at Close, when the application says
//     the subgroup is complete and the stream gets its FIN (after its
//     backlog, if it has one). At most maxSubgroupTimers run per
//     subscription, and all stop when it ends (subgroupTimers).
//
// Either way a late stream is reset with DELIVERY_TIMEOUT (§11.3.2, C020)
// and no new stream is opened for the rest of the subgroup. The object
// check sees only what quic-go has not taken: quic-go takes a stream's
// writes as long as flow control allows, and retransmits what it took
// however late, so on a lossy path (or a stalled one, within the peer's
// windows) objects taken before their deadline arrive after it; a
// lossy-link run delivered every 29-byte object of a 3 s blackout up to
// 3.4 s late with OBJECT_DELIVERY_TIMEOUT 300 ms. quic-go does not tell when a
// stream's data has all been acknowledged, so the subgroup timer cannot
// see "all data committed": when it fires the stream is reset even if
// everything arrived; a subscriber that has read the whole subgroup and its
// FIN ignores that reset (§11.3.2), one that has not loses the unread
// part.

// effectiveTimeout is the delivery timeout in force, in milliseconds: the
// smaller of the publisher's and the subscriber's values when both are
// non-zero, else the one that is; 0 means none (§5.2).
func effectiveTimeout(publisher, subscriber uint64) uint64 {
	switch {
	case publisher == 0:
		return subscriber
	case subscriber == 0:
		return publisher
	}
	return min(publisher, subscriber)
}

// deliveryTimeouts are a pair of timeouts in milliseconds, 0 for none.
type deliveryTimeouts struct {
	object, subgroup uint64
}

// trackTimeouts reads the Track Properties OBJECT_DELIVERY_TIMEOUT and
// SUBGROUP_DELIVERY_TIMEOUT, looked for inside IMMUTABLE_PROPERTIES too
// (§10.7).
func trackTimeouts(props wire.KVList) deliveryTimeouts {
	var d deliveryTimeouts
	if kv, ok := props.Lookup(wire.PropObjectDeliveryTimeout); ok {
		d.object = kv.Value
	}
	if kv, ok := props.Lookup(wire.PropSubgroupDeliveryTimeout); ok {
		d.subgroup = kv.Value
	}
	return d
}

// withObjectProperties overrides d with the timeouts set as Object
// Properties of a subgroup's first object (§10.1, §10.2), looked for
// inside IMMUTABLE_PROPERTIES too (§10.7). The publishing paths have
// checked the block (LocalTrack.checkSent); pairs after one that does not
// parse are not searched (wire.LookupProperty).
func (d deliveryTimeouts) withObjectProperties(props []byte) deliveryTimeouts {
	if len(props) == 0 {
		return d
	}
	if kv, ok := wire.LookupProperty(props, wire.PropObjectDeliveryTimeout); ok {
		d.object = kv.Value
	}
	if kv, ok := wire.LookupProperty(props, wire.PropSubgroupDeliveryTimeout); ok {
		d.subgroup = kv.Value
	}
	return d
}

// datagramLate reports whether a datagram provided at start (mono.Now) is
// past its delivery timeout for a subscription with parameters p: for
// datagrams both timeouts act alike, and the smaller applies (§5.2). The
// datagram's Object Properties override the track's, as a subgroup's first
// object does.
func datagramLate(start int64, publisher deliveryTimeouts, p dataParams) bool {
	timeout := effectiveTimeout(effectiveTimeout(publisher.object, p.objectTimeout),
		effectiveTimeout(publisher.subgroup, p.subgroupTimeout))
	return timeout != 0 && time.Duration(mono.Now()-start) > millis(timeout)
}

// millis converts a timeout in milliseconds, capped so it cannot overflow.
func millis(ms uint64) time.Duration {
	const maxMS = uint64(1<<63-1) / uint64(time.Millisecond)
	return time.Duration(min(ms, maxMS)) * time.Millisecond
}

// dataParams are the subscription parameters the data path reads for each
// object: they may change with REQUEST_UPDATE.
type dataParams struct {
	priority                       uint8
	order                          wire.GroupOrder // 0 when the subscriber set none
	objectTimeout, subgroupTimeout uint64
}

// dataParamsOf reads the data parameters from the subscriber's current
// parameters p.
func dataParamsOf(p *wire.Params) dataParams {
	return dataParams{
		priority:        subscriberPriority(p),
		order:           p.GroupOrder.Value,
		objectTimeout:   p.ObjectDeliveryTimeout.Value,
		subgroupTimeout: p.SubgroupDeliveryTimeout.Value,
	}
}

// streamDeadline is the delivery-timeout state of one subgroup stream. The
// SubgroupWriter arms and disarms it under its lock, or, while the stream
// is backlogged, the drain under the backlog's lock; the timer fires on its
// own goroutine and touches only the atomics and the stream.
type streamDeadline struct {
	timer    *time.Timer  // created on the first armed object, then reset
	subgroup *time.Timer  // the SUBGROUP_DELIVERY_TIMEOUT, once the stream is finished
	deadline atomic.Int64 // mono.Now deadline of the current object; 0 when none
	expired  atomic.Bool  // reset with DELIVERY_TIMEOUT
}

// maxSubgroupTimers bounds the SUBGROUP_DELIVERY_TIMEOUTs running for one
// subscription. quic-go does not tell when a stream's data has all been
// acknowledged, so each timer runs its full course; a subscriber choosing
// a long timeout would otherwise keep one per finished subgroup, each
// holding its stream. Past the bound the oldest fires early: §5.2 lets a
// publisher give up on delivery before the timeout.
const maxSubgroupTimers = 64

// subgroupTimers are a subscription's running SUBGROUP_DELIVERY_TIMEOUTs,
// oldest first. All are stopped, and their streams released, when the
// subscription ends, with its session or otherwise.
type subgroupTimers struct {
	mu      sync.Mutex
	running []*subgroupOut
	ended   bool        // the subscription is over: start no more
	watch   func() bool // stops the context.AfterFunc that ends them
}

// end stops every running timer once the subscription is over: its
// streams were reset with it, and the timers must not keep it, or its
// session, in memory.
func (ts *subgroupTimers) end() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.ended = true
	for _, out := range ts.running {
		out.dl.subgroup.Stop()
	}
	ts.running = nil
}

// count returns how many timers run.
func (ts *subgroupTimers) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.running)
}
