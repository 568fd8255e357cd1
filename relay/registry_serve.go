package relay

// The requests the registry serves: SUBSCRIBE, PUBLISH, TRACK_STATUS, and
// the PUBLISHes the router offers for SUBSCRIBE_TRACKS.

import (
	"context"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// serveSubscribe answers a downstream SUBSCRIBE (§7.4, §7.5): at once from a
// track with an Established upstream, else once an upstream SUBSCRIBE to the
// track's publishers is Established, or with the publishers' refusal. With no
// publisher it fails, or waits for one as RENDEZVOUS_TIMEOUT asks (§9.20.7).
func (reg *registry) serveSubscribe(r *moqt.SubscribeRequest) {
	ctx := r.Context()
	fwd := forwardOf(r.Params)
	// rerouted is set once r, having joined another request's search for
	// the track's publishers, was routed again on its own (await).
	rerouted := false
	for {
		e := reg.entry(r.Track)
		if e == nil {
			reg.refuse(r, wire.ReqGoingAway, "relay closed", OutcomeRefused)
			return
		}
		e.mu.Lock()
		switch {
		case e.dead:
			e.mu.Unlock()
			continue
		case e.track != nil:
			idle := len(e.downs)+e.waiters == 0
			e.mu.Unlock()
			if idle {
				// Announcers that came while the track had no
				// subscriber were not asked (addPublisher): they are
				// now, every matching publisher being (§7.5).
				reg.subscribeAnnouncers(e)
			}
			if reg.acceptDown(e, r, fwd, false) {
				return
			}
			continue
		case len(e.ups) > 0: // SUBSCRIBEs in flight upstream
			e.addWaiterLocked(r, fwd)
			e.mu.Unlock()
			if reg.await(e, r, fwd, 0, !rerouted) {
				return
			}
			rerouted = true
			continue
		case e.resolving != nil:
			ch := e.resolving
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				reg.reqDone(KindSubscribe, OutcomeCancelled)
				return
			}
		}
		// Nobody asked upstream yet: this SUBSCRIBE finds the publishers.
		if !reg.chargeOpenerLocked(e, r.Session()) {
			e.checkIdleLocked()
			e.mu.Unlock()
			reg.refuse(r, wire.ReqExcessiveLoad, "too many tracks opened by this session", OutcomeRefused)
			return
		}
		ch := make(chan struct{})
		e.resolving = ch
		e.addWaiterLocked(r, fwd)
		e.mu.Unlock()
		pubs, err := reg.publishersFor(withRequest(ctx, r.Session(), r.Track), r.Track)
		e.mu.Lock()
		e.resolving = nil
		close(ch)
		if !e.dead {
			for _, s := range pubs {
				if !e.hasUpstream(s) {
					e.startUpstream(s)
				}
			}
		}
		found := e.dead || e.track != nil || len(e.ups) > 0
		hold := reg.rendezvous(r.Params)
		if !found && (hold == 0 || err != nil || !reg.holdOne(r.Session())) {
			e.removeWaiterLocked(r.Session(), fwd)
			e.checkIdleLocked()
			e.mu.Unlock()
			switch {
			case err != nil:
				reg.log.Warn("relay: upstream", "event", "unavailable", "track", r.Track.String(), "err", err)
				reg.refuse(r, wire.ReqInternalError, "upstream unavailable", OutcomeRefused)
			case hold == 0:
				reg.refuse(r, wire.ReqDoesNotExist, "no publisher", OutcomeNotFound)
			default:
				reg.refuse(r, wire.ReqExcessiveLoad, "too many SUBSCRIBEs waiting for a publisher", OutcomeRefused)
			}
			return
		}
		e.mu.Unlock()
		if found {
			if reg.await(e, r, fwd, 0, false) {
				return
			}
			continue
		}
		done := reg.await(e, r, fwd, hold, false)
		reg.unhold(r.Session())
		if done {
			return
		}
	}
}

// subscribeAnnouncers sends SUBSCRIBE to every session whose
// PUBLISH_NAMESPACE matches the track and that is not asked for it yet.
func (reg *registry) subscribeAnnouncers(e *trackEntry) {
	anns := reg.announcersOf(e.name.Namespace)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return
	}
	for _, s := range anns {
		if !e.hasUpstream(s) {
			e.startUpstream(s)
		}
	}
}

// forwardOf is the Forward state params set, 1 when absent (§9.20.19).
func forwardOf(p wire.Params) bool {
	return !p.Forward.Set || p.Forward.Value
}

