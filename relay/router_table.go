package relay

// The router's namespace table: its entries, their offers to the
// SUBSCRIBE_NAMESPACE subscribers, and the upstream requests that report
// into it (discovery) with their admission.
//
// A SUBSCRIBE_NAMESPACE subscriber is offered the namespaces under its
// current prefix only (NamespaceWriter.Publish), and told when one goes
// (Done); after a prefix update the relay withdraws what left the prefix
// and offers, from its table, what is under the new one. Each entry keeps
// the subscribers it is offered to, and the subscribers are indexed by the
// first field of their prefix, so that a namespace's change costs in
// proportion to the subscribers it concerns.

import (
	"context"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// initLocked makes the tables, on first use and after Close.
func (rt *router) initLocked() {
	if rt.entries == nil {
		rt.entries = map[wire.NamespaceKey]*nsEntry{}
		rt.anns = map[*localAnn]struct{}{}
		rt.subs = map[*nsSub]struct{}{}
		rt.tsubs = map[*tracksSub]struct{}{}
		rt.discs = map[*upDisc]struct{}{}
		rt.discBy = map[*moqt.Session]int{}
		rt.discPending = map[*discRef]discWant{}
		rt.subIdx = map[string]map[*nsSub]struct{}{}
	}
}

// entryLocked returns ns's entry, made if absent.
func (rt *router) entryLocked(ns wire.Namespace) *nsEntry {
	rt.initLocked()
	k := ns.Key()
	if e := rt.entries[k]; e != nil {
		return e
	}
	e := &nsEntry{ns: ns, local: map[*localAnn]struct{}{}, remote: map[*upDisc]*moqt.Session{}, subs: map[*nsSub]struct{}{}}
	rt.entries[k] = e
	return e
}

// matchesLocked counts the namespaces under prefix offered to s.
func (rt *router) matchesLocked(s *moqt.Session, prefix wire.Namespace) int {
	n := 0
	for _, e := range rt.entries {
		if e.ns.HasPrefix(prefix) && e.visibleTo(s) {
			n++
		}
	}
	return n
}

// indexLocked files sub under its current prefix.
func (rt *router) indexLocked(sub *nsSub) {
	k := subKey(sub.ref.prefix)
	m := rt.subIdx[k]
	if m == nil {
		m = map[*nsSub]struct{}{}
		rt.subIdx[k] = m
	}
	m[sub] = struct{}{}
}

// unindexLocked takes sub out of the index.
func (rt *router) unindexLocked(sub *nsSub) {
	k := subKey(sub.ref.prefix)
	if m := rt.subIdx[k]; m != nil {
		delete(m, sub)
		if len(m) == 0 {
			delete(rt.subIdx, k)
		}
	}
}

// changedLocked tells the SUBSCRIBE_NAMESPACE subscribers e concerns of
// its new state (NAMESPACE or NAMESPACE_DONE, §9.16, §9.17), starts or
// stops its forwarding upstream, and drops e once nothing offers it.
func (rt *router) changedLocked(e *nsEntry) {
	for sub := range e.subs {
		if !e.visibleTo(sub.s) {
			rt.withdrawLocked(sub, e)
		}
	}
	offer := func(subs map[*nsSub]struct{}) {
		for sub := range subs {
			if e.ns.HasPrefix(sub.ref.prefix) && e.visibleTo(sub.s) {
				rt.offerLocked(sub, e)
			}
		}
	}
	offer(rt.subIdx[""])
	if len(e.ns) > 0 {
		offer(rt.subIdx[subKey(e.ns)])
	}
	rt.syncForwardLocked(e)
	if len(e.local) == 0 && len(e.remote) == 0 && e.outside == 0 && e.fwd == nil {
		if k := e.ns.Key(); rt.entries[k] == e {
			delete(rt.entries, k)
		}
	}
}

// offerLocked offers e, under sub's prefix, to sub, once. One that takes
// the subscription past Config.MaxNamespaceMatches ends it (§4.3.1): the
// stream is reset with EXCESSIVE_LOAD, there being no reset code for
// NAMESPACE_TOO_LARGE.
func (rt *router) offerLocked(sub *nsSub, e *nsEntry) {
	if _, ok := sub.offered[e]; ok {
		return
	}
	if len(sub.offered) >= sub.limit {
		sub.w.End(wire.ResetExcessiveLoad)
		rt.dropSubLocked(sub)
		return
	}
	sub.offered[e] = struct{}{}
	e.subs[sub] = struct{}{}
	// A writer that failed ended its request, whose end drops sub.
	_ = sub.w.Publish(e.ns)
}

// withdrawLocked takes back e's offer to sub: NAMESPACE_DONE if its
// NAMESPACE was sent.
func (rt *router) withdrawLocked(sub *nsSub, e *nsEntry) {
	delete(sub.offered, e)
	delete(e.subs, sub)
	_ = sub.w.Done(e.ns)
}

// offerAllLocked offers sub every namespace of the table under its
// prefix, while sub lasts.
func (rt *router) offerAllLocked(sub *nsSub) {
	for _, e := range rt.entries {
		if e.ns.HasPrefix(sub.ref.prefix) && e.visibleTo(sub.s) {
			rt.offerLocked(sub, e)
			if _, ok := rt.subs[sub]; !ok {
				return
			}
		}
	}
}

// movePrefixLocked follows an accepted prefix update of sub to p
// (§9.5.2): what is no longer under the prefix is no longer offered (its
// NAMESPACE the writer has forgotten already, so no NAMESPACE_DONE goes),
// and what is under p is offered.
func (rt *router) movePrefixLocked(sub *nsSub, p wire.Namespace) {
	rt.unindexLocked(sub)
	sub.ref.prefix = p
	rt.indexLocked(sub)
	for e := range sub.offered {
		if !e.ns.HasPrefix(p) {
			rt.withdrawLocked(sub, e)
		}
	}
	rt.offerAllLocked(sub)
}

// syncForwardLocked starts or stops e's forwarding upstream: on while e
// has a local announcer.
func (rt *router) syncForwardLocked(e *nsEntry) {
	if rt.cfg.Upstream == nil || rt.cfg.UpstreamTracksOnly || rt.closed {
		return
	}
	switch want := len(e.local) > 0; {
	case want && e.fwd == nil:
		ctx, cancel := context.WithCancel(rt.ctx)
		f := &upForward{e: e, ctx: ctx, stop: cancel, wake: make(chan struct{}, 1),
			ups: rt.reg, log: rt.log, timeout: rt.cfg.UpstreamTimeout,
			others: func(u *moqt.Session) bool { return rt.hasOtherLocal(e, u) }}
		e.fwd = f
		rt.goRun(f.run)
	case want:
		select {
		case e.fwd.wake <- struct{}{}:
		default:
		}
	case e.fwd != nil:
		e.fwd.stop()
		e.fwd = nil
	}
}

// hasOtherLocal reports whether a session other than u announced e here:
// an announcement is never sent back to the session it came from.
func (rt *router) hasOtherLocal(e *nsEntry, u *moqt.Session) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for a := range e.local {
		if a.s != u {
			return true
		}
	}
	return false
}

