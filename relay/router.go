package relay

import (
	"context"
	"errors"
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// router routes the namespace requests (§4, §7.5): PUBLISH_NAMESPACE,
// SUBSCRIBE_NAMESPACE and SUBSCRIBE_TRACKS. It keeps one table of the
// namespaces offered to the relay, by PUBLISH_NAMESPACE or learned
// upstream, and the namespace subscriptions it serves; each accepted
// PUBLISH_NAMESPACE is also registered with the registry, so that
// SUBSCRIBEs under it find its publisher. With Config.Upstream,
// namespaces travel both ways along a chain of relays: one announced here
// is announced upstream while it lasts (upForward), so that subscribers
// at the origin reach a publisher at an edge, and a SUBSCRIBE_NAMESPACE or
// SUBSCRIBE_TRACKS here is asked upstream too (upDisc), so that a
// subscriber at an edge discovers a publisher at the origin.
//
// mu guards everything below it, the records it keeps (nsEntry, nsSub,
// tracksSub, discRef, upDisc.seen) included; the registry is never called
// with it held (lock order: relay.go).
type router struct {
	env
	reg  trackRegistry
	note *notifier // nil without Config.Observer

	mu      sync.Mutex
	closed  bool
	entries map[wire.NamespaceKey]*nsEntry
	anns    map[*localAnn]struct{}
	subs    map[*nsSub]struct{}     // SUBSCRIBE_NAMESPACE
	tsubs   map[*tracksSub]struct{} // SUBSCRIBE_TRACKS
	discs   map[*upDisc]struct{}    // upstream namespace requests, prefixes pairwise disjoint per type
	// subIdx indexes subs by the first field of their current prefix
	// (subKey), so that a namespace's change reaches the subscribers it
	// may concern only.
	subIdx map[string]map[*nsSub]struct{}
	// discBy counts the requests of each session that discover upstream;
	// discPending holds the upstream requests admitted and not made yet,
	// which count against the limits and cover the requests under them as
	// a made one does.
	discBy      map[*moqt.Session]int
	discPending map[*discRef]discWant
}

// discWant is an upstream namespace request admitted and not made yet.
type discWant struct {
	prefix wire.Namespace
	tracks bool
}

// trackRegistry is what the router asks of the registry of tracks and
// sessions. Never called with router.mu held.
type trackRegistry interface {
	upstreamSessions
	// addAnnouncer registers s as a publisher of ns after its
	// PUBLISH_NAMESPACE was accepted: SUBSCRIBEs for tracks under ns find
	// s, the registry's tracks under ns with subscribers get a SUBSCRIBE to
	// s as an extra publisher (§7.5), and held rendezvous SUBSCRIBEs under
	// ns proceed. remove (idempotent) withdraws it when the announcement
	// ends; so does the end of s.
	addAnnouncer(s *moqt.Session, ns wire.Namespace) (remove func())
	// availableTracks returns the tracks under prefix offered to the relay
	// by PUBLISH and still Established upstream.
	availableTracks(prefix wire.Namespace) []wire.FullTrackName
	// countTracks counts the tracks under prefix offered to the relay by
	// PUBLISH, or whose PUBLISH_OK is on its way, that except does not
	// publish.
	countTracks(prefix wire.Namespace, except *moqt.Session) int
	// publisherSessions returns the sessions that publish name to the
	// relay (by PUBLISH or an Established upstream subscription).
	publisherSessions(name wire.FullTrackName) []*moqt.Session
	// trackProps returns name's Track Properties; nil if it has none or
	// is gone.
	trackProps(name wire.FullTrackName) wire.KVList
	// publishDownstream offers the relay's track name to s with PUBLISH,
	// for a SUBSCRIBE_TRACKS whose parameters are req, and serves it like
	// any downstream subscription; it waits for the PUBLISH_OK, within
	// ctx. DOES_NOT_EXIST when the track is no longer available.
	publishDownstream(ctx context.Context, s *moqt.Session, name wire.FullTrackName, req wire.Params) (*moqt.ServedSubscription, error)
	// isUpstream reports whether s is a session the relay dialed or asked
	// as an upstream.
	isUpstream(s *moqt.Session) bool
}

// upstreamSessions gives the session Config.Upstream names for a
// namespace, none (nil, nil) without one; the registry, which watches it.
type upstreamSessions interface {
	upstreamSession(ctx context.Context, ns wire.Namespace) ([]*moqt.Session, error)
}

func newRouter(v env, reg trackRegistry) *router {
	rt := &router{env: v, reg: reg}
	rt.initLocked()
	return rt
}

// maxMatches is Config.MaxNamespaceMatches or its default.
func (rt *router) maxMatches() int {
	if rt.cfg.MaxNamespaceMatches > 0 {
		return rt.cfg.MaxNamespaceMatches
	}
	return defaultMaxNamespaceMatches
}

// serve answers a PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE or
// SUBSCRIBE_TRACKS, authorized already, before it returns, and reports
// true; false, req untouched, for any other request.
func (rt *router) serve(req moqt.Request) bool {
	switch r := req.(type) {
	case *moqt.PublishNamespaceRequest:
		rt.servePublishNamespace(r)
	case *moqt.SubscribeNamespaceRequest:
		if r.Tracks {
			rt.serveSubscribeTracks(r)
		} else {
			rt.serveSubscribeNamespace(r)
		}
	default:
		return false
	}
	return true
}

// servePublishNamespace accepts a publisher's PUBLISH_NAMESPACE (§7.5):
// SUBSCRIBEs for tracks under it are routed to the publisher, the
// SUBSCRIBE_NAMESPACE subscribers under it get NAMESPACE (§4.2), and the
// namespace is announced upstream, for as long as the announcement lasts.
func (rt *router) servePublishNamespace(r *moqt.PublishNamespaceRequest) {
	s := r.Session()
	r.OnUpdate = func(u *wire.Params) error { return rt.authorizeUpdate(r, u) }
	// Routed and in the table before REQUEST_OK: once the publisher has
	// its answer, a SUBSCRIBE or SUBSCRIBE_NAMESPACE sent at once finds
	// the namespace, as does one from a subscriber that learns of it.
	remove := rt.reg.addAnnouncer(s, r.Namespace)
	ns := cloneName(wire.FullTrackName{Namespace: r.Namespace}).Namespace
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		remove()
		rt.refuse(r, wire.ReqGoingAway, "relay closed", OutcomeRefused)
		return
	}
	e := rt.entryLocked(ns)
	la := &localAnn{s: s, e: e}
	e.local[la] = struct{}{}
	rt.anns[la] = struct{}{}
	rt.changedLocked(e)
	rt.mu.Unlock()
	ann, err := r.Accept(wire.Params{})
	if err != nil {
		remove()
		rt.withdraw(la)
		rt.reqDone(KindPublishNamespace, OutcomeRefused)
		return
	}
	rt.mu.Lock()
	la.ann = ann
	closed := rt.closed // Close found no Announcement to end
	rt.mu.Unlock()
	rt.note.markNamespace(ns)
	if closed {
		_ = ann.Close()
	}
	context.AfterFunc(r.Context(), func() {
		remove()
		rt.withdraw(la)
	})
	rt.reqDone(KindPublishNamespace, OutcomeOK)
	rt.log.Debug("relay: publish_namespace", "event", "ok", "namespace", ns.String())
}

