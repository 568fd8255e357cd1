package relay

import (
	"github.com/moqt-go/moqt"
)

// Following an upstream's GOAWAY (§6.6.1, §9.2). A session that
// Config.Upstream returned and that the upstream sends GOAWAY on goes on
// carrying its tracks' objects while the upstream drains it. Meanwhile each
// track it serves is subscribed again through the session Config.Upstream
// returns now (a Dialer's next one, at the GOAWAY's New Session URI), so
// that the track's subscribers see no end: for a while both subscriptions
// deliver the same objects, of which the track forwards each once (dedup.go),
// and the old one's end is not the track's while the new one serves it
// (upstreamEnded).

// followGoaway waits for GOAWAY on s, a session Config.Upstream returned,
// and then subscribes again, elsewhere, to every track s serves.
func (reg *registry) followGoaway(s *moqt.Session) {
	select {
	case <-s.GoingAway():
	case <-s.Context().Done():
		return
	case <-reg.ctx.Done():
		return
	}
	tracks := reg.servedBy(s)
	reg.log.Info("relay: upstream", "event", "goaway", "uri", s.GoawayURI(), "tracks", len(tracks))
	for _, e := range tracks {
		reg.resubscribe(e, s)
	}
}

// servedBy returns the tracks that the relay subscribed to on s.
func (reg *registry) servedBy(s *moqt.Session) []*trackEntry {
	reg.mu.Lock()
	all := make([]*trackEntry, 0, len(reg.tracks))
	for _, e := range reg.tracks {
		all = append(all, e)
	}
	reg.mu.Unlock()
	var out []*trackEntry
	for _, e := range all {
		e.mu.Lock()
		for u := range e.ups {
			if u.s == s && !u.byPublish && !u.closing {
				out = append(out, e)
				break
			}
		}
		e.mu.Unlock()
	}
	return out
}

// resubscribe asks Config.Upstream again for e's publishers, on behalf of
// one of its subscribers, and subscribes to those it does not have yet,
// other than old and any other session going away.
func (reg *registry) resubscribe(e *trackEntry, old *moqt.Session) {
	e.mu.Lock()
	var asker *moqt.Session
	for d := range e.downs {
		asker = d.s
		break
	}
	e.mu.Unlock()
	pubs, err := reg.withUpstream(withRequest(reg.ctx, asker, e.name), e.name.Namespace, nil)
	if err != nil {
		reg.log.Warn("relay: upstream", "event", "goaway_unfollowed", "track", e.name.String(), "err", err)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return
	}
	for _, s := range pubs {
		if s != old && !goingAway(s) && !e.hasUpstream(s) {
			e.startUpstream(s)
		}
	}
}

// followRequestGoaway waits for the publisher's GOAWAY on sub, u's
// subscription (§9.2: migrate that request alone), then issues the
// SUBSCRIBE again: on the same session when the GOAWAY names no URI. With
// a URI, the relay's Upstream decides where it subscribes: it is asked
// again, as for a session's GOAWAY. The old subscription goes on until the
// publisher ends it, its objects forwarded once with the new one's
// (dedup.go): cancelled at once, it would drop those still on their way.
func (e *trackEntry) followRequestGoaway(u *upstream, sub *moqt.Subscription) {
	select {
	case <-sub.GoingAway():
	case <-sub.Done():
		return
	case <-e.reg.ctx.Done():
		return
	}
	uri := sub.GoawayURI()
	e.reg.log.Info("relay: upstream", "event", "request_goaway", "track", e.name.String(), "uri", uri)
	if uri != "" {
		e.reg.resubscribe(e, u.s)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead || u.closing {
		return
	}
	if e.upstreamsOnLocked(u.s) >= maxUpstreamsPerSession {
		// A publisher that sends GOAWAY on every SUBSCRIBE at once would
		// otherwise have the relay subscribe without end.
		e.reg.log.Warn("relay: upstream", "event", "goaway_unfollowed", "track", e.name.String(),
			"err", "subscribed to that publisher twice already")
		return
	}
	e.startUpstream(u.s)
}

// maxUpstreamsPerSession bounds a track's subscriptions to one session: the
// one a request's GOAWAY moves and the one issued again.
const maxUpstreamsPerSession = 2

// upstreamsOnLocked counts the track's subscriptions to s.
func (e *trackEntry) upstreamsOnLocked(s *moqt.Session) int {
	n := 0
	for u := range e.ups {
		if u.s == s && !u.closing {
			n++
		}
	}
	return n
}