// discoverUpstream makes ref rely on the upstream request of its type that
// covers its prefix, made if none does; alive reports, under the lock,
// that ref's request is still served.
func (rt *router) discoverUpstream(ref *discRef, tracks bool, alive func() bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if ref.pending && !rt.closed {
		delete(rt.discPending, ref)
	}
	ref.pending = false
	if rt.closed || !alive() || ref.disc != nil || sessionLevel(ref.prefix) {
		return
	}
	if d := rt.coveringLocked(ref.prefix, tracks); d != nil {
		d.users++
		ref.disc = d
		return
	}
	// An admitted request not made yet may cover this one (coveredLocked
	// let it in on that): made now, for the widest such prefix, it is the
	// one they all share, and no longer pending.
	prefix := ref.prefix
	for _, w := range rt.discPending {
		if w.tracks == tracks && prefix.HasPrefix(w.prefix) {
			prefix = w.prefix
		}
	}
	for other, w := range rt.discPending {
		if w.tracks == tracks && w.prefix.HasPrefix(prefix) {
			delete(rt.discPending, other)
		}
	}
	ctx, cancel := context.WithCancel(rt.ctx)
	nd := &upDisc{tracks: tracks, prefix: prefix, users: 1, ctx: ctx, cancel: cancel, seen: map[wire.NamespaceKey]*nsEntry{},
		ups: rt.reg, log: rt.log}
	nd.apply = func(u *moqt.Session, ev moqt.NamespaceEvent) bool { return rt.applyDisc(nd, u, ev) }
	for d := range rt.discs {
		if d.tracks != tracks || !d.prefix.HasPrefix(prefix) {
			continue
		}
		// Replaced by nd, which covers it: its namespaces go (NAMESPACE_DONE)
		// and come back as nd reports them.
		for _, other := range rt.discRefsLocked(tracks) {
			if other.disc == d {
				other.disc = nd
				nd.users++
			}
		}
		rt.endDiscLocked(d)
	}
	if !alive() || nd.users <= 0 {
		nd.cancel() // its users went while the ones it replaced ended
		return
	}
	rt.discs[nd] = struct{}{}
	ref.disc = nd
	rt.goRun(func() {
		nd.run()
		rt.discEnded(nd)
	})
}

