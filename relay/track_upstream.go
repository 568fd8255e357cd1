package relay

// A track's upstream side: its publishers, found or offered, and their
// subscriptions' lifetimes.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// addPublisher subscribes s to the track if it has downstream subscribers,
// held or Established, and no subscription to s yet: a publisher that
// appeared (§7.5).
func (e *trackEntry) addPublisher(s *moqt.Session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || len(e.downs)+e.waiters == 0 || e.hasUpstream(s) {
		return
	}
	e.startUpstream(s)
}

// hasUpstream reports whether s already serves or is asked for the track.
func (e *trackEntry) hasUpstream(s *moqt.Session) bool {
	for u := range e.ups {
		if u.s == s {
			return true
		}
	}
	return false
}

// publishedBy reports whether an Established upstream of the track came by
// PUBLISH (from s, or from anyone when s is nil).
func (e *trackEntry) publishedBy(s *moqt.Session) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || e.track == nil {
		return false
	}
	for u := range e.ups {
		if u.byPublish && u.sub != nil && (s == nil || u.s == s) {
			return true
		}
	}
	return false
}

// offeredLocked reports whether the track is offered by PUBLISH, or its
// PUBLISH is being accepted, and except (nil for none) is none of its
// publishers (see registry.countTracks).
func (e *trackEntry) offeredLocked(except *moqt.Session) bool {
	if e.dead {
		return false
	}
	offered := false
	for u := range e.ups {
		if u.sub == nil {
			continue
		}
		if u.s == except {
			return false
		}
		offered = offered || u.byPublish && e.track != nil
	}
	for s := range e.accepting {
		if s == except {
			return false
		}
		offered = true
	}
	return offered
}

// publishedLocked reports whether an Established upstream came by PUBLISH.
func (e *trackEntry) publishedLocked() bool {
	for u := range e.ups {
		if u.byPublish {
			return true
		}
	}
	return false
}

// startUpstream sends SUBSCRIBE to s for the track; e.mu is held.
func (e *trackEntry) startUpstream(s *moqt.Session) {
	reg := e.reg
	// From the Next Object, not unfiltered: a subgroup under way is then
	// complete from this subscription's start, and the publisher ends its
	// stream with a FIN rather than a reset for the objects before
	// (§11.3.2), which the relay could not tell from objects lost after.
	params := wire.Params{
		Forward:        wire.Some(e.wantForwardLocked()),
		LocationFilter: wire.Some(wire.NextObjectFilter()),
	}
	wait := reg.cfg.UpstreamTimeout
	if hold := reg.rendezvous(e.firstParams); hold > 0 {
		// A relay upstream holds it for its own publisher (§9.20.7).
		params.RendezvousTimeout = wire.Some(uint64(hold / time.Millisecond))
		wait += hold
	}
	ctx, cancel := context.WithTimeout(reg.ctx, wait)
	u := &upstream{e: e, s: s, cancel: cancel}
	e.ups[u] = struct{}{}
	u.sent = params.Forward.Value
	// No SUBSCRIBER_PRIORITY or GROUP_ORDER of a downstream's: every
	// upstream subscription gets the defaults (§5.1.3: relays SHOULD NOT
	// use them directly upstream).
	if g := e.waitNewGroup; g.Set { // §9.20.20: passed on when subscribing
		params.NewGroupRequest = g
		u.sentNewGroup = g
	}
	reg.log.Debug("relay: upstream", "event", "subscribe", "track", e.name.String(), "forward", u.sent)
	reg.goRun(func() {
		defer cancel()
		sub, err := s.Subscribe(ctx, e.name, params)
		if err != nil {
			e.upstreamFailed(u, err)
			return
		}
		e.upstreamEstablished(u, sub)
	})
}

// upstreamFailed handles a SUBSCRIBE the publisher refused or that failed:
// when no other publisher serves or may serve the track, the downstream
// SUBSCRIBEs waiting get the refusal.
func (e *trackEntry) upstreamFailed(u *upstream, err error) {
	reg := e.reg
	reg.log.Debug("relay: upstream", "event", "refused", "track", e.name.String(), "err", err)
	e.mu.Lock()
	delete(e.ups, u)
	if e.dead || len(e.ups) > 0 {
		e.mu.Unlock()
		return
	}
	if e.track == nil {
		e.err = requestErrorOf(err)
		close(e.ready)
		reg.dropLocked(e)
		e.mu.Unlock()
		return
	}
	// The track's Established publishers ended while this SUBSCRIBE was
	// in flight: it ends as the last of them did.
	track, code, reason := e.track, e.doneCode, e.doneReason
	if reason == "" {
		reason = "publisher gone"
	}
	e.keepEnded = keptEnd(code)
	reg.dropLocked(e)
	e.mu.Unlock()
	track.End(code, reason)
}

