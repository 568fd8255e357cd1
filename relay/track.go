package relay

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// trackEntry is the relay's state for one Full Track Name: the LocalTrack
// that serves its downstream subscribers, its upstream subscriptions (one per
// publisher), and what keeps it alive. Its own methods are in track.go
// (downstream side, Forward state, lifetime) and track_upstream.go (its
// publishers); mu guards what follows it (lock order: relay.go).
type trackEntry struct {
	reg  *registry
	name wire.FullTrackName
	key  wire.TrackKey

	mu sync.Mutex
	// track is set when the first upstream subscription is Established,
	// with its Track Properties, and ready closed then. A track whose
	// attempts all failed closes ready with err set and leaves the
	// registry.
	track *moqt.LocalTrack
	props wire.KVList
	ready chan struct{}
	err   *moqt.RequestError
	// resolving is non-nil while a SUBSCRIBE looks for the track's
	// publishers; others wait for it rather than ask again.
	resolving chan struct{}
	ups       map[*upstream]struct{}
	downs     map[*downstream]struct{}
	// waiters are downstream SUBSCRIBEs waiting for ready; waitForward of
	// them have Forward 1, waiting counts them per session.
	waiters     int
	waitForward int
	waiting     map[*moqt.Session]int
	// joining counts the waiters being answered (acceptDown); joined is
	// closed once waiters and joining are both 0 (awaitJoined).
	joining int
	joined  chan struct{}
	// accepting counts, per session, the PUBLISHes for the track that
	// servePublish accepts: from before their PUBLISH_OK until they are
	// among ups. Namespace limits count them (offeredLocked).
	accepting map[*moqt.Session]int
	// newGroup is the outstanding NEW_GROUP_REQUEST sent upstream and the
	// Largest Group when it was sent (§9.20.20).
	newGroup   wire.Opt[uint64]
	newGroupAt uint64
	// doneCode and doneReason are how the last publisher that left ended,
	// for the track's end should the others fail.
	doneCode   wire.PublishDoneCode
	doneReason string
	linger     *time.Timer
	dead       bool
	// keepCache has dropLocked leave the cache to shutdown, which drops
	// it once the track's End has reset what it serves.
	keepCache bool
	// keepEnded has dropLocked keep the track, which its publishers
	// ended, among the registry's ended tracks (Config.KeepEnded).
	keepEnded bool
	// forwarding is closed, and replaced, whenever an Established
	// upstream's Forward state or the set of upstreams changes: a
	// SUBSCRIBE waits on it for an upstream at Forward 1, whose Largest
	// Object is current (acceptDown).
	forwarding chan struct{}
	out        outputs
	// firstParams is the first waiter's SUBSCRIBE, shaping the upstream
	// ones; waitNewGroup a NEW_GROUP_REQUEST of a waiter, passed on.
	firstParams  wire.Params
	waitNewGroup wire.Opt[uint64]
	// opener is the session whose SUBSCRIBE first asked the publishers
	// for the track; the track counts against its MaxSessionTracks.
	opener *sessionState
	// retrying is set while a goroutine asks Config.Upstream again for
	// the held SUBSCRIBEs (retryUpstream); retryAgain when it is to ask
	// once more, Upstream having changed since it asked.
	retrying   bool
	retryAgain bool
}

// downstream is one subscription the track serves.
type downstream struct {
	ss *moqt.ServedSubscription
	s  *moqt.Session
	// forward is its Forward state: as its SUBSCRIBE and REQUEST_UPDATEs
	// set it, or the PUBLISH's for one the relay offered.
	forward bool
}

// errDropped marks a track dropped before it was available: its waiters
// route their SUBSCRIBE again.
var errDropped = &moqt.RequestError{Code: wire.ReqInternalError, Reason: "track dropped"}

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
	e.joinedLocked()
}

// joinWait bounds how long an Established upstream's objects wait for the
// SUBSCRIBEs that waited for it to join the track (awaitJoined).
const joinWait = time.Second

// joinedLocked wakes awaitJoined once no waiter is left to join.
func (e *trackEntry) joinedLocked() {
	if e.waiters+e.joining == 0 && e.joined != nil {
		close(e.joined)
		e.joined = nil
	}
}