// discRefsLocked lists the shares of the downstream requests of a type.
func (rt *router) discRefsLocked(tracks bool) []*discRef {
	var out []*discRef
	if tracks {
		for sub := range rt.tsubs {
			out = append(out, sub.ref)
		}
	} else {
		for sub := range rt.subs {
			out = append(out, sub.ref)
		}
	}
	return out
}

// releaseDiscLocked drops ref's share, ending its upstream request with
// the last.
func (rt *router) releaseDiscLocked(ref *discRef) {
	d := ref.disc
	if d == nil {
		return
	}
	ref.disc = nil
	if d.users--; d.users <= 0 {
		rt.endDiscLocked(d)
	}
}

// endDiscLocked cancels d and withdraws what it reported.
func (rt *router) endDiscLocked(d *upDisc) {
	d.cancel()
	delete(rt.discs, d)
	for k, e := range d.seen {
		delete(d.seen, k)
		delete(e.remote, d)
		rt.changedLocked(e)
	}
}

// discEnded withdraws what d reported once its request upstream ended
// for good, unless d ended before.
func (rt *router) discEnded(d *upDisc) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.discs[d]; ok {
		rt.endDiscLocked(d)
	}
}

// applyDisc applies one report of d's upstream u: NAMESPACE or
// NAMESPACE_DONE. Session-level namespaces are dropped (§6.5), and a
// SUBSCRIBE_TRACKS's PUBLISH_SKIPPEDs tell the relay nothing to pass on.
// It reports false once d has ended.
func (rt *router) applyDisc(d *upDisc, u *moqt.Session, ev moqt.NamespaceEvent) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.discs[d]; !ok {
		return false
	}
	if sessionLevel(ev.Namespace) || ev.Skipped {
		return true
	}
	k := ev.Namespace.Key()
	if ev.Done {
		if e := d.seen[k]; e != nil {
			delete(d.seen, k)
			delete(e.remote, d)
			rt.changedLocked(e)
		}
	} else if d.seen[k] == nil {
		e := rt.entryLocked(ev.Namespace)
		e.remote[d] = u
		d.seen[k] = e
		rt.changedLocked(e)
	}
	return true
}