// upstreamEstablished makes the track available with its first Established
// upstream, and starts forwarding u's objects.
func (e *trackEntry) upstreamEstablished(u *upstream, sub *moqt.Subscription) {
	e.mu.Lock()
	if e.dead || u.closing {
		delete(e.ups, u)
		e.mu.Unlock()
		_ = sub.Close()
		return
	}
	u.sub = sub
	e.forwardChangedLocked()
	if e.track == nil && !e.makeTrackLocked(sub) {
		delete(e.ups, u)
		e.failLocked(&moqt.RequestError{Code: wire.ReqInternalError, Reason: "bad track properties upstream"})
		e.mu.Unlock()
		_ = sub.Close()
		return
	}
	l, hasLargest := sub.Largest()
	if hasLargest { // §9.20.18
		e.track.SetLargest(l)
	}
	if g := u.sentNewGroup; g.Set && !e.newGroup.Set {
		// The NEW_GROUP_REQUEST the SUBSCRIBE carried is outstanding:
		// the waiters' it covers are not sent again, those that came
		// while it was in flight are (acceptDown, newGroupLocked).
		e.newGroup, e.newGroupAt = g, l.Group
	}
	e.updateForwardLocked()
	e.checkIdleLocked()
	e.mu.Unlock()
	e.reg.log.Debug("relay: upstream", "event", "established", "track", e.name.String(), "by_publish", u.byPublish)
	e.reg.goRun(u.run)
	if !u.byPublish {
		e.reg.goRun(func() { e.followRequestGoaway(u, sub) }) // migrate.go
	}
}

// makeTrackLocked creates the LocalTrack with the Track Properties of sub,
// all of them (§7.6), and wakes the waiting SUBSCRIBEs.
func (e *trackEntry) makeTrackLocked(sub *moqt.Subscription) bool {
	t, err := moqt.NewLocalTrack(e.name, sub.Properties())
	if err != nil {
		return false
	}
	if !e.reg.cfg.NoCache {
		limits := e.reg.cfg.Cache
		if limits.Miss == nil {
			limits.Miss = e.reg.miss.fetchMiss(e.name) // what the cache lacks, fetched upstream (fetcher)
		}
		t.SetCache(limits)
	}
	e.track, e.props = t, sub.Properties()
	close(e.ready)
	// A new publisher's track replaces the one kept after its end, if
	// any: it may number its groups anew.
	e.reg.releaseEnded(e.name)
	return true
}

// upstreamEnded handles the end of an Established upstream subscription. A
// Malformed Track ends the track downstream with MALFORMED_TRACK (§12.1);
// the last publisher's PUBLISH_DONE ends it with the same status, or with
// INTERNAL_ERROR when data streams it counted never came or the status is
// about the relay's own subscription (relaysOwn); the end
// of a publisher's session with INTERNAL_ERROR. The track also ends when
// the publishers left are all behind it (restartedLocked).
func (e *trackEntry) upstreamEnded(u *upstream, err error) {
	reg := e.reg
	reg.log.Debug("relay: upstream", "event", "end", "track", e.name.String(), "err", err)
	var mal *moqt.MalformedTrackError
	malformed := errors.As(err, &mal)
	code, reason := wire.DoneInternalError, "publisher gone"
	var done *moqt.DoneError
	switch {
	case malformed:
		code, reason = wire.DoneMalformedTrack, "malformed track upstream"
	case errors.As(err, &done) && done.Missing > 0:
		// Whole streams never reached the relay: its subscribers, whose
		// Stream Count is what the relay sent, would not know the track
		// lacks them.
		code, reason = wire.DoneInternalError, fmt.Sprintf("%d of the publisher's %d data streams never reached the relay (it said %s: %s)",
			done.Missing, done.StreamCount, done.Code, done.Reason)
	case done != nil && relaysOwn(done.Code):
		// The code is about the relay's own subscription, not the track
		// (§12.4: TOO_FAR_BEHIND is the publisher's queue "to the given
		// subscriber"): passed on, it would tell each subscriber that it
		// fell behind, or that its update failed.
		code, reason = wire.DoneInternalError, fmt.Sprintf("the publisher ended the relay's own subscription (%s: %s)", done.Code, done.Reason)
	case done != nil:
		code, reason = done.Code, done.Reason
	}
	e.mu.Lock()
	delete(e.ups, u)
	if u.byPublish {
		reg.note.markTrack(e.name)
	}
	e.forwardChangedLocked()
	if e.dead || u.closing {
		e.mu.Unlock()
		return
	}
	restarted := false
	if !malformed && len(e.ups) > 0 && !(code == wire.DoneTrackEnded && !e.establishedLocked()) {
		// Another publisher may carry the track on, unless this one
		// ended it and the others' SUBSCRIBEs are still in flight: an
		// ended track has nothing more to carry, and a publisher that
		// never answers would hold its end for UpstreamTimeout.
		if !e.restartedLocked() {
			e.doneCode, e.doneReason = code, reason
			e.mu.Unlock()
			return
		}
		// Those left came back under the same name and number their
		// groups anew: the subscribers, whose filters start past their
		// objects, subscribe again and get them. One that said why it
		// ended (PUBLISH_DONE) keeps its reason. Its cache is not kept:
		// those publishers have the track now.
		if done == nil {
			reason = "publisher gone; its track restarted by another"
		}
		restarted = true
	}
	others := e.closeUpstreamsLocked()
	end := e.dropForEndLocked(code, reason, !restarted)
	e.mu.Unlock()
	closeAll(others)
	end()
}

