package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// upstream is one subscription of the relay to one publisher of a track:
// made with SUBSCRIBE, or offered by the publisher with PUBLISH.
type upstream struct {
	e         *trackEntry
	s         *moqt.Session
	byPublish bool
	// sub is set once the subscription is Established; cancel ends the
	// SUBSCRIBE while it is in flight.
	sub    *moqt.Subscription
	cancel context.CancelFunc
	// sent is the Forward state the publisher has; updating is set while
	// a goroutine brings it to what the track wants.
	sent     bool
	updating bool
	// closing: the relay cancels it; its end is not the track's.
	closing bool
	// newGroup is a NEW_GROUP_REQUEST to send; newGroupBusy is set while a
	// goroutine sends them, one REQUEST_UPDATE at a time.
	newGroup     wire.Opt[uint64]
	newGroupBusy bool
	// group is one more than the largest Group ID the publisher sent a
	// subgroup or datagram of; 0 for none yet (aheadOf).
	group atomic.Uint64
}

// noteGroup records that the publisher sent objects of group g.
func (u *upstream) noteGroup(g uint64) {
	for {
		cur := u.group.Load()
		if g < cur || u.group.CompareAndSwap(cur, g+1) {
			return
		}
	}
}

// reachesLocked reports whether u's publisher has reached group g: it
// reported or sent a Location in it or past it. A publisher that restarted
// and numbers its groups from scratch has not: the track's subscribers,
// whose filters start past its objects, would get nothing from it.
func (u *upstream) reachesLocked(g uint64) bool {
	if n := u.group.Load(); n > g {
		return true
	}
	if u.sub != nil {
		if l, ok := u.sub.Largest(); ok && l.Group >= g {
			return true
		}
	}
	return false
}

