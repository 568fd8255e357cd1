package relay

import (
	"context"
	"errors"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// tracksSub is an accepted SUBSCRIBE_TRACKS. Guarded by nsState.mu.
type tracksSub struct {
	s *moqt.Session
	w *moqt.NamespaceWriter
	// ctx ends with the request, by endTracks: no PUBLISH once it ended.
	ctx   context.Context
	stop  context.CancelFunc
	limit int
	ended bool
	ref   *discRef
	// offered are the tracks with a PUBLISH in flight or Established, and
	// those skipped: a skipped track gets no PUBLISH on this request
	// again (§4.1).
	offered map[wire.TrackKey]*trackOffer
}

type trackOffer struct {
	skipped bool
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
func (rl *Relay) serveSubscribeTracks(r *moqt.SubscribeNamespaceRequest) {
	s := r.Session()
	limit := rl.maxMatches()
	tooMany := len(rl.tracksFor(s, r.Prefix)) > limit
	st := &rl.ns
	ref := &discRef{prefix: cloneName(wire.FullTrackName{Namespace: r.Prefix}).Namespace}
	up := rl.discovers(s, r.Prefix)
	r.OnUpdate = rl.checkUpdate(r, ref, limit, func(p wire.Namespace) int { return len(rl.tracksFor(s, p)) })
	w := rl.acceptLocked(r, func() *moqt.RequestError {
		if tooMany {
			return tooLarge()
		}
		if up {
			return rl.admitDiscLocked(ref, s, true)
		}
		return nil
	})
	if w == nil {
		rl.unadmit(ref)
		return
	}
	ctx, stop := context.WithCancel(rl.ctx)
	sub := &tracksSub{s: s, w: w, ctx: ctx, stop: stop, limit: limit,
		offered: map[wire.TrackKey]*trackOffer{},
		ref:     ref}
	st.tsubs[sub] = struct{}{}
	st.mu.Unlock()
	rl.reqDone(KindSubscribeTracks, OutcomeOK)
	rl.log.Debug("relay: subscribe_tracks", "event", "ok", "prefix", r.Prefix.String())
	alive := func() bool { _, ok := st.tsubs[sub]; return ok }
	if up {
		// The upstream's tracks come as PUBLISHes to the relay, which
		// offers them on (onTrackPublished).
		rl.discoverUpstream(ref, true, alive)
		rl.goRun(func() { rl.followPrefix(sub.ctx, w, ref, true, true, alive, nil) })
	}
	context.AfterFunc(r.Context(), func() { rl.endTracks(sub) })
	// Taken before the prefix is read, so that no update is missed.
	changed := w.Changed()
	// Listed again now that sub is registered: a track published
	// meanwhile is offered by onTrackPublished or here, once.
	for _, name := range rl.tracksFor(s, w.Prefix()) {
		rl.offerTrack(sub, name)
	}
	rl.goRun(func() { rl.followUpdates(sub, changed) })
}

// followUpdates offers, after each update of sub's prefix (§9.5.2) or
// TRACK_PROPERTY_FILTERs (§3.3.2), the tracks published before it that
// now fall under the prefix and pass the filters; later ones come by
// onTrackPublished. The PUBLISHes made already go on.
func (rl *Relay) followUpdates(sub *tracksSub, changed <-chan struct{}) {
	for {
		select {
		case <-sub.ctx.Done():
			return
		case <-changed:
		}
		changed = sub.w.Changed()
		for _, name := range rl.tracksFor(sub.s, sub.w.Prefix()) {
			rl.offerTrack(sub, name)
		}
	}
}

// endTracks forgets a SUBSCRIBE_TRACKS that ended: no PUBLISH is started
// for it from then on (§4.1).
func (rl *Relay) endTracks(sub *tracksSub) {
	rl.ns.mu.Lock()
	sub.ended = true
	if _, ok := rl.ns.tsubs[sub]; ok {
		delete(rl.ns.tsubs, sub)
		rl.releaseDiscLocked(sub.ref)
		rl.unadmitLocked(sub.ref)
	}
	rl.ns.mu.Unlock()
	sub.stop()
}

// tracksFor lists the tracks under prefix available to a subscriber on s:
// not its own (§4.1).
func (rl *Relay) tracksFor(s *moqt.Session, prefix wire.Namespace) []wire.FullTrackName {
	var out []wire.FullTrackName
	for _, name := range rl.availableTracks(prefix) {
		if !containsSession(rl.publisherSessions(name), s) {
			out = append(out, name)
		}
	}
	return out
}

// onTrackPublished offers a track that became available by PUBLISH to
// every SUBSCRIBE_TRACKS subscriber whose prefix matches (§7.5), except
// the sessions exclude reports (see the contract in relay.go).
func (rl *Relay) onTrackPublished(name wire.FullTrackName, exclude func(*moqt.Session) bool) {
	st := &rl.ns
	st.mu.Lock()
	var subs []*tracksSub
	for sub := range st.tsubs {
		if !sub.ended && name.Namespace.HasPrefix(sub.w.Prefix()) && !exclude(sub.s) {
			subs = append(subs, sub)
		}
	}
	st.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	pubs := rl.publisherSessions(name)
	for _, sub := range subs {
		if !containsSession(pubs, sub.s) {
			rl.offerTrack(sub, name)
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
func (rl *Relay) offerTrack(sub *tracksSub, name wire.FullTrackName) {
	key := name.Key()
	props := rl.trackProps(name)
	st := &rl.ns
	st.mu.Lock()
	if sub.ended || st.closed || sub.offered[key] != nil || !name.Namespace.HasPrefix(sub.w.Prefix()) || !sub.w.Wants(props) {
		st.mu.Unlock()
		return
	}
	if len(sub.offered) >= sub.limit {
		st.mu.Unlock()
		sub.w.End(wire.ResetExcessiveLoad)
		rl.endTracks(sub)
		return
	}
	of := &trackOffer{}
	sub.offered[key] = of
	st.mu.Unlock()
	rl.goRun(func() { rl.publishOffered(sub, name, key, of) })
}

// publishOffered makes the PUBLISH of offerTrack: never once the
// SUBSCRIBE_TRACKS ended (§4.1); PUBLISH_SKIPPED when it fails otherwise.
func (rl *Relay) publishOffered(sub *tracksSub, name wire.FullTrackName, key wire.TrackKey, of *trackOffer) {
	forget := func() {
		rl.ns.mu.Lock()
		if sub.offered[key] == of {
			delete(sub.offered, key)
		}
		rl.ns.mu.Unlock()
	}
	rl.ns.mu.Lock()
	ended := sub.ended
	rl.ns.mu.Unlock()
	if ended {
		forget()
		return
	}
	// The parameters now: an update's FORWARD applies to the PUBLISHes
	// after it (§9.20.19).
	ss, err := rl.publishDownstream(sub.ctx, sub.s, name, sub.w.Params())
	if err != nil {
		rl.ns.mu.Lock()
		skip := !sub.ended && !errors.Is(err, context.Canceled)
		if skip {
			of.skipped = true
			_ = sub.w.Skip(name)
		} else if sub.offered[key] == of {
			delete(sub.offered, key)
		}
		rl.ns.mu.Unlock()
		rl.log.Debug("relay: subscribe_tracks", "event", "publish_failed", "track", name.String(), "skipped", skip, "err", err)
		return
	}
	rl.log.Debug("relay: subscribe_tracks", "event", "publish", "track", name.String())
	// Once this PUBLISH ends, a new PUBLISH of the track may be offered
	// again (§4.1: the scope of a skip, and of a PUBLISH, is one PUBLISH).
	context.AfterFunc(ss.Context(), forget)
}

// trackProps is the Track Properties of the relay's track name; nil if it
// has none, or is gone (its PUBLISH then fails).
func (rl *Relay) trackProps(name wire.FullTrackName) wire.KVList {
	e := rl.lookup(name)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.props
}