// awaitJoined waits, within joinWait, until the SUBSCRIBEs that waited for
// an upstream have joined the track (acceptDown) or left: an upstream's
// objects are forwarded only then, so that a subscriber who asked before
// the first object arrived gets it, whatever the goroutines' order (on
// draft 18 no LARGEST_OBJECT tells it what it missed).
func (e *trackEntry) awaitJoined() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.waitLocked(context.Background(), joinWait, &e.joined, func() bool { return e.waiters+e.joining == 0 })
}

// awaitUpstreamLocked waits, within Config.UpstreamTimeout, until an
// upstream is Established, as SUBSCRIBE_OK needs (§7.4): the last one may
// have ended while another's SUBSCRIBE is in flight. With fwd it also
// waits until an Established upstream is at Forward 1. While every
// upstream is at Forward 0 the publishers send nothing, so the track's
// Largest Object is stale; SUBSCRIBE_OK must report the current one
// (§9.20.18), which comes with the answer to the REQUEST_UPDATE that sets
// Forward 1 (noteLargestLocked), and a Next Object filter resolves against
// it. e.mu is held, and released while waiting.
func (e *trackEntry) awaitUpstreamLocked(ctx context.Context, fwd bool) {
	e.waitLocked(ctx, e.reg.cfg.UpstreamTimeout, &e.forwarding, func() bool {
		return e.establishedLocked() && (!fwd || e.forwardingLocked())
	})
}