// startUpstream sends SUBSCRIBE to s for the track; e.mu is held.
func (e *trackEntry) startUpstream(s *moqt.Session) {
	rl := e.rl
	params := wire.Params{Forward: wire.Some(e.wantForwardLocked())}
	wait := rl.cfg.UpstreamTimeout
	if hold := rl.rendezvous(e.firstParams); hold > 0 {
		// A relay upstream holds it for its own publisher (§9.20.7).
		params.RendezvousTimeout = wire.Some(uint64(hold / time.Millisecond))
		wait += hold
	}
	ctx, cancel := context.WithTimeout(rl.ctx, wait)
	u := &upstream{e: e, s: s, cancel: cancel}
	e.ups[u] = struct{}{}
	u.sent = params.Forward.Value
	if p := e.firstParams.SubscriberPriority; p.Set {
		params.SubscriberPriority = p
	}
	if g := e.waitNewGroup; g.Set { // §9.20.20: passed on when subscribing
		params.NewGroupRequest = g
	}
	rl.log.Debug("relay: upstream", "event", "subscribe", "track", e.name.String(), "forward", u.sent)
	rl.goRun(func() {
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
	rl := e.rl
	rl.log.Debug("relay: upstream", "event", "refused", "track", e.name.String(), "err", err)
	e.mu.Lock()
	delete(e.ups, u)
	if e.dead || len(e.ups) > 0 {
		e.mu.Unlock()
		return
	}
	if e.track == nil {
		e.err = requestErrorOf(err)
		close(e.ready)
		rl.dropLocked(e)
		e.mu.Unlock()
		return
	}
	// The track's Established publishers ended while this SUBSCRIBE was
	// in flight: it ends as the last of them did.
	track, code, reason := e.track, e.doneCode, e.doneReason
	if reason == "" {
		reason = "publisher gone"
	}
	rl.dropLocked(e)
	e.mu.Unlock()
	track.End(code, reason)
}

// requestErrorOf is the REQUEST_ERROR to pass downstream for an upstream
// failure: the upstream's own code, TIMEOUT for no answer in time,
// INTERNAL_ERROR for the rest (a session that ended, say).
func requestErrorOf(err error) *moqt.RequestError {
	var re *moqt.RequestError
	switch {
	case errors.As(err, &re):
		return &moqt.RequestError{Code: re.Code, Reason: re.Reason}
	case errors.Is(err, context.DeadlineExceeded):
		return &moqt.RequestError{Code: wire.ReqTimeout, Reason: "upstream did not answer"}
	}
	return &moqt.RequestError{Code: wire.ReqInternalError, Reason: "upstream: " + err.Error()}
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
	if l, ok := sub.Largest(); ok { // §9.20.18
		e.track.SetLargest(l)
	}
	e.updateForwardLocked()
	e.checkIdleLocked()
	e.mu.Unlock()
	e.rl.log.Debug("relay: upstream", "event", "established", "track", e.name.String(), "by_publish", u.byPublish)
	e.rl.goRun(u.run)
}

// makeTrackLocked creates the LocalTrack with the Track Properties of sub,
// all of them (§7.6), and wakes the waiting SUBSCRIBEs.
func (e *trackEntry) makeTrackLocked(sub *moqt.Subscription) bool {
	t, err := moqt.NewLocalTrack(e.name, sub.Properties())
	if err != nil {
		return false
	}
	if !e.rl.cfg.NoCache {
		limits := e.rl.cfg.Cache
		if limits.Miss == nil {
			limits.Miss = e.rl.fetch.fetchMiss(e.name) // what the cache lacks, fetched upstream (fetch.go)
		}
		t.SetCache(limits)
	}
	e.track, e.props = t, sub.Properties()
	close(e.ready)
	return true
}

// errDropped marks a track dropped before it was available: its waiters
// route their SUBSCRIBE again.
var errDropped = &moqt.RequestError{Code: wire.ReqInternalError, Reason: "track dropped"}

// failLocked ends a track that was never available with err.
func (e *trackEntry) failLocked(err *moqt.RequestError) {
	if e.track == nil && e.err == nil {
		e.err = err
		close(e.ready)
	}
	e.rl.dropLocked(e)
}

// run forwards u's subgroups and datagrams until the subscription ends, then
// ends the track downstream if u was its last publisher.
func (u *upstream) run() {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		u.e.out.datagrams(u)
	}()
	for {
		r, err := u.sub.AcceptSubgroup(context.Background())
		if err != nil {
			break
		}
		u.noteGroup(r.Header().GroupID)
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.e.out.subgroup(r)
		}()
	}
	wg.Wait()
	if n := u.sub.DroppedDatagrams(); n > 0 {
		u.e.rl.met.Dropped(DropDatagramQueue, int(n))
	}
	u.e.upstreamEnded(u, u.sub.Err())
}

// upstreamEnded handles the end of an Established upstream subscription. A
// Malformed Track ends the track downstream with MALFORMED_TRACK (§12.1);
// the last publisher's PUBLISH_DONE ends it with the same status; the end
// of a publisher's session with INTERNAL_ERROR. The track also ends when
// the publishers left are all behind it (restartedLocked).
func (e *trackEntry) upstreamEnded(u *upstream, err error) {
	rl := e.rl
	rl.log.Debug("relay: upstream", "event", "end", "track", e.name.String(), "err", err)
	var mal *moqt.MalformedTrackError
	malformed := errors.As(err, &mal)
	code, reason := wire.DoneInternalError, "publisher gone"
	var done *moqt.DoneError
	switch {
	case malformed:
		code, reason = wire.DoneMalformedTrack, "malformed track upstream"
	case errors.As(err, &done):
		code, reason = done.Code, done.Reason
	}
	e.mu.Lock()
	delete(e.ups, u)
	e.forwardChangedLocked()
	if e.dead || u.closing {
		e.mu.Unlock()
		return
	}
	if !malformed && len(e.ups) > 0 {
		if !e.restartedLocked() {
			e.doneCode, e.doneReason = code, reason
			e.mu.Unlock()
			return
		}
		// Those left came back under the same name and number their
		// groups anew: the subscribers, whose filters start past their
		// objects, subscribe again and get them.
		reason = "publisher gone; its track restarted by another"
	}
	others := e.closeUpstreamsLocked()
	track := e.track
	rl.dropLocked(e)
	e.mu.Unlock()
	closeAll(others)
	if track != nil {
		track.End(code, reason)
	}
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

// closeAll cancels the upstream subscriptions.
func closeAll(list []*upstream) {
	for _, u := range list {
		if u.sub != nil {
			_ = u.sub.Close()
		} else {
			u.cancel()
		}
	}
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
			e.rl.goRun(u.pushForward)
		}
	}
}

