package relay

import (
	"context"
	"errors"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// With Config.Upstream, namespaces travel both ways along a chain of
// relays: a namespace announced here is announced upstream while it lasts,
// so that subscribers at the origin reach a publisher at an edge, and a
// SUBSCRIBE_NAMESPACE here is asked upstream too, so that a subscriber at
// an edge discovers a publisher at the origin.

// upForward announces one namespace upstream (PUBLISH_NAMESPACE) while a
// session other than the upstream itself announces it here.
type upForward struct {
	e    *nsEntry
	ctx  context.Context
	stop context.CancelFunc
	wake chan struct{} // cap 1: the entry's announcers changed
}

// upDisc is one SUBSCRIBE_NAMESPACE, or with tracks SUBSCRIBE_TRACKS,
// upstream, shared by the downstream ones of its type whose prefix it
// covers. The relay's prefixes of each type are pairwise disjoint, so that
// the upstream never answers PREFIX_OVERLAP (§4.3.1): a downstream prefix
// that covers some of them replaces them.
type upDisc struct {
	tracks bool
	prefix wire.Namespace
	users  int
	ctx    context.Context
	cancel context.CancelFunc
	seen   map[wire.NamespaceKey]*nsEntry // guarded by nsState.mu
}

// overlapRetries bounds the attempts of an upstream SUBSCRIBE_NAMESPACE
// refused with PREFIX_OVERLAP while the one it replaces is being
// cancelled: the cancellation and the new request travel on different
// streams.
const overlapRetries = 8

// syncForwardLocked starts or stops e's forwarding upstream: on while e
// has a local announcer.
func (rl *Relay) syncForwardLocked(e *nsEntry) {
	if rl.cfg.Upstream == nil || rl.ns.closed {
		return
	}
	switch want := len(e.local) > 0; {
	case want && e.fwd == nil:
		ctx, cancel := context.WithCancel(rl.ctx)
		f := &upForward{e: e, ctx: ctx, stop: cancel, wake: make(chan struct{}, 1)}
		e.fwd = f
		rl.goRun(func() { rl.runForward(f) })
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
func (rl *Relay) hasOtherLocal(e *nsEntry, u *moqt.Session) bool {
	rl.ns.mu.Lock()
	defer rl.ns.mu.Unlock()
	for a := range e.local {
		if a.s != u {
			return true
		}
	}
	return false
}

// wait waits d, or for the entry's announcers to change when d is 0; false
// once f is stopped.
func (f *upForward) wait(d time.Duration) bool {
	var t <-chan time.Time
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		t = timer.C
	}
	select {
	case <-f.ctx.Done():
		return false
	case <-f.wake:
		return true
	case <-t:
		return true
	}
}

// runForward keeps f's namespace announced upstream until f is stopped,
// announcing it again on a new upstream session when the last one ended.
// A refusal, or a revocation by the upstream (§4.2), is not retried until
// the namespace's announcers change.
func (rl *Relay) runForward(f *upForward) {
	ns := f.e.ns
	for f.ctx.Err() == nil {
		ups, err := rl.upstreamSession(f.ctx, ns)
		if err != nil {
			rl.log.Warn("relay: upstream", "event", "unavailable", "namespace", ns.String(), "err", err)
			if !f.wait(redialBackoff) {
				return
			}
			continue
		}
		if len(ups) == 0 || !rl.hasOtherLocal(f.e, ups[0]) {
			if !f.wait(0) {
				return
			}
			continue
		}
		u := ups[0]
		ann, err := u.PublishNamespace(f.ctx, ns, wire.Params{})
		if err != nil {
			var re *moqt.RequestError
			refused := errors.As(err, &re)
			if f.ctx.Err() == nil {
				rl.log.Warn("relay: upstream publish_namespace", "event", "failed", "namespace", ns.String(), "err", err)
			}
			if refused && !f.wait(0) || !refused && !f.wait(redialBackoff) {
				return
			}
			continue
		}
		rl.log.Debug("relay: upstream publish_namespace", "event", "ok", "namespace", ns.String())
		if !rl.holdForward(f, u, ann) {
			return
		}
	}
}

// holdForward keeps ann while f lasts and a local announcer other than u
// remains, renewing a granted EXPIRES (§9.20.17) halfway. It reports false
// once f is stopped.
func (rl *Relay) holdForward(f *upForward, u *moqt.Session, ann *moqt.Announcement) bool {
	defer ann.Close()
	renew := time.NewTimer(time.Hour)
	defer renew.Stop()
	arm := func() {
		renew.Stop()
		if x, ok := ann.Params.Expires.Get(); ok && x > 0 {
			renew.Reset(time.Duration(x) * time.Millisecond / 2)
		}
	}
	arm()
	for {
		select {
		case <-f.ctx.Done():
			return false
		case <-ann.Done():
			if u.Context().Err() != nil {
				return f.wait(redialBackoff) // the session ended: announce on the next one
			}
			rl.log.Warn("relay: upstream publish_namespace", "event", "revoked", "namespace", f.e.ns.String(), "err", ann.Err())
			return f.wait(0)
		case <-f.wake:
			if !rl.hasOtherLocal(f.e, u) {
				return true
			}
		case <-renew.C:
			ctx, cancel := context.WithTimeout(f.ctx, rl.cfg.UpstreamTimeout)
			err := ann.Update(ctx, wire.Params{})
			cancel()
			if err != nil {
				rl.log.Warn("relay: upstream publish_namespace", "event", "not_renewed", "namespace", f.e.ns.String(), "err", err)
			}
			arm()
		}
	}
}

// discoverUpstream makes ref rely on the upstream request of its type that
// covers its prefix, made if none does; alive reports, under the lock,
// that ref's request is still served.
func (rl *Relay) discoverUpstream(ref *discRef, tracks bool, alive func() bool) {
	st := &rl.ns
	st.mu.Lock()
	defer st.mu.Unlock()
	if ref.pending && !st.closed {
		st.discPending--
	}
	ref.pending = false
	if st.closed || !alive() || ref.disc != nil || sessionLevel(ref.prefix) {
		return
	}
	for d := range st.discs {
		if d.tracks == tracks && ref.prefix.HasPrefix(d.prefix) {
			d.users++
			ref.disc = d
			return
		}
	}
	ctx, cancel := context.WithCancel(rl.ctx)
	nd := &upDisc{tracks: tracks, prefix: ref.prefix, users: 1, ctx: ctx, cancel: cancel, seen: map[wire.NamespaceKey]*nsEntry{}}
	for d := range st.discs {
		if d.tracks != tracks || !d.prefix.HasPrefix(ref.prefix) {
			continue
		}
		// Replaced by nd, which covers it: its namespaces go (NAMESPACE_DONE)
		// and come back as nd reports them.
		for _, other := range rl.discRefsLocked(tracks) {
			if other.disc == d {
				other.disc = nd
				nd.users++
			}
		}
		rl.endDiscLocked(d)
	}
	if !alive() || nd.users <= 0 {
		nd.cancel() // its users went while the ones it replaced ended
		return
	}
	st.discs[nd] = struct{}{}
	ref.disc = nd
	rl.goRun(func() { rl.runDisc(nd) })
}

// discRefsLocked lists the shares of the downstream requests of a type.
func (rl *Relay) discRefsLocked(tracks bool) []*discRef {
	var out []*discRef
	if tracks {
		for sub := range rl.ns.tsubs {
			out = append(out, sub.ref)
		}
	} else {
		for sub := range rl.ns.subs {
			out = append(out, sub.ref)
		}
	}
	return out
}

// releaseDiscLocked drops ref's share, ending its upstream request with
// the last.
func (rl *Relay) releaseDiscLocked(ref *discRef) {
	d := ref.disc
	if d == nil {
		return
	}
	ref.disc = nil
	if d.users--; d.users <= 0 {
		rl.endDiscLocked(d)
	}
}

// endDiscLocked cancels d and withdraws what it reported.
func (rl *Relay) endDiscLocked(d *upDisc) {
	d.cancel()
	delete(rl.ns.discs, d)
	for k, e := range d.seen {
		delete(d.seen, k)
		delete(e.remote, d)
		rl.changedLocked(e)
	}
}

// runDisc keeps d's request upstream until d ends, asking
// again on a new upstream session when the last one ended.
func (rl *Relay) runDisc(d *upDisc) {
	defer func() {
		rl.ns.mu.Lock()
		if _, ok := rl.ns.discs[d]; ok {
			rl.endDiscLocked(d)
		}
		rl.ns.mu.Unlock()
	}()
	overlaps := 0
	for d.ctx.Err() == nil {
		ups, err := rl.upstreamSession(d.ctx, d.prefix)
		if err == nil && len(ups) == 0 {
			return // no upstream for the prefix
		}
		if err != nil {
			rl.log.Warn("relay: upstream", "event", "unavailable", "prefix", d.prefix.String(), "err", err)
			if !sleepCtx(d.ctx, redialBackoff) {
				return
			}
			continue
		}
		u := ups[0]
		subscribe := u.SubscribeNamespace
		if d.tracks {
			subscribe = u.SubscribeTracks
		}
		sub, err := subscribe(d.ctx, d.prefix, wire.Params{})
		if err != nil {
			var re *moqt.RequestError
			if errors.As(err, &re) && re.Code == wire.ReqPrefixOverlap && overlaps < overlapRetries {
				overlaps++
				if !sleepCtx(d.ctx, time.Duration(overlaps)*20*time.Millisecond) {
					return
				}
				continue
			}
			if d.ctx.Err() == nil {
				rl.log.Warn("relay: upstream subscribe_namespace", "event", "failed", "prefix", d.prefix.String(), "err", err)
			}
			if errors.As(err, &re) || !sleepCtx(d.ctx, redialBackoff) {
				return
			}
			continue
		}
		overlaps = 0
		rl.log.Debug("relay: upstream subscribe_namespace", "event", "ok", "prefix", d.prefix.String())
		rl.readDisc(d, u, sub)
		_ = sub.Close()
		if !sleepCtx(d.ctx, redialBackoff) {
			return
		}
	}
}

// readDisc applies the upstream's reports until its stream ends (whose
// end reports every namespace Done, §9.15) or d does.
func (rl *Relay) readDisc(d *upDisc, u *moqt.Session, sub *moqt.NamespaceSubscription) {
	for {
		ev, err := sub.Next(d.ctx)
		if err != nil || !rl.applyDisc(d, u, ev) {
			return
		}
	}
}

// applyDisc applies one report of d's upstream u: NAMESPACE or
// NAMESPACE_DONE. Session-level namespaces are dropped (§6.5), and a
// SUBSCRIBE_TRACKS's PUBLISH_SKIPPEDs tell the relay nothing to pass on.
// It reports false once d has ended.
func (rl *Relay) applyDisc(d *upDisc, u *moqt.Session, ev moqt.NamespaceEvent) bool {
	st := &rl.ns
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.discs[d]; !ok {
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
			rl.changedLocked(e)
		}
	} else if d.seen[k] == nil {
		e := st.entryLocked(ev.Namespace)
		e.remote[d] = u
		d.seen[k] = e
		rl.changedLocked(e)
	}
	return true
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// followPrefix follows w's prefix after each accepted
// TRACK_NAMESPACE_PREFIX update (§9.5.2), until ctx, the request's, ends:
// moveLocked, if set, is called with the new prefix under nsState.mu, and
// with up the request's upstream discovery moves to it (the old prefix's
// share released, the upstream's namespaces under the new one asked for).
func (rl *Relay) followPrefix(ctx context.Context, w *moqt.NamespaceWriter, ref *discRef, tracks, up bool,
	alive func() bool, moveLocked func(wire.Namespace)) {
	changed := w.Changed()
	for {
		p := w.Prefix()
		st := &rl.ns
		st.mu.Lock()
		moved := alive() && p.Key() != ref.prefix.Key()
		if moved {
			if moveLocked != nil {
				moveLocked(p)
			}
			rl.releaseDiscLocked(ref)
			ref.prefix = p
		}
		st.mu.Unlock()
		if moved && up {
			rl.discoverUpstream(ref, tracks, alive)
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
func (rl *Relay) discovers(s *moqt.Session, prefix wire.Namespace) bool {
	return rl.cfg.Upstream != nil && !sessionLevel(prefix) && !rl.isUpstream(s)
}

// excessiveLoad refuses a discovery past Config.MaxSessionDiscoveries or
// Config.MaxDiscoveries.
func excessiveLoad(reason string) *moqt.RequestError {
	return &moqt.RequestError{Code: wire.ReqExcessiveLoad, Reason: reason}
}

// coveredLocked reports whether an upstream request of the type covers
// prefix: a request for it shares that one.
func (st *nsState) coveredLocked(prefix wire.Namespace, tracks bool) bool {
	for d := range st.discs {
		if d.tracks == tracks && prefix.HasPrefix(d.prefix) {
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
func (rl *Relay) admitDiscLocked(ref *discRef, s *moqt.Session, tracks bool) *moqt.RequestError {
	st := &rl.ns
	if st.discBy[s] >= rl.cfg.MaxSessionDiscoveries {
		return excessiveLoad("too many namespace requests of the session asked upstream")
	}
	if !st.coveredLocked(ref.prefix, tracks) {
		if len(st.discs)+st.discPending >= rl.cfg.MaxDiscoveries {
			return excessiveLoad("too many namespace requests upstream")
		}
		ref.pending = true
		st.discPending++
	}
	st.discBy[s]++
	ref.owner = s
	return nil
}

// admitMoveLocked decides a prefix update of ref's request against
// Config.MaxDiscoveries: the new prefix needs an upstream request of its
// own unless one covers it, and frees the old one if ref was its only user.
// The new request's place is taken at once, so that updates and requests
// in the meantime cannot take it.
func (rl *Relay) admitMoveLocked(ref *discRef, prefix wire.Namespace, tracks bool) error {
	st := &rl.ns
	if ref.owner == nil || sessionLevel(prefix) || st.coveredLocked(prefix, tracks) {
		return nil
	}
	n := len(st.discs) + st.discPending
	if ref.disc != nil && ref.disc.users == 1 {
		n--
	}
	if n >= rl.cfg.MaxDiscoveries {
		return excessiveLoad("too many namespace requests upstream")
	}
	// Held until followPrefix asks for it (discoverUpstream), or the
	// request ends.
	if !ref.pending {
		ref.pending = true
		st.discPending++
	}
	return nil
}

// unadmitLocked gives back ref's share of the discovery limits.
func (rl *Relay) unadmitLocked(ref *discRef) {
	st := &rl.ns
	s, pending := ref.owner, ref.pending
	ref.owner, ref.pending = nil, false
	if st.closed || s == nil { // Close dropped the counts
		return
	}
	if pending {
		st.discPending--
	}
	if st.discBy[s]--; st.discBy[s] <= 0 {
		delete(st.discBy, s)
	}
}

// unadmit is unadmitLocked taking the lock.
func (rl *Relay) unadmit(ref *discRef) {
	rl.ns.mu.Lock()
	defer rl.ns.mu.Unlock()
	rl.unadmitLocked(ref)
}