// rendezvous is how long a SUBSCRIBE waits for a publisher: its
// RENDEZVOUS_TIMEOUT, capped by Config.MaxRendezvousTimeout; 0 when absent.
func (reg *registry) rendezvous(p wire.Params) time.Duration {
	if !p.RendezvousTimeout.Set || p.RendezvousTimeout.Value == 0 {
		return 0
	}
	max := reg.cfg.MaxRendezvousTimeout
	if p.RendezvousTimeout.Value >= uint64(max/time.Millisecond) {
		return max
	}
	return time.Duration(p.RendezvousTimeout.Value) * time.Millisecond
}

// holdOne takes one of the Config.MaxHeldSubscribes places for a
// SUBSCRIBE of s, within its Config.MaxSessionHeldSubscribes.
func (reg *registry) holdOne(s *moqt.Session) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	st := reg.sessions[s]
	if reg.held >= reg.cfg.MaxHeldSubscribes || st != nil && st.held >= reg.cfg.MaxSessionHeldSubscribes {
		return false
	}
	reg.held++
	if st != nil {
		st.held++
	}
	return true
}

// unhold gives back holdOne's place.
func (reg *registry) unhold(s *moqt.Session) {
	reg.mu.Lock()
	reg.held--
	if st := reg.sessions[s]; st != nil && st.held > 0 {
		st.held--
	}
	reg.mu.Unlock()
}

// await waits, as one of the track's waiters, for its first upstream to be
// Established, for at most hold when hold is set (a rendezvous), then
// answers r. It reports false when the track went away meanwhile and r is to
// be routed again. So it does too, when joined (r joined a search another
// request began), for a search that found no publisher: that request's
// search may have been narrower than r's own would be (an UpstreamSet
// gives a cluster peer's request no upstream, so that requests do not
// loop), and every matching publisher is to be asked (§7.5).
func (reg *registry) await(e *trackEntry, r *moqt.SubscribeRequest, fwd bool, hold time.Duration, joined bool) bool {
	var timeout <-chan time.Time
	if hold > 0 {
		t := time.NewTimer(hold)
		defer t.Stop()
		timeout = t.C
	}
	leave := func() {
		e.mu.Lock()
		e.removeWaiterLocked(r.Session(), fwd)
		e.updateForwardLocked()
		e.checkIdleLocked()
		e.mu.Unlock()
	}
	select {
	case <-e.ready:
	case <-r.Context().Done():
		leave()
		reg.reqDone(KindSubscribe, OutcomeCancelled)
		return true
	case <-timeout:
		leave()
		reg.refuse(r, wire.ReqTimeout, "no publisher appeared", OutcomeTimeout)
		return true
	case <-reg.ctx.Done():
		leave()
		reg.refuse(r, wire.ReqGoingAway, "relay closed", OutcomeRefused)
		return true
	}
	e.mu.Lock()
	if rerr := e.err; rerr != nil {
		e.removeWaiterLocked(r.Session(), fwd)
		e.mu.Unlock()
		if rerr == errDropped || (joined && rerr.Code == wire.ReqDoesNotExist) {
			return false
		}
		reg.refuse(r, rerr.Code, rerr.Reason, OutcomeRefused)
		return true
	}
	e.mu.Unlock()
	return reg.acceptDown(e, r, fwd, true)
}

// acceptDown answers r with SUBSCRIBE_OK from the track, Established
// upstream, and serves it. It reports false when the track ended meanwhile
// and r is to be routed again.
func (reg *registry) acceptDown(e *trackEntry, r *moqt.SubscribeRequest, fwd, waiter bool) bool {
	e.mu.Lock()
	if waiter {
		// Still joining until answered: the upstream's objects wait for
		// it (awaitJoined).
		e.joining++
		e.removeWaiterLocked(r.Session(), fwd)
		defer func() {
			e.mu.Lock()
			e.joining--
			e.joinedLocked()
			e.mu.Unlock()
		}()
	}
	if e.dead {
		e.mu.Unlock()
		return false
	}
	d := &downstream{s: r.Session(), forward: fwd}
	e.downs[d] = struct{}{}
	e.stopLingerLocked()
	e.updateForwardLocked() // before SUBSCRIBE_OK: Forward 1 upstream (§7.5)
	track := e.track
	e.awaitUpstreamLocked(r.Context(), fwd)
	switch {
	case e.dead:
		// Every upstream failed meanwhile: routed again.
		delete(e.downs, d)
		e.mu.Unlock()
		return false
	case !e.establishedLocked():
		delete(e.downs, d)
		e.checkIdleLocked()
		e.mu.Unlock()
		if r.Context().Err() != nil {
			reg.reqDone(KindSubscribe, OutcomeCancelled)
			return true
		}
		reg.refuse(r, wire.ReqInternalError, "no publisher answered in time", OutcomeRefused)
		return true
	}
	e.mu.Unlock()
	if waiter && reg.joinHook != nil {
		reg.joinHook()
	}

	ss, err := track.Accept(r, moqt.AcceptOptions{OnUpdate: func(_ *moqt.ServedSubscription, p *wire.Params) error {
		if err := reg.authorizeUpdate(r, p); err != nil {
			return err
		}
		e.downstreamUpdate(d, p)
		return nil
	}})
	if err != nil {
		e.removeDown(d)
		reg.reqDone(KindSubscribe, OutcomeRefused)
		return true
	}
	e.mu.Lock()
	d.ss = ss
	if g := r.Params.NewGroupRequest; g.Set {
		// A waiter's may have gone with the upstream SUBSCRIBE, which
		// newGroupLocked finds covering it; one that came while that
		// SUBSCRIBE was in flight goes now (§9.20.20).
		e.newGroupLocked(g.Value)
	}
	dead := e.dead
	e.mu.Unlock()
	if dead { // ended while SUBSCRIBE_OK went: its End did not see ss
		_ = ss.End(wire.DoneInternalError, "publisher gone")
	}
	context.AfterFunc(ss.Context(), func() { e.removeDown(d) })
	reg.reqDone(KindSubscribe, OutcomeOK)
	reg.log.Debug("relay: subscribe", "event", "ok", "track", r.Track.String(), "forward", fwd)
	return true
}

