package relay

import (
	"context"
	"errors"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// serveSubscribe answers a downstream SUBSCRIBE (§7.4, §7.5): at once from a
// track with an Established upstream, else once an upstream SUBSCRIBE to the
// track's publishers is Established, or with the publishers' refusal. With no
// publisher it fails, or waits for one as RENDEZVOUS_TIMEOUT asks (§9.20.7).
func (rl *Relay) serveSubscribe(r *moqt.SubscribeRequest) {
	ctx := r.Context()
	fwd := forwardOf(r.Params)
	for {
		e := rl.entry(r.Track)
		if e == nil {
			rl.refuse(r, wire.ReqGoingAway, "relay closed", OutcomeRefused)
			return
		}
		e.mu.Lock()
		switch {
		case e.dead:
			e.mu.Unlock()
			continue
		case e.track != nil:
			e.mu.Unlock()
			if rl.acceptDown(e, r, fwd, false) {
				return
			}
			continue
		case len(e.ups) > 0: // SUBSCRIBEs in flight upstream
			e.addWaiterLocked(r, fwd)
			e.mu.Unlock()
			if rl.await(e, r, fwd, 0) {
				return
			}
			continue
		case e.resolving != nil:
			ch := e.resolving
			e.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				rl.reqDone(KindSubscribe, OutcomeCancelled)
				return
			}
		}
		// Nobody asked upstream yet: this SUBSCRIBE finds the publishers.
		if !rl.chargeOpenerLocked(e, r.Session()) {
			e.checkIdleLocked()
			e.mu.Unlock()
			rl.refuse(r, wire.ReqExcessiveLoad, "too many tracks opened by this session", OutcomeRefused)
			return
		}
		ch := make(chan struct{})
		e.resolving = ch
		e.addWaiterLocked(r, fwd)
		e.mu.Unlock()
		pubs, err := rl.publishersFor(ctx, r.Track)
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
		hold := rl.rendezvous(r.Params)
		if !found && (hold == 0 || err != nil || !rl.holdOne(r.Session())) {
			e.removeWaiterLocked(r.Session(), fwd)
			e.checkIdleLocked()
			e.mu.Unlock()
			switch {
			case err != nil:
				rl.log.Warn("relay: upstream", "event", "unavailable", "track", r.Track.String(), "err", err)
				rl.refuse(r, wire.ReqInternalError, "upstream unavailable", OutcomeRefused)
			case hold == 0:
				rl.refuse(r, wire.ReqDoesNotExist, "no publisher", OutcomeNotFound)
			default:
				rl.refuse(r, wire.ReqExcessiveLoad, "too many SUBSCRIBEs waiting for a publisher", OutcomeRefused)
			}
			return
		}
		e.mu.Unlock()
		if found {
			if rl.await(e, r, fwd, 0) {
				return
			}
			continue
		}
		done := rl.await(e, r, fwd, hold)
		rl.unhold(r.Session())
		if done {
			return
		}
	}
}

// forwardOf is the Forward state params set, 1 when absent (§9.20.19).
func forwardOf(p wire.Params) bool {
	return !p.Forward.Set || p.Forward.Value
}

// rendezvous is how long a SUBSCRIBE waits for a publisher: its
// RENDEZVOUS_TIMEOUT, capped by Config.MaxRendezvousTimeout; 0 when absent.
func (rl *Relay) rendezvous(p wire.Params) time.Duration {
	if !p.RendezvousTimeout.Set || p.RendezvousTimeout.Value == 0 {
		return 0
	}
	max := rl.cfg.MaxRendezvousTimeout
	if p.RendezvousTimeout.Value >= uint64(max/time.Millisecond) {
		return max
	}
	return time.Duration(p.RendezvousTimeout.Value) * time.Millisecond
}

// holdOne takes one of the Config.MaxHeldSubscribes places for a
// SUBSCRIBE of s, within its Config.MaxSessionHeldSubscribes.
func (rl *Relay) holdOne(s *moqt.Session) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	st := rl.sessions[s]
	if rl.held >= rl.cfg.MaxHeldSubscribes || st != nil && st.held >= rl.cfg.MaxSessionHeldSubscribes {
		return false
	}
	rl.held++
	if st != nil {
		st.held++
	}
	return true
}

// unhold gives back holdOne's place.
func (rl *Relay) unhold(s *moqt.Session) {
	rl.mu.Lock()
	rl.held--
	if st := rl.sessions[s]; st != nil && st.held > 0 {
		st.held--
	}
	rl.mu.Unlock()
}

// addWaiterLocked counts r among the SUBSCRIBEs waiting for the track.
func (e *trackEntry) addWaiterLocked(r *moqt.SubscribeRequest, fwd bool) {
	if e.waiters == 0 && len(e.downs) == 0 {
		e.firstParams = r.Params
	}
	if g := r.Params.NewGroupRequest; g.Set && (!e.waitNewGroup.Set || g.Value == 0 || (e.waitNewGroup.Value != 0 && g.Value > e.waitNewGroup.Value)) {
		e.waitNewGroup = g
	}
	e.waiters++
	if fwd {
		e.waitForward++
	}
	e.waiting[r.Session()]++
	e.stopLingerLocked()
}

func (e *trackEntry) removeWaiterLocked(s *moqt.Session, fwd bool) {
	e.waiters--
	if fwd {
		e.waitForward--
	}
	if e.waiting[s]--; e.waiting[s] <= 0 {
		delete(e.waiting, s)
	}
	if e.waiters == 0 {
		e.waitNewGroup = wire.Opt[uint64]{}
	}
}

