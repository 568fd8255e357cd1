package moqt

import (
	"errors"
	"fmt"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// ErrDuplicateSubscription refuses, before anything is sent, a second
// subscription to a track in the same role on a session whose draft
// allows one per track and role (draft 18, §5.1): Session.Subscribe while
// this end subscribes to the track already, LocalTrack.Publish while it
// serves the track to the peer.
var ErrDuplicateSubscription = errors.New("moqt: one subscription per track and role in this draft")

// trackClaims holds, on a session whose draft has the rule (draftRules.
// onePerTrack), the one subscription each track may have per role (18
// §5.1): the one this end serves, and the one through which it receives.
// An entry lives as long as its subscription: it leaves when the
// subscription is Terminated.
type trackClaims struct {
	mu     sync.Mutex // a leaf, never held while calling out
	served map[wire.TrackKey]*subState
	subs   map[wire.TrackKey]*Subscription
}

// duplicateErr is the refusal of a second subscription, sent or returned.
func duplicateErr(track wire.FullTrackName, role string) error {
	return fmt.Errorf("%w: this end %s %s already", ErrDuplicateSubscription, role, track)
}

// subscribed reports whether this end receives track through a
// subscription already.
func (c *trackClaims) subscribed(track wire.FullTrackName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.subs[track.Key()]
	return ok
}

// serving reports whether this end serves track to the peer already.
func (c *trackClaims) serving(track wire.FullTrackName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.served[track.Key()]
	return ok
}

// claimServed records st as the subscription this end serves track
// through, or reports false if it serves one already.
func (c *trackClaims) claimServed(track wire.FullTrackName, st *subState) bool {
	key := track.Key()
	c.mu.Lock()
	if _, ok := c.served[key]; ok {
		c.mu.Unlock()
		return false
	}
	if c.served == nil {
		c.served = map[wire.TrackKey]*subState{}
	}
	c.served[key] = st
	c.mu.Unlock()
	st.whenTerminated(func() { c.releaseServed(track, st) })
	return true
}

// releaseServed lets go of st's claim on track, if it holds it. A refusal
// calls it before its REQUEST_ERROR goes (RequestCommon.unclaim), so that
// a SUBSCRIBE the peer sends for the track as soon as it reads the error
// is not refused for it; st's end calls it otherwise.
func (c *trackClaims) releaseServed(track wire.FullTrackName, st *subState) {
	key := track.Key()
	c.mu.Lock()
	if c.served[key] == st {
		delete(c.served, key)
	}
	c.mu.Unlock()
}

// claimSub records sub as the subscription this end receives track
// through. A PUBLISH (takeOver) may replace a subscription of this end's
// that is still Pending(Subscriber), which it returns for the caller to
// end before its PUBLISH_OK (18 §5.1); any other holder refuses the claim.
func (c *trackClaims) claimSub(track wire.FullTrackName, sub *Subscription, takeOver bool) (displaced *Subscription, ok bool) {
	key := track.Key()
	c.mu.Lock()
	if old := c.subs[key]; old != nil {
		if !takeOver || old.current() != statePendingSubscriber {
			c.mu.Unlock()
			return nil, false
		}
		displaced = old
	}
	if c.subs == nil {
		c.subs = map[wire.TrackKey]*Subscription{}
	}
	c.subs[key] = sub
	c.mu.Unlock()
	sub.whenTerminated(func() { c.releaseSub(track, sub, displaced) })
	return displaced, true
}

// releaseSub lets go of sub's claim on track, if it holds it, as
// releaseServed does: a refused PUBLISH gives the track back to the
// subscription it would have replaced, displaced (nil for none).
func (c *trackClaims) releaseSub(track wire.FullTrackName, sub, displaced *Subscription) {
	key := track.Key()
	c.mu.Lock()
	if c.subs[key] == sub {
		delete(c.subs, key)
		if displaced != nil && displaced.current() != stateTerminated {
			c.subs[key] = displaced
		}
	}
	c.mu.Unlock()
}

// unsentInPublish moves out of p, the parameters of a PUBLISH that a
// SUBSCRIBE_TRACKS starts, those the session's draft does not let PUBLISH
// carry, and returns them. Draft 19 takes every SUBSCRIBE parameter in
// SUBSCRIBE_TRACKS, "copied over as the default Subscription parameters
// when a PUBLISH is sent as a result", "not explicitly communicated" but
// for FORWARD and GROUP_ORDER (19 §10.19.1); its PUBLISH carries FORWARD
// but none of the others, GROUP_ORDER included ("MAY appear in a
// SUBSCRIBE, SUBSCRIBE_TRACKS, or FETCH", §10.2.8), so they govern the
// subscription here, unsent, until the subscriber's PUBLISH_OK sets them
// (applyPublishOK). Draft 21's PUBLISH carries them all; draft 18's
// SUBSCRIBE_TRACKS has none of them.
func (r draftRules) unsentInPublish(p *wire.Params) wire.Params {
	var out wire.Params
	carries := func(t wire.ParamType) bool {
		c, ok := r.prof.ParamContexts(t)
		return ok && c&wire.InPublish != 0
	}
	move(&out.SubscriberPriority, &p.SubscriberPriority, carries(wire.ParamSubscriberPriority))
	move(&out.GroupOrder, &p.GroupOrder, carries(wire.ParamGroupOrder))
	move(&out.LocationFilter, &p.LocationFilter, carries(wire.ParamLocationFilter))
	move(&out.ObjectDeliveryTimeout, &p.ObjectDeliveryTimeout, carries(wire.ParamObjectDeliveryTimeout))
	move(&out.SubgroupDeliveryTimeout, &p.SubgroupDeliveryTimeout, carries(wire.ParamSubgroupDeliveryTimeout))
	return out
}

// move moves *src to *dst unless sent.
func move[T any](dst, src *wire.Opt[T], sent bool) {
	if src.Set && !sent {
		*dst, *src = *src, wire.Opt[T]{}
	}
}

// holdUnsent sets on p, a served subscription's parameters, those of
// unsent (publish): the Range filters, and what unsentInPublish moved.
func holdUnsent(p, unsent *wire.Params) {
	p.RangeFilters = unsent.RangeFilters
	move(&p.SubscriberPriority, &unsent.SubscriberPriority, false)
	move(&p.GroupOrder, &unsent.GroupOrder, false)
	move(&p.LocationFilter, &unsent.LocationFilter, false)
	move(&p.ObjectDeliveryTimeout, &unsent.ObjectDeliveryTimeout, false)
	move(&p.SubgroupDeliveryTimeout, &unsent.SubgroupDeliveryTimeout, false)
}