// withdraw forgets an announcement that ended.
func (rt *router) withdraw(la *localAnn) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.anns[la]; !ok {
		return
	}
	delete(rt.anns, la)
	delete(la.e.local, la)
	rt.changedLocked(la.e)
	rt.note.markNamespace(la.e.ns)
	rt.log.Debug("relay: publish_namespace", "event", "end", "namespace", la.e.ns.String())
}

// serveSubscribeNamespace accepts a SUBSCRIBE_NAMESPACE (§4.1, §9.15): the
// namespaces offered to the relay under the prefix, then their comings and
// goings. One that matches more than Config.MaxNamespaceMatches is refused
// with NAMESPACE_TOO_LARGE (§4.3.1). With Config.Upstream, the upstream's
// namespaces under the prefix are discovered too.
func (rt *router) serveSubscribeNamespace(r *moqt.SubscribeNamespaceRequest) {
	s := r.Session()
	limit := rt.maxMatches()
	ref := &discRef{prefix: cloneName(wire.FullTrackName{Namespace: r.Prefix}).Namespace}
	up := rt.discovers(s, r.Prefix)
	r.OnUpdate = rt.checkUpdate(r, ref, limit, func(p wire.Namespace) int {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.matchesLocked(s, p)
	})
	w := rt.acceptLocked(r, func() *moqt.RequestError {
		if rt.matchesLocked(s, r.Prefix) > limit {
			return tooLarge()
		}
		if up {
			return rt.admitDiscLocked(ref, s, false)
		}
		return nil
	})
	if w == nil {
		rt.unadmit(ref)
		return
	}
	sub := &nsSub{s: s, w: w, limit: limit, ref: ref, offered: map[*nsEntry]struct{}{}}
	rt.subs[sub] = struct{}{}
	rt.indexLocked(sub)
	rt.offerAllLocked(sub)
	rt.mu.Unlock()
	rt.reqDone(KindSubscribeNamespace, OutcomeOK)
	rt.log.Debug("relay: subscribe_namespace", "event", "ok", "prefix", r.Prefix.String())
	alive := func() bool { _, ok := rt.subs[sub]; return ok }
	if up {
		rt.discoverUpstream(ref, false, alive)
	}
	context.AfterFunc(r.Context(), func() {
		rt.mu.Lock()
		rt.dropSubLocked(sub)
		rt.mu.Unlock()
	})
	rt.goRun(func() {
		rt.followPrefix(r.Context(), w, ref, false, up, alive, func(p wire.Namespace) { rt.movePrefixLocked(sub, p) })
	})
}