// servePublish accepts a publisher's PUBLISH (§7.5): the track becomes
// available, or gains a publisher, and its downstream subscribers' Forward
// state goes upstream with REQUEST_UPDATE.
func (reg *registry) servePublish(r *moqt.PublishRequest) {
	defer reg.holdResolving(r.Track)()
	defer reg.accepting(r.Track, r.Session())()
	sub, err := r.Accept(wire.Params{})
	if err != nil {
		reg.reqDone(KindPublish, OutcomeRefused)
		return
	}
	reg.reqDone(KindPublish, OutcomeOK)
	reg.log.Debug("relay: publish", "event", "ok", "track", r.Track.String())
	if reg.publishAcceptedHook != nil {
		reg.publishAcceptedHook()
	}
	for {
		e := reg.entry(r.Track)
		if e == nil {
			_ = sub.Close()
			return
		}
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			continue
		}
		u := &upstream{e: e, s: r.Session(), byPublish: true, sub: sub, cancel: func() {}, sent: forwardOf(r.Params)}
		if e.track == nil && !e.makeTrackLocked(sub) {
			e.mu.Unlock()
			_ = sub.Close()
			return
		}
		newly := !e.publishedLocked()
		e.ups[u] = struct{}{}
		e.forwardChangedLocked()
		e.noteLargestLocked(sub) // the PUBLISH's LARGEST_OBJECT (§9.20.18)
		// Held SUBSCRIBEs proceed (ready is closed) and are not offered the
		// PUBLISH as well (§7.5); nor are the track's publishers.
		exclude := map[*moqt.Session]bool{}
		for s := range e.waiting {
			exclude[s] = true
		}
		for o := range e.ups {
			exclude[o.s] = true
		}
		e.updateForwardLocked()
		e.mu.Unlock()
		reg.goRun(u.run)
		reg.note.markTrack(e.name)
		if newly {
			name := e.name
			reg.goRun(func() {
				skip := func(s *moqt.Session) bool { return exclude[s] }
				if reg.trackPublishedHook != nil {
					reg.trackPublishedHook(name, skip)
				}
				reg.offer.onTrackPublished(name, skip)
			})
		}
		return
	}
}

// accepting counts a PUBLISH from s for name as being accepted (see
// trackEntry.accepting) until the returned func is called, once it is
// registered or refused.
func (reg *registry) accepting(name wire.FullTrackName, s *moqt.Session) (done func()) {
	e := reg.entry(name)
	if e == nil {
		return func() {}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.accepting[s]++
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.accepting[s]--; e.accepting[s] == 0 {
			delete(e.accepting, s)
		}
	}
}

// holdResolving marks name's track as being resolved, as a SUBSCRIBE
// looking for its publishers does, until the returned func is called: a
// PUBLISH holds it from before its PUBLISH_OK until the track is in the
// registry, so that a SUBSCRIBE sent as soon as the publisher has its
// answer waits for the track rather than finding none. A track being
// resolved already, or gone, is not marked.
func (reg *registry) holdResolving(name wire.FullTrackName) (release func()) {
	e := reg.entry(name)
	if e == nil {
		return func() {}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || e.resolving != nil {
		return func() {}
	}
	ch := make(chan struct{})
	e.resolving = ch
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.resolving == ch {
			e.resolving = nil
			close(ch)
			e.checkIdleLocked() // a track whose PUBLISH failed leaves
		}
	}
}