// relaysOwn reports whether a PUBLISH_DONE code describes the relay's
// upstream subscription itself rather than the track: the relay's queue
// at the publisher, or the relay's REQUEST_UPDATE.
func relaysOwn(c wire.PublishDoneCode) bool {
	return c == wire.DoneTooFarBehind || c == wire.DoneUpdateFailed
}

// restartedLocked reports whether no publisher left has reached the
// track's Largest Group.
func (e *trackEntry) restartedLocked() bool {
	if e.track == nil {
		return false
	}
	largest, ok := e.track.Largest()
	if !ok {
		return false
	}
	for u := range e.ups {
		// One whose SUBSCRIBE is in flight may yet be in step.
		if u.closing || u.sub == nil || u.reachesLocked(largest.Group) {
			return false
		}
	}
	return true
}

// closeUpstreamsLocked marks every upstream as cancelled by the relay and
// returns them, to close once e.mu is released.
func (e *trackEntry) closeUpstreamsLocked() []*upstream {
	list := make([]*upstream, 0, len(e.ups))
	for u := range e.ups {
		u.closing = true
		list = append(list, u)
	}
	return list
}

// noteLargestLocked reports the publisher's Largest Object downstream, as
// REQUEST_UPDATE_OK carries it (§9.20.18).
func (e *trackEntry) noteLargestLocked(sub *moqt.Subscription) {
	if l, ok := sub.Largest(); ok && e.track != nil {
		e.track.SetLargest(l)
	}
}

// retryUpstream has the track ask Config.Upstream again when its
// SUBSCRIBEs are held for a publisher (RENDEZVOUS_TIMEOUT, §9.20.7), or,
// for an UpstreamSet, when it has subscribers, and Upstream may now serve
// it, and subscribes to what Upstream returns, as addPublisher does for an
// announcement (§7.5). One goroutine per track asks; a retry while it
// does has it ask again.
func (e *trackEntry) retryUpstream() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.retrying {
		e.retryAgain = true
		return
	}
	if !e.retryableLocked() {
		return
	}
	e.retrying = true
	e.reg.goRun(e.retryLoop)
}

// heldLocked reports whether the track's SUBSCRIBEs wait with no
// publisher found or asked.
func (e *trackEntry) heldLocked() bool {
	return !e.dead && e.track == nil && len(e.ups) == 0 && e.waiters > 0
}

// retryableLocked reports whether the track asks Config.Upstream again
// when it may serve it: held, or, for an UpstreamSet, carried for
// subscribers, since a set may have publishers the track has not asked.
func (e *trackEntry) retryableLocked() bool {
	if _, set := e.reg.cfg.Upstream.(UpstreamSet); set && !e.dead && e.track != nil && len(e.downs) > 0 {
		return true
	}
	return e.heldLocked()
}

func (e *trackEntry) retryLoop() {
	reg := e.reg
	e.mu.Lock()
	defer e.mu.Unlock()
	defer func() { e.retrying = false }()
	for {
		// A SUBSCRIBE or PUBLISH resolving the track may have asked
		// before Upstream changed: its answer first, then ask if still
		// held.
		for e.resolving != nil {
			ch := e.resolving
			e.mu.Unlock()
			select {
			case <-ch:
			case <-reg.ctx.Done():
			}
			e.mu.Lock()
			if reg.ctx.Err() != nil {
				return
			}
		}
		e.retryAgain = false
		if !e.retryableLocked() {
			return
		}
		asking := make([]*moqt.Session, 0, len(e.waiting)+len(e.downs))
		for s := range e.waiting {
			asking = append(asking, s)
		}
		for d := range e.downs {
			if e.waiting[d.s] == 0 {
				asking = append(asking, d.s)
			}
		}
		ch := make(chan struct{})
		e.resolving = ch // new SUBSCRIBEs wait for this answer
		e.mu.Unlock()
		pubs, err := reg.retryPublishers(asking, e.name)
		e.mu.Lock()
		e.resolving = nil
		close(ch)
		if err != nil {
			reg.log.Warn("relay: upstream", "event", "unavailable", "track", e.name.String(), "err", err)
		}
		if !e.dead && len(e.downs)+e.waiters > 0 {
			for _, s := range pubs {
				if !e.hasUpstream(s) {
					e.startUpstream(s)
				}
			}
		}
		e.checkIdleLocked() // its SUBSCRIBEs may have left meanwhile
		if !e.retryAgain {
			return
		}
	}
}