// pushForward sends REQUEST_UPDATEs until the publisher's Forward state is
// what the track wants. A refused update ends the subscription
// (UPDATE_FAILED), which run then sees.
func (u *upstream) pushForward() {
	e, rl := u.e, u.e.rl
	for {
		e.mu.Lock()
		want := e.wantForwardLocked()
		if e.dead || u.closing || u.sent == want {
			u.updating = false
			e.forwardChangedLocked()
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		err := u.update(wire.Params{Forward: wire.Some(want)})
		e.mu.Lock()
		if err != nil {
			u.updating = false
			e.forwardChangedLocked()
			e.mu.Unlock()
			rl.log.Warn("relay: upstream", "event", "update_failed", "track", e.name.String(), "err", err)
			return
		}
		u.sent = want
		e.forwardChangedLocked()
		e.mu.Unlock()
	}
}

// update sends p to the publisher with REQUEST_UPDATE, within
// UpstreamTimeout, and reports the LARGEST_OBJECT of its answer downstream.
func (u *upstream) update(p wire.Params) error {
	e := u.e
	ctx, cancel := context.WithTimeout(e.rl.ctx, e.rl.cfg.UpstreamTimeout)
	err := u.sub.Update(ctx, p)
	cancel()
	if err == nil {
		e.mu.Lock()
		e.noteLargestLocked(u.sub)
		e.mu.Unlock()
	}
	return err
}

// noteLargestLocked reports the publisher's Largest Object downstream, as
// REQUEST_UPDATE_OK carries it (§9.20.18).
func (e *trackEntry) noteLargestLocked(sub *moqt.Subscription) {
	if l, ok := sub.Largest(); ok && e.track != nil {
		e.track.SetLargest(l)
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
			e.rl.goRun(u.pushNewGroup)
		}
	}
}

// pushNewGroup sends u's NEW_GROUP_REQUESTs, one REQUEST_UPDATE at a time,
// so that a subscriber sending many costs one goroutine per publisher.
func (u *upstream) pushNewGroup() {
	e := u.e
	for {
		e.mu.Lock()
		v := u.newGroup
		u.newGroup = wire.Opt[uint64]{}
		if !v.Set || e.dead || u.closing {
			u.newGroupBusy = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		_ = u.update(wire.Params{NewGroupRequest: v}) // a refusal ends the subscription, which run sees
	}
}

// dynamicGroups reports whether props have DYNAMIC_GROUPS = 1.
func dynamicGroups(props wire.KVList) bool {
	kv, ok := props.Get(wire.PropDynamicGroups)
	return ok && kv.Value == 1
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
	if len(e.ups) == 0 || e.rl.cfg.Linger <= 0 {
		e.teardownLocked()
		return
	}
	if e.linger == nil {
		e.linger = time.AfterFunc(e.rl.cfg.Linger, e.lingerDone)
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
	e.rl.dropLocked(e)
	e.rl.log.Debug("relay: track", "event", "idle", "track", e.name.String())
	e.rl.goRun(func() { closeAll(ups) }) // network writes, not under e.mu
}

// shutdown ends the track for Relay.Close.
func (e *trackEntry) shutdown(code wire.PublishDoneCode, reason string) {
	e.mu.Lock()
	if e.dead {
		e.mu.Unlock()
		return
	}
	ups := e.closeUpstreamsLocked()
	track := e.track
	if track == nil {
		e.failLocked(&moqt.RequestError{Code: wire.ReqGoingAway, Reason: reason})
	} else {
		e.rl.dropLocked(e)
	}
	e.mu.Unlock()
	closeAll(ups)
	if track != nil {
		track.End(code, reason)
	}
}