// waitLocked waits, within d and ctx, until e is dead or done reports
// true, looking again each time *sig (made here on demand) is closed by
// whoever changes what done reads. e.mu is held, and released while
// waiting.
func (e *trackEntry) waitLocked(ctx context.Context, d time.Duration, sig *chan struct{}, done func() bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for !e.dead && !done() {
		if *sig == nil {
			*sig = make(chan struct{})
		}
		ch := *sig
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

// establishedLocked reports whether an upstream subscription is
// Established and not being closed.
func (e *trackEntry) establishedLocked() bool {
	for u := range e.ups {
		if u.sub != nil && !u.closing {
			return true
		}
	}
	return false
}

// establishedSessionsLocked returns the sessions of the Established
// upstreams that are not being closed.
func (e *trackEntry) establishedSessionsLocked() []*moqt.Session {
	var out []*moqt.Session
	for u := range e.ups {
		if u.sub != nil && !u.closing {
			out = append(out, u.s)
		}
	}
	return out
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

// forwardChangedLocked wakes the SUBSCRIBEs waiting in awaitUpstreamLocked.
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
		e.reg.met.Dropped(DropSlowSubscriber, 1)
	}
	delete(e.downs, d)
	e.updateForwardLocked()
	e.checkIdleLocked()
}

// wantForwardLocked reports whether any downstream subscriber, waiting or
// Established, has Forward 1: the upstream Forward state (§7.2). With
// none, the relay asks for nothing, to spare the publishers.
func (e *trackEntry) wantForwardLocked() bool {
	if e.waitForward > 0 {
		return true
	}
	for d := range e.downs {
		if d.forward {
			return true
		}
	}
	return false
}

// updateForwardLocked brings every Established upstream to the Forward
// state the track wants, with REQUEST_UPDATE (§7.5).
func (e *trackEntry) updateForwardLocked() {
	want := e.wantForwardLocked()
	for u := range e.ups {
		if u.sub != nil && !u.closing && u.sent != want && !u.updating {
			u.updating = true
			e.reg.goRun(u.pushForward)
		}
	}
}

// newGroupLocked passes a downstream NEW_GROUP_REQUEST of value v on to
// every Established publisher (§9.20.20): unless the track has no dynamic
// groups, v names a group it already has, or one sent before and still
// outstanding has a value as large.
func (e *trackEntry) newGroupLocked(v uint64) {
	if e.track == nil || !dynamicGroups(e.props) {
		return
	}
	largest, has := e.track.Largest()
	if v != 0 && has && v <= largest.Group {
		return
	}
	if e.newGroup.Set && (!has || largest.Group <= e.newGroupAt) && (e.newGroup.Value == 0 || e.newGroup.Value >= v) {
		return
	}
	e.newGroup, e.newGroupAt = wire.Some(v), largest.Group
	for u := range e.ups {
		if u.sub == nil || u.closing {
			continue
		}
		// The latest value replaces one not sent yet: it is larger, or
		// the Largest Group grew since (§9.20.20).
		u.newGroup = wire.Some(v)
		if !u.newGroupBusy {
			u.newGroupBusy = true
			e.reg.goRun(u.pushNewGroup)
		}
	}
}

// checkIdleLocked starts the linger of a track no downstream subscriber
// wants any more, after which its upstream subscriptions are cancelled and
// it leaves the registry. A track a publisher offered by PUBLISH stays: it
// is available without subscribers (its Forward state then 0).
func (e *trackEntry) checkIdleLocked() {
	if e.dead {
		return
	}
	if len(e.downs) > 0 || e.waiters > 0 || e.resolving != nil {
		e.stopLingerLocked()
		return
	}
	for u := range e.ups {
		if u.byPublish {
			return
		}
	}
	if len(e.ups) == 0 || e.reg.cfg.Linger <= 0 {
		e.teardownLocked()
		return
	}
	if e.linger == nil {
		e.linger = time.AfterFunc(e.reg.cfg.Linger, e.lingerDone)
	}
}

func (e *trackEntry) stopLingerLocked() {
	if e.linger != nil {
		e.linger.Stop()
		e.linger = nil
	}
}

// lingerDone ends a track still idle when its linger ran out.
func (e *trackEntry) lingerDone() {
	e.mu.Lock()
	if e.linger == nil || e.dead { // stopped meanwhile
		e.mu.Unlock()
		return
	}
	e.linger = nil
	if len(e.downs) > 0 || e.waiters > 0 {
		e.mu.Unlock()
		return
	}
	e.teardownLocked()
	e.mu.Unlock()
}

// teardownLocked drops an idle track and cancels its upstreams.
func (e *trackEntry) teardownLocked() {
	ups := e.closeUpstreamsLocked()
	if e.track == nil && e.err == nil {
		e.err = errDropped
		close(e.ready)
	}
	e.reg.dropLocked(e)
	e.reg.log.Debug("relay: track", "event", "idle", "track", e.name.String())
	e.reg.goRun(func() { closeAll(ups) }) // network writes, not under e.mu
}

// failLocked ends a track that was never available with err.
func (e *trackEntry) failLocked(err *moqt.RequestError) {
	if e.track == nil && e.err == nil {
		e.err = err
		close(e.ready)
	}
	e.reg.dropLocked(e)
}

// shutdown ends the track for Relay.Close.
func (e *trackEntry) shutdown(code wire.PublishDoneCode, reason string) {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return
	}
	ups := e.closeUpstreamsLocked()
	end := func() {}
	if e.track == nil {
		e.failLocked(&moqt.RequestError{Code: wire.ReqGoingAway, Reason: reason})
	} else {
		end = e.dropForEndLocked(code, reason, false)
	}
	e.mu.Unlock()
	closeAll(ups)
	end()
}

// dropForEndLocked drops e, whose track ends with code, from the registry
// and returns what ends the track, to call once e.mu is released. A
// Malformed Track's End resets the FETCHes its cache serves (§12.1), so
// its cache goes only after that End, or they would end with a FIN over
// what the cache held. With keep, the track's publishers having ended it,
// its cache is kept for FETCH and TRACK_STATUS (Config.KeepEnded) unless
// code forbids (keptEnd). e.mu is held.
func (e *trackEntry) dropForEndLocked(code wire.PublishDoneCode, reason string, keep bool) func() {
	track := e.track
	malformed := code == wire.DoneMalformedTrack
	e.keepCache = malformed
	e.keepEnded = keep && keptEnd(code)
	e.reg.dropLocked(e)
	return func() {
		if track == nil {
			return
		}
		track.End(code, reason)
		if malformed && !e.reg.cfg.NoCache {
			track.SetCache(moqt.CacheLimits{})
		}
	}
}