// checkUpdate is the OnUpdate of a SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS
// r whose discovery share is ref: Config.Authorize decides the update, and
// a new prefix is refused with NAMESPACE_TOO_LARGE when count, its
// matches, passes limit (§4.3.1), with EXCESSIVE_LOAD past the discovery
// limits.
func (rt *router) checkUpdate(r *moqt.SubscribeNamespaceRequest, ref *discRef, limit int,
	count func(wire.Namespace) int) func(*wire.Params) error {
	return func(u *wire.Params) error {
		if err := rt.authorizeUpdate(r, u); err != nil {
			return err
		}
		p := u.TrackNamespacePrefix
		if !p.Set {
			return nil
		}
		if count(p.Value) > limit {
			return tooLarge()
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.admitMoveLocked(ref, p.Value, r.Tracks)
	}
}

// acceptLocked accepts r unless the relay is closed or check, evaluated
// under router.mu, refuses it: with NAMESPACE_TOO_LARGE past
// Config.MaxNamespaceMatches (§4.3.1), EXCESSIVE_LOAD past the discovery
// limits. It returns with router.mu held when it accepted; nil, having
// answered r, otherwise.
func (rt *router) acceptLocked(r *moqt.SubscribeNamespaceRequest, check func() *moqt.RequestError) *moqt.NamespaceWriter {
	rt.mu.Lock()
	rt.initLocked()
	code, reason := wire.ReqGoingAway, "relay closed"
	var refusal *moqt.RequestError
	switch {
	case rt.closed:
	case func() bool { refusal = check(); return refusal != nil }():
		code, reason = refusal.Code, refusal.Reason
	default:
		// Accepted without the lock: r.OnUpdate, which takes it, may run
		// within Accept.
		rt.mu.Unlock()
		w, err := r.Accept(wire.Params{})
		if err != nil {
			rt.reqDone(requestKind(r), OutcomeRefused)
			return nil
		}
		rt.mu.Lock()
		if !rt.closed {
			rt.initLocked()
			return w
		}
		rt.mu.Unlock()
		w.End(wire.ResetGoingAway)
		rt.reqDone(requestKind(r), OutcomeRefused)
		return nil
	}
	rt.mu.Unlock()
	rt.refuse(r, code, reason, OutcomeRefused)
	return nil
}

// dropSubLocked forgets a SUBSCRIBE_NAMESPACE that ended, and its share of
// an upstream discovery.
func (rt *router) dropSubLocked(sub *nsSub) {
	if _, ok := rt.subs[sub]; !ok {
		return
	}
	delete(rt.subs, sub)
	rt.unindexLocked(sub)
	for e := range sub.offered {
		delete(e.subs, sub)
	}
	rt.releaseDiscLocked(sub.ref)
	rt.unadmitLocked(sub.ref)
}

// serveSubscribeTracks accepts a SUBSCRIBE_TRACKS (§4.1, §9.18): a PUBLISH
// for every track under the prefix offered to the relay by PUBLISH, but
// the subscriber's own, and for every later one (§7.5), or PUBLISH_SKIPPED
// when one cannot be made. One that matches more than
// Config.MaxNamespaceMatches tracks is refused with NAMESPACE_TOO_LARGE
// (§4.3.1). Only tracks whose Track Properties pass the request's
// TRACK_PROPERTY_FILTERs get a PUBLISH (§4.3). The request's parameters,
// as its updates leave them, are each PUBLISH's initial subscription
// parameters (§9.18.1, publishDownstream); one with FILL_PARAMETERS, which
// no PUBLISH-initiated subscription can honour, the library refused with
// NOT_SUPPORTED before it got here (moqt.ErrFillOnTracks).
func (rt *router) serveSubscribeTracks(r *moqt.SubscribeNamespaceRequest) {
	s := r.Session()
	limit := rt.maxMatches()
	tooMany := rt.reg.countTracks(r.Prefix, s) > limit
	ref := &discRef{prefix: cloneName(wire.FullTrackName{Namespace: r.Prefix}).Namespace}
	up := rt.discovers(s, r.Prefix)
	r.OnUpdate = rt.checkUpdate(r, ref, limit, func(p wire.Namespace) int { return rt.reg.countTracks(p, s) })
	w := rt.acceptLocked(r, func() *moqt.RequestError {
		if tooMany {
			return tooLarge()
		}
		if up {
			return rt.admitDiscLocked(ref, s, true)
		}
		return nil
	})
	if w == nil {
		rt.unadmit(ref)
		return
	}
	ctx, stop := context.WithCancel(rt.ctx)
	sub := &tracksSub{s: s, w: w, ctx: ctx, stop: stop, limit: limit,
		offered: map[wire.TrackKey]*trackOffer{},
		ref:     ref}
	rt.tsubs[sub] = struct{}{}
	rt.mu.Unlock()
	rt.reqDone(KindSubscribeTracks, OutcomeOK)
	rt.log.Debug("relay: subscribe_tracks", "event", "ok", "prefix", r.Prefix.String())
	alive := func() bool { _, ok := rt.tsubs[sub]; return ok }
	if up {
		// The upstream's tracks come as PUBLISHes to the relay, which
		// offers them on (onTrackPublished).
		rt.discoverUpstream(ref, true, alive)
		rt.goRun(func() { rt.followPrefix(sub.ctx, w, ref, true, true, alive, nil) })
	}
	context.AfterFunc(r.Context(), func() { rt.endTracks(sub) })
	// Taken before the prefix is read, so that no update is missed.
	changed := w.Changed()
	// Listed again now that sub is registered: a track published
	// meanwhile is offered by onTrackPublished or here, once.
	for _, name := range rt.tracksFor(s, w.Prefix()) {
		rt.offerTrack(sub, name)
	}
	rt.goRun(func() { rt.followUpdates(sub, changed) })
}

// followUpdates offers, after each update of sub's prefix (§9.5.2) or
// TRACK_PROPERTY_FILTERs (§3.3.2), the tracks published before it that
// now fall under the prefix and pass the filters; later ones come by
// onTrackPublished. The PUBLISHes made already go on.
func (rt *router) followUpdates(sub *tracksSub, changed <-chan struct{}) {
	for {
		select {
		case <-sub.ctx.Done():
			return
		case <-changed:
		}
		changed = sub.w.Changed()
		for _, name := range rt.tracksFor(sub.s, sub.w.Prefix()) {
			rt.offerTrack(sub, name)
		}
	}
}

// endTracks forgets a SUBSCRIBE_TRACKS that ended: no PUBLISH is started
// for it from then on (§4.1).
func (rt *router) endTracks(sub *tracksSub) {
	rt.mu.Lock()
	sub.ended = true
	if _, ok := rt.tsubs[sub]; ok {
		delete(rt.tsubs, sub)
		rt.releaseDiscLocked(sub.ref)
		rt.unadmitLocked(sub.ref)
	}
	rt.mu.Unlock()
	sub.stop()
}

// tracksFor lists the tracks under prefix available to a subscriber on s:
// not its own (§4.1).
func (rt *router) tracksFor(s *moqt.Session, prefix wire.Namespace) []wire.FullTrackName {
	var out []wire.FullTrackName
	for _, name := range rt.reg.availableTracks(prefix) {
		if !containsSession(rt.reg.publisherSessions(name), s) {
			out = append(out, name)
		}
	}
	return out
}

// onTrackPublished offers a track that became available by PUBLISH (a new
// entry, or a first publisher by PUBLISH) to every SUBSCRIBE_TRACKS
// subscriber whose prefix matches (§7.5), except the sessions exclude
// reports: the track's publishers, and sessions whose held rendezvous
// SUBSCRIBE for it the PUBLISH releases, which get SUBSCRIBE_OK instead.
// Called without relay locks, on a goroutine of its own; the PUBLISHes go
// in goroutines of their own, bounded by the subscribers' requests.
func (rt *router) onTrackPublished(name wire.FullTrackName, exclude func(*moqt.Session) bool) {
	rt.mu.Lock()
	var subs []*tracksSub
	for sub := range rt.tsubs {
		if !sub.ended && name.Namespace.HasPrefix(sub.w.Prefix()) && !exclude(sub.s) {
			subs = append(subs, sub)
		}
	}
	rt.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	pubs := rt.reg.publisherSessions(name)
	for _, sub := range subs {
		if !containsSession(pubs, sub.s) {
			rt.offerTrack(sub, name)
		}
	}
}

// offerTrack sends PUBLISH for name to sub's session, once per
// SUBSCRIBE_TRACKS while the PUBLISH lasts, in a goroutine of its own:
// the PUBLISH_OK is awaited there. A track whose Track Properties fail
// sub's TRACK_PROPERTY_FILTERs is not offered, nor skipped (§3.3.2): an
// update of the filters may let it through. A track that takes sub past
// its limit ends sub (EXCESSIVE_LOAD: there is no reset code for
// NAMESPACE_TOO_LARGE, §4.3.1).
func (rt *router) offerTrack(sub *tracksSub, name wire.FullTrackName) {
	key := name.Key()
	props := rt.reg.trackProps(name)
	rt.mu.Lock()
	if sub.ended || rt.closed || sub.offered[key] != nil || !name.Namespace.HasPrefix(sub.w.Prefix()) || !sub.w.Wants(props) {
		rt.mu.Unlock()
		return
	}
	if len(sub.offered) >= sub.limit {
		rt.mu.Unlock()
		sub.w.End(wire.ResetExcessiveLoad)
		rt.endTracks(sub)
		return
	}
	of := &trackOffer{}
	sub.offered[key] = of
	rt.mu.Unlock()
	rt.goRun(func() { rt.publishOffered(sub, name, key, of) })
}

// publishOffered makes the PUBLISH of offerTrack: never once the
// SUBSCRIBE_TRACKS ended (§4.1); PUBLISH_SKIPPED when it fails otherwise.
func (rt *router) publishOffered(sub *tracksSub, name wire.FullTrackName, key wire.TrackKey, of *trackOffer) {
	forget := func() {
		rt.mu.Lock()
		if sub.offered[key] == of {
			delete(sub.offered, key)
		}
		rt.mu.Unlock()
	}
	rt.mu.Lock()
	ended := sub.ended
	rt.mu.Unlock()
	if ended {
		forget()
		return
	}
	// The parameters now: an update's FORWARD applies to the PUBLISHes
	// after it (§9.20.19).
	ss, err := rt.reg.publishDownstream(sub.ctx, sub.s, name, sub.w.Params())
	if err != nil {
		rt.mu.Lock()
		skip := !sub.ended && !errors.Is(err, context.Canceled)
		if skip {
			of.skipped = true
			_ = sub.w.Skip(name)
		} else if sub.offered[key] == of {
			delete(sub.offered, key)
		}
		rt.mu.Unlock()
		rt.log.Debug("relay: subscribe_tracks", "event", "publish_failed", "track", name.String(), "skipped", skip, "err", err)
		return
	}
	rt.log.Debug("relay: subscribe_tracks", "event", "publish", "track", name.String())
	// Once this PUBLISH ends, a new PUBLISH of the track may be offered
	// again (§4.1: the scope of a skip, and of a PUBLISH, is one PUBLISH).
	context.AfterFunc(ss.Context(), forget)
}

// close ends what the router holds, for Relay.Close: announcements are
// revoked, namespace subscriptions reset with GOING_AWAY; upstream
// announcements and discoveries end with the relay's context.
func (rt *router) close() {
	rt.mu.Lock()
	rt.closed = true
	var anns []*moqt.Announcement // those still being accepted close themselves
	for la := range rt.anns {
		if la.ann != nil {
			anns = append(anns, la.ann)
		}
	}
	subs := rt.subs
	tsubs := rt.tsubs
	for _, e := range rt.entries {
		if e.fwd != nil {
			e.fwd.stop()
			e.fwd = nil
		}
	}
	for d := range rt.discs {
		d.cancel()
	}
	rt.entries, rt.anns, rt.subs, rt.tsubs, rt.discs, rt.discBy, rt.subIdx = nil, nil, nil, nil, nil, nil, nil
	rt.discPending = nil
	for sub := range tsubs {
		sub.ended = true
	}
	rt.mu.Unlock()
	for _, ann := range anns {
		_ = ann.Close()
	}
	for sub := range subs {
		sub.w.End(wire.ResetGoingAway)
	}
	for sub := range tsubs {
		sub.stop()
		sub.w.End(wire.ResetGoingAway)
	}
}

// empty reports that no namespace state is left (tests).
func (rt *router) empty() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.entries) == 0 && len(rt.anns) == 0 && len(rt.subs) == 0 && len(rt.tsubs) == 0 && len(rt.discs) == 0
}