// publishDownstream offers the relay's track name to s with PUBLISH (see
// trackRegistry), as a result of a SUBSCRIBE_TRACKS whose
// parameters are req: LocalTrack.PublishTracks sends those PUBLISH
// carries and applies the object Range filters and INCLUDE_PROPERTIES
// itself, and a NEW_GROUP_REQUEST goes upstream as a SUBSCRIBE's would
// for a track with an Established upstream (§9.20.20), once the
// subscriber has taken the PUBLISH.
func (reg *registry) publishDownstream(ctx context.Context, s *moqt.Session, name wire.FullTrackName, req wire.Params) (*moqt.ServedSubscription, error) {
	gone := &moqt.RequestError{Code: wire.ReqDoesNotExist, Reason: "track not available"}
	e := reg.lookup(name)
	if e == nil {
		return nil, gone
	}
	e.mu.Lock()
	if e.dead || e.track == nil {
		e.mu.Unlock()
		return nil, gone
	}
	d := &downstream{s: s, forward: forwardOf(req)}
	e.downs[d] = struct{}{}
	e.stopLingerLocked()
	e.updateForwardLocked()
	track := e.track
	e.mu.Unlock()
	// The subscriber's REQUEST_UPDATEs move d's Forward state, and with it
	// the upstream's, as a SUBSCRIBE's do.
	ss, err := track.PublishTracks(ctx, s, req, moqt.AcceptOptions{OnUpdate: func(_ *moqt.ServedSubscription, p *wire.Params) error {
		e.downstreamUpdate(d, p)
		return nil
	}})
	if err != nil {
		e.removeDown(d)
		return nil, err
	}
	e.mu.Lock()
	d.ss = ss
	if g := req.NewGroupRequest; g.Set {
		e.newGroupLocked(g.Value)
	}
	e.mu.Unlock()
	context.AfterFunc(ss.Context(), func() { e.removeDown(d) })
	return ss, nil
}

// serveTrackStatus answers TRACK_STATUS (§9.13) from the track when it has an
// Established upstream, or ended and was kept (its final Largest Object,
// Config.KeepEnded), else from the first of its publishers that answers
// (firstStatus). A track whose upstreams are all at Forward 0 (a PUBLISH
// nobody subscribed to) sent the relay no objects: its Largest Object is
// asked of those publishers first, and the relay's own answer stands when
// none gives one.
func (reg *registry) serveTrackStatus(r *moqt.TrackStatusRequest) {
	var track *moqt.LocalTrack
	var paused []*moqt.Session
	if e := reg.lookup(r.Track); e != nil {
		e.mu.Lock()
		if !e.dead {
			track = e.track
		}
		if track != nil && !e.forwardingLocked() {
			paused = e.establishedSessionsLocked()
		}
		e.mu.Unlock()
	}
	if len(paused) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), reg.cfg.UpstreamTimeout)
		ts, err := firstStatus(ctx, paused, r.Track)
		cancel()
		if err == nil && ts.Largest.Set {
			track.SetLargest(ts.Largest.Value)
		}
	}
	if track == nil {
		track = reg.endedTrack(r.Track)
	}
	if track != nil {
		if err := track.Status(r); err != nil {
			reg.reqDone(KindTrackStatus, OutcomeRefused)
			return
		}
		reg.reqDone(KindTrackStatus, OutcomeOK)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), reg.cfg.UpstreamTimeout)
	defer cancel()
	pubs, err := reg.publishersFor(withRequest(ctx, r.Session(), r.Track), r.Track)
	if err != nil || len(pubs) == 0 {
		reg.refuse(r, wire.ReqDoesNotExist, "no publisher", OutcomeNotFound)
		return
	}
	ts, err := firstStatus(ctx, pubs, r.Track)
	if err != nil {
		re := requestErrorOf(err)
		reg.refuse(r, re.Code, re.Reason, OutcomeRefused)
		return
	}
	if r.Accept(ts.Largest, ts.Properties) != nil {
		reg.reqDone(KindTrackStatus, OutcomeRefused)
		return
	}
	reg.reqDone(KindTrackStatus, OutcomeOK)
}

// firstStatus asks each of pubs for name's status at once and returns the
// first answer, or the last refusal when every one refused. Asked in turn,
// a publisher that never answers held the others back for the whole of
// ctx: a session announcing the namespace and ignoring requests made every
// TRACK_STATUS for its tracks fail with TIMEOUT.
func firstStatus(ctx context.Context, pubs []*moqt.Session, name wire.FullTrackName) (*moqt.TrackStatus, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the others' requests end with it
	type answer struct {
		ts  *moqt.TrackStatus
		err error
	}
	answers := make(chan answer, len(pubs))
	for _, s := range pubs {
		go func() {
			ts, err := s.TrackStatus(ctx, name, wire.Params{})
			answers <- answer{ts, err}
		}()
	}
	var last error
	for range pubs {
		a := <-answers
		if a.err == nil {
			return a.ts, nil
		}
		last = a.err
	}
	return nil, last
}
