package relay

import (
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// OfferNamespace adds ns to the namespaces the relay offers its
// SUBSCRIBE_NAMESPACE subscribers, as if a session had announced it, until
// withdraw (idempotent) is called: for a source outside the relay, such
// as a cluster's registry of the namespaces published at its other
// relays. No session publishes it here, so SUBSCRIBE, FETCH and
// TRACK_STATUS for its tracks go to Config.Upstream. Offers of one
// namespace add up: it is withdrawn with the last. After Close it offers
// nothing.
//
// The SUBSCRIBEs held for a publisher (RENDEZVOUS_TIMEOUT, §9.20.7) of a
// track under ns ask Config.Upstream for it at once, as they would a
// session announcing ns here, and the caches kept of ended tracks under
// ns (Config.KeepEnded) are released: a publisher of them may be back.
func (rl *Relay) OfferNamespace(ns wire.Namespace) (withdraw func()) {
	ns = cloneName(wire.FullTrackName{Namespace: ns}).Namespace
	withdraw = rl.ns.offerOutside(ns)
	rl.reg.releaseEndedUnder(ns)
	rl.reg.retryHeld(ns)
	return withdraw
}

// RetryHeld tells the relay that Config.Upstream may now serve the track
// name, as when a cluster learns that it was PUBLISHed at another relay:
// the SUBSCRIBEs held for a publisher of it (RENDEZVOUS_TIMEOUT, §9.20.7)
// ask Upstream again, and proceed if it has one; the cache kept of the
// track since it ended (Config.KeepEnded) is released. For an UpstreamSet,
// the track carried here for subscribers asks it again too, and subscribes
// to the sessions new to it, as to a publisher announcing here (§7.5): a
// publisher that moved to another relay carries the track on. Nothing is
// offered to SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS subscribers.
func (rl *Relay) RetryHeld(name wire.FullTrackName) {
	rl.reg.releaseEnded(name)
	if rl.cfg.Upstream == nil {
		return
	}
	if e := rl.reg.lookup(name); e != nil {
		e.retryUpstream()
	}
}

// RetryNamespace is RetryHeld for every track under ns: Config.Upstream
// may now serve more of them, as when a cluster learns that ns was
// announced at one more relay, which OfferNamespace offered already for
// another.
func (rl *Relay) RetryNamespace(ns wire.Namespace) {
	rl.reg.releaseEndedUnder(ns)
	rl.reg.retryHeld(ns)
}

// offerOutside counts an outside offer of ns in the table.
func (rt *router) offerOutside(ns wire.Namespace) func() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed || sessionLevel(ns) {
		return func() {}
	}
	e := rt.entryLocked(ns)
	e.outside++
	rt.changedLocked(e)
	var once sync.Once
	return func() {
		once.Do(func() {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			if rt.closed {
				return
			}
			// The entry may have been dropped and made anew meanwhile
			// only if its count reached zero, which this offer prevents.
			e.outside--
			rt.changedLocked(e)
		})
	}
}
