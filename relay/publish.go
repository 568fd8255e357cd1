package relay

import (
	"context"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// servePublish accepts a publisher's PUBLISH (§7.5): the track becomes
// available, or gains a publisher, and its downstream subscribers' Forward
// state goes upstream with REQUEST_UPDATE.
func (rl *Relay) servePublish(r *moqt.PublishRequest) {
	sub, err := r.Accept(wire.Params{})
	if err != nil {
		rl.reqDone(KindPublish, OutcomeRefused)
		return
	}
	rl.reqDone(KindPublish, OutcomeOK)
	rl.log.Debug("relay: publish", "event", "ok", "track", r.Track.String())
	for {
		e := rl.entry(r.Track)
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
		rl.goRun(u.run)
		if newly {
			name := e.name
			rl.goRun(func() {
				skip := func(s *moqt.Session) bool { return exclude[s] }
				if rl.trackPublishedHook != nil {
					rl.trackPublishedHook(name, skip)
				}
				rl.ns.onTrackPublished(name, skip)
			})
		}
		return
	}
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

// publishDownstream offers the relay's track name to s with PUBLISH (see
// the contract in relay.go), as a result of a SUBSCRIBE_TRACKS whose
// parameters are req: LocalTrack.PublishTracks sends those PUBLISH
// carries and applies the object Range filters and INCLUDE_PROPERTIES
// itself, and a NEW_GROUP_REQUEST goes upstream as a SUBSCRIBE's would
// for a track with an Established upstream (§9.20.20), once the
// subscriber has taken the PUBLISH.
func (rl *Relay) publishDownstream(ctx context.Context, s *moqt.Session, name wire.FullTrackName, req wire.Params) (*moqt.ServedSubscription, error) {
	gone := &moqt.RequestError{Code: wire.ReqDoesNotExist, Reason: "track not available"}
	e := rl.lookup(name)
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