// await waits, as one of the track's waiters, for its first upstream to be
// Established, for at most hold when hold is set (a rendezvous), then
// answers r. It reports false when the track went away meanwhile and r is to
// be routed again.
func (rl *Relay) await(e *trackEntry, r *moqt.SubscribeRequest, fwd bool, hold time.Duration) bool {
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
		rl.reqDone(KindSubscribe, OutcomeCancelled)
		return true
	case <-timeout:
		leave()
		rl.refuse(r, wire.ReqTimeout, "no publisher appeared", OutcomeTimeout)
		return true
	case <-rl.ctx.Done():
		leave()
		rl.refuse(r, wire.ReqGoingAway, "relay closed", OutcomeRefused)
		return true
	}
	e.mu.Lock()
	if rerr := e.err; rerr != nil {
		e.removeWaiterLocked(r.Session(), fwd)
		e.mu.Unlock()
		if rerr == errDropped {
			return false
		}
		rl.refuse(r, rerr.Code, rerr.Reason, OutcomeRefused)
		return true
	}
	e.mu.Unlock()
	return rl.acceptDown(e, r, fwd, true)
}

// acceptDown answers r with SUBSCRIBE_OK from the track, Established
// upstream, and serves it. It reports false when the track ended meanwhile
// and r is to be routed again.
func (rl *Relay) acceptDown(e *trackEntry, r *moqt.SubscribeRequest, fwd, waiter bool) bool {
	e.mu.Lock()
	if waiter {
		e.removeWaiterLocked(r.Session(), fwd)
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
	if fwd {
		e.awaitForwardLocked(r.Context())
	}
	e.mu.Unlock()

	ss, err := track.Accept(r, moqt.AcceptOptions{OnUpdate: func(_ *moqt.ServedSubscription, p *wire.Params) error {
		if err := rl.authorizeUpdate(r, p); err != nil {
			return err
		}
		e.downstreamUpdate(d, p)
		return nil
	}})
	if err != nil {
		e.removeDown(d)
		rl.reqDone(KindSubscribe, OutcomeRefused)
		return true
	}
	e.mu.Lock()
	d.ss = ss
	if g := r.Params.NewGroupRequest; g.Set && !waiter { // a waiter's went with the SUBSCRIBE
		e.newGroupLocked(g.Value)
	}
	dead := e.dead
	e.mu.Unlock()
	if dead { // ended while SUBSCRIBE_OK went: its End did not see ss
		_ = ss.End(wire.DoneInternalError, "publisher gone")
	}
	context.AfterFunc(ss.Context(), func() { e.removeDown(d) })
	rl.reqDone(KindSubscribe, OutcomeOK)
	rl.log.Debug("relay: subscribe", "event", "ok", "track", r.Track.String(), "forward", fwd)
	return true
}

// awaitForwardLocked waits, within Config.UpstreamTimeout, until an
// Established upstream is at Forward 1. While every upstream is at
// Forward 0 the publishers send nothing, so the track's Largest Object is
// stale; SUBSCRIBE_OK must report the current one (§9.20.18), which
// comes with the answer to the REQUEST_UPDATE that sets Forward 1
// (noteLargestLocked), and a Next Object filter resolves against it.
// e.mu is held, and released while waiting.
func (e *trackEntry) awaitForwardLocked(ctx context.Context) {
	t := time.NewTimer(e.rl.cfg.UpstreamTimeout)
	defer t.Stop()
	for !e.dead && !e.forwardingLocked() {
		if e.forwarding == nil {
			e.forwarding = make(chan struct{})
		}
		ch := e.forwarding
		e.mu.Unlock()
		select {
		case <-ch:
		case <-t.C:
			e.mu.Lock()
			return
		case <-ctx.Done():
			e.mu.Lock()
			return
		}
		e.mu.Lock()
	}
}

// forwardingLocked reports whether an Established upstream is at Forward
// 1, or none is Established (a SUBSCRIBE in flight carries Forward 1).
func (e *trackEntry) forwardingLocked() bool {
	established := false
	for u := range e.ups {
		if u.sub == nil || u.closing {
			continue
		}
		established = true
		if u.sent && !u.updating {
			return true
		}
	}
	return !established
}

// forwardChangedLocked wakes the SUBSCRIBEs waiting in awaitForwardLocked.
func (e *trackEntry) forwardChangedLocked() {
	if e.forwarding != nil {
		close(e.forwarding)
		e.forwarding = nil
	}
}

// downstreamUpdate applies a downstream REQUEST_UPDATE: its Forward state
// (§7.5) and NEW_GROUP_REQUEST (§9.20.20).
func (e *trackEntry) downstreamUpdate(d *downstream, p *wire.Params) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p.Forward.Set {
		d.forward = p.Forward.Value
		e.updateForwardLocked()
	}
	if g := p.NewGroupRequest; g.Set {
		e.newGroupLocked(g.Value)
	}
}

// removeDown forgets a downstream subscription that ended, counting it
// when the library cut it off as too far behind or past its session's
// backlog budget (not when the track ended).
func (e *trackEntry) removeDown(d *downstream) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var done *moqt.DoneError
	if _, ok := e.downs[d]; ok && !e.dead && d.ss != nil && errors.As(d.ss.Err(), &done) &&
		(done.Code == wire.DoneTooFarBehind || done.Code == wire.DoneExcessiveLoad) {
		e.rl.met.Dropped(DropSlowSubscriber, 1)
	}
	delete(e.downs, d)
	e.updateForwardLocked()
	e.checkIdleLocked()
}