// followPrefix follows w's prefix after each accepted
// TRACK_NAMESPACE_PREFIX update (§9.5.2), until ctx, the request's, ends:
// moveLocked, if set, is called with the new prefix under router.mu, and
// with up the request's upstream discovery moves to it (the old prefix's
// share released, the upstream's namespaces under the new one asked for).
func (rt *router) followPrefix(ctx context.Context, w *moqt.NamespaceWriter, ref *discRef, tracks, up bool,
	alive func() bool, moveLocked func(wire.Namespace)) {
	changed := w.Changed()
	for {
		p := w.Prefix()
		rt.mu.Lock()
		moved := alive() && p.Key() != ref.prefix.Key()
		if moved {
			if moveLocked != nil {
				moveLocked(p)
			}
			rt.releaseDiscLocked(ref)
			ref.prefix = p
		}
		rt.mu.Unlock()
		if moved && up {
			rt.discoverUpstream(ref, tracks, alive)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = w.Changed()
	}
}

// discovers reports whether a namespace request of s for prefix is asked
// upstream: with Config.Upstream, unless s is an upstream session or the
// prefix is session-level (§6.5).
func (rt *router) discovers(s *moqt.Session, prefix wire.Namespace) bool {
	return rt.cfg.Upstream != nil && !rt.cfg.UpstreamTracksOnly && !sessionLevel(prefix) && !rt.reg.isUpstream(s)
}

// coveringLocked returns the upstream request of the type made that
// covers prefix, nil for none.
func (rt *router) coveringLocked(prefix wire.Namespace, tracks bool) *upDisc {
	for d := range rt.discs {
		if d.tracks == tracks && prefix.HasPrefix(d.prefix) {
			return d
		}
	}
	return nil
}

// coveredLocked reports whether an upstream request of the type covers
// prefix, made or admitted (its requester may have its REQUEST_OK before
// the request is made): a request for it shares that one.
func (rt *router) coveredLocked(prefix wire.Namespace, tracks bool) bool {
	for d := range rt.discs {
		if d.tracks == tracks && prefix.HasPrefix(d.prefix) {
			return true
		}
	}
	for _, w := range rt.discPending {
		if w.tracks == tracks && prefix.HasPrefix(w.prefix) {
			return true
		}
	}
	return false
}

// admitDiscLocked takes, for ref, a request of s about to discover
// upstream, its share of the discovery limits: one of the session's
// Config.MaxSessionDiscoveries and, unless an upstream request covers its
// prefix already, one of the relay's Config.MaxDiscoveries. So that one
// client cannot take every request stream of the upstream session all
// share, past them it is refused with EXCESSIVE_LOAD.
func (rt *router) admitDiscLocked(ref *discRef, s *moqt.Session, tracks bool) *moqt.RequestError {
	if rt.discBy[s] >= rt.cfg.MaxSessionDiscoveries {
		return excessiveLoad("too many namespace requests of the session asked upstream")
	}
	switch d := rt.coveringLocked(ref.prefix, tracks); {
	case d != nil:
		// One of d's users at once: the requester has its REQUEST_OK
		// before the request is registered (acceptLocked), and a prefix
		// update meanwhile must not take d for its only user's and free
		// d's place (admitMoveLocked).
		d.users++
		ref.disc = d
	case !rt.coveredLocked(ref.prefix, tracks):
		if len(rt.discs)+len(rt.discPending) >= rt.cfg.MaxDiscoveries {
			return excessiveLoad("too many namespace requests upstream")
		}
		ref.pending = true
		rt.discPending[ref] = discWant{ref.prefix, tracks}
	}
	rt.discBy[s]++
	ref.owner = s
	return nil
}

// admitMoveLocked decides a prefix update of ref's request against
// Config.MaxDiscoveries: the new prefix needs an upstream request of its
// own unless one covers it, and frees the old one if ref was its only user.
// The new request's place is taken at once, so that updates and requests
// in the meantime cannot take it.
func (rt *router) admitMoveLocked(ref *discRef, prefix wire.Namespace, tracks bool) error {
	if ref.owner == nil || sessionLevel(prefix) || rt.coveredLocked(prefix, tracks) {
		return nil
	}
	n := len(rt.discs) + len(rt.discPending)
	if _, ok := rt.discPending[ref]; ok {
		n-- // its own, for the prefix it leaves, is replaced
	}
	if ref.disc != nil && ref.disc.users == 1 {
		n--
	}
	if n >= rt.cfg.MaxDiscoveries {
		return excessiveLoad("too many namespace requests upstream")
	}
	// Held until followPrefix asks for it (discoverUpstream), or the
	// request ends.
	ref.pending = true
	rt.discPending[ref] = discWant{prefix, tracks}
	return nil
}

// unadmitLocked gives back ref's share of the discovery limits.
func (rt *router) unadmitLocked(ref *discRef) {
	s, pending := ref.owner, ref.pending
	ref.owner, ref.pending = nil, false
	if rt.closed || s == nil { // Close dropped the counts
		return
	}
	if pending {
		delete(rt.discPending, ref)
	}
	if rt.discBy[s]--; rt.discBy[s] <= 0 {
		delete(rt.discBy, s)
	}
}

// unadmit gives back the share of a request admitted and then not
// served, and its place among an upstream request's users.
func (rt *router) unadmit(ref *discRef) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		ref.disc = nil // Close ended the upstream requests
	} else {
		rt.releaseDiscLocked(ref)
	}
	rt.unadmitLocked(ref)
}
