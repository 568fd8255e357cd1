package relay

import (
	"context"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// trackEntry is the relay's state for one Full Track Name: the LocalTrack
// that serves its downstream subscribers, its upstream subscriptions (one per
// publisher), and what keeps it alive. Locks: trackEntry.mu before Relay.mu
// (Relay.mu is never held while taking an entry's); neither is held across
// network I/O.
type trackEntry struct {
	rl   *Relay
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
}

// downstream is one subscription the track serves.
type downstream struct {
	ss *moqt.ServedSubscription
	s  *moqt.Session
	// forward is its Forward state: as its SUBSCRIBE and REQUEST_UPDATEs
	// set it, or the PUBLISH's for one the relay offered.
	forward bool
}

// sessionState is what the relay keeps of a session it serves.
type sessionState struct {
	upstream bool // as counted by Metrics
	anns     map[*announcer]struct{}
	opened   int  // tracks it opened (trackEntry.opener), on Relay.mu
	dialed   bool // Config.Upstream returned it, on Relay.mu
	held     int  // its rendezvous SUBSCRIBEs waiting, on Relay.mu
}

// announcer is a session's accepted PUBLISH_NAMESPACE.
type announcer struct {
	s  *moqt.Session
	ns wire.Namespace
}

// entry returns the registry's entry for name, made if absent; nil when the
// relay is closed.
func (rl *Relay) entry(name wire.FullTrackName) *trackEntry {
	key := name.Key()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.closed {
		return nil
	}
	if e := rl.tracks[key]; e != nil {
		return e
	}
	e := &trackEntry{
		rl: rl, name: cloneName(name), key: key,
		ready:   make(chan struct{}),
		ups:     map[*upstream]struct{}{},
		downs:   map[*downstream]struct{}{},
		waiting: map[*moqt.Session]int{},
	}
	e.out.init(e)
	rl.tracks[key] = e
	return e
}

// lookup returns name's entry, or nil.
func (rl *Relay) lookup(name wire.FullTrackName) *trackEntry {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.tracks[name.Key()]
}

// cloneName copies name, whose bytes may alias a request's message.
func cloneName(name wire.FullTrackName) wire.FullTrackName {
	ns := make(wire.Namespace, len(name.Namespace))
	for i, f := range name.Namespace {
		ns[i] = append([]byte(nil), f...)
	}
	return wire.FullTrackName{Namespace: ns, Name: append([]byte(nil), name.Name...)}
}

// watchSession registers s on its first request, so that its end takes its
// announcements with it; false when the relay is closed.
func (rl *Relay) watchSession(s *moqt.Session) bool {
	return rl.watch(s, false) != nil
}

// watch registers s and returns its state; nil when the relay is closed.
func (rl *Relay) watch(s *moqt.Session, upstream bool) *sessionState {
	rl.mu.Lock()
	if rl.closed {
		rl.mu.Unlock()
		return nil
	}
	if st := rl.sessions[s]; st != nil {
		// A dialed session's first request may come before Upstream
		// returned it: it is an upstream all the same.
		st.dialed = st.dialed || upstream
		rl.mu.Unlock()
		return st
	}
	st := &sessionState{upstream: upstream, dialed: upstream, anns: map[*announcer]struct{}{}}
	rl.sessions[s] = st
	rl.mu.Unlock()
	rl.met.SessionStarted(upstream)
	rl.log.Debug("relay: session", "event", "start", "upstream", upstream, "path", s.Path(), "authority", s.Authority())
	context.AfterFunc(s.Context(), func() { rl.sessionEnded(s, st) })
	return st
}

// sessionEnded drops what s left: its announcements. Its subscriptions,
// upstream and downstream, end by themselves with it.
func (rl *Relay) sessionEnded(s *moqt.Session, st *sessionState) {
	rl.mu.Lock()
	delete(rl.sessions, s)
	for a := range st.anns {
		delete(rl.anns, a)
	}
	clear(st.anns)
	rl.mu.Unlock()
	rl.met.SessionEnded(st.upstream)
	rl.log.Debug("relay: session", "event", "end", "upstream", st.upstream, "cause", context.Cause(s.Context()))
}

// addAnnouncer registers s as a publisher of ns (trackRegistry).
func (rl *Relay) addAnnouncer(s *moqt.Session, ns wire.Namespace) (remove func()) {
	st := rl.watch(s, false)
	if st == nil {
		return func() {}
	}
	a := &announcer{s: s, ns: cloneName(wire.FullTrackName{Namespace: ns}).Namespace}
	rl.mu.Lock()
	if s.Context().Err() != nil || rl.closed {
		rl.mu.Unlock()
		return func() {}
	}
	rl.anns[a] = struct{}{}
	st.anns[a] = struct{}{}
	var matching []*trackEntry
	for _, e := range rl.tracks {
		if e.name.Namespace.HasPrefix(a.ns) {
			matching = append(matching, e)
		}
	}
	rl.mu.Unlock()
	for _, e := range matching {
		e.addPublisher(s)
	}
	return func() {
		rl.mu.Lock()
		delete(rl.anns, a)
		delete(st.anns, a)
		rl.mu.Unlock()
	}
}

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

// announcersOf returns the sessions that announced a prefix of ns.
func (rl *Relay) announcersOf(ns wire.Namespace) []*moqt.Session {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	var out []*moqt.Session
	for a := range rl.anns {
		if ns.HasPrefix(a.ns) && !containsSession(out, a.s) {
			out = append(out, a.s)
		}
	}
	return out
}

func containsSession(list []*moqt.Session, s *moqt.Session) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// publishersFor returns the sessions to SUBSCRIBE for a track no Established
// upstream serves: those that announced a prefix of its namespace, else
// Config.Upstream's session for it.
func (rl *Relay) publishersFor(ctx context.Context, name wire.FullTrackName) ([]*moqt.Session, error) {
	if pubs := rl.announcersOf(name.Namespace); len(pubs) > 0 {
		return pubs, nil
	}
	return rl.upstreamSession(ctx, name.Namespace)
}

// upstreamSession asks Config.Upstream for the session serving ns.
func (rl *Relay) upstreamSession(ctx context.Context, ns wire.Namespace) ([]*moqt.Session, error) {
	if rl.cfg.Upstream == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rl.cfg.UpstreamTimeout)
	defer cancel()
	s, err := rl.cfg.Upstream.Session(ctx, ns)
	if err != nil || s == nil {
		return nil, err
	}
	rl.watch(s, true)
	return []*moqt.Session{s}, nil
}

// publisherSessions returns the sessions publishing name to the relay.
func (rl *Relay) publisherSessions(name wire.FullTrackName) []*moqt.Session {
	e := rl.lookup(name)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []*moqt.Session
	for u := range e.ups {
		if u.sub != nil && !containsSession(out, u.s) {
			out = append(out, u.s)
		}
	}
	return out
}

// availableTracks returns the tracks under prefix offered by PUBLISH.
func (rl *Relay) availableTracks(prefix wire.Namespace) []wire.FullTrackName {
	rl.mu.Lock()
	entries := make([]*trackEntry, 0, len(rl.tracks))
	for _, e := range rl.tracks {
		if e.name.Namespace.HasPrefix(prefix) {
			entries = append(entries, e)
		}
	}
	rl.mu.Unlock()
	var out []wire.FullTrackName
	for _, e := range entries {
		if e.publishedBy(nil) {
			out = append(out, e.name)
		}
	}
	return out
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

// fetchSources returns the track's LocalTrack and the publishers to ask
// for what it lacks (see the contract in relay.go).
func (rl *Relay) fetchSources(ctx context.Context, name wire.FullTrackName) (*moqt.LocalTrack, []*moqt.Session, error) {
	var track *moqt.LocalTrack
	var pubs []*moqt.Session
	if e := rl.lookup(name); e != nil {
		e.mu.Lock()
		if !e.dead {
			track = e.track
		}
		e.mu.Unlock()
		pubs = rl.publisherSessions(name)
	}
	for _, s := range rl.announcersOf(name.Namespace) {
		if !containsSession(pubs, s) {
			pubs = append(pubs, s)
		}
	}
	if len(pubs) == 0 {
		up, err := rl.upstreamSession(ctx, name.Namespace)
		if err != nil {
			return track, nil, err
		}
		pubs = up
	}
	return track, pubs, nil
}

// drop removes e from the registry, if it is still there, and its
// cache from the relay's cache budget; e.mu is held.
func (rl *Relay) dropLocked(e *trackEntry) {
	e.dead = true
	if e.track != nil && !rl.cfg.NoCache {
		// The track serves no new FETCH from here on; a fetch already
		// reading the cache goes on over what it holds.
		e.track.SetCache(moqt.CacheLimits{})
	}
	e.forwardChangedLocked()
	if e.linger != nil {
		e.linger.Stop()
		e.linger = nil
	}
	rl.mu.Lock()
	if rl.tracks[e.key] == e {
		delete(rl.tracks, e.key)
	}
	if e.opener != nil {
		e.opener.opened--
		e.opener = nil
	}
	rl.mu.Unlock()
}

// chargeOpenerLocked counts e against the MaxSessionTracks of s, whose
// SUBSCRIBE is about to ask the publishers for it; false when s has opened
// as many already. e.mu is held.
func (rl *Relay) chargeOpenerLocked(e *trackEntry, s *moqt.Session) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	st := rl.sessions[s]
	// st nil: s ended, its request with it. An upstream session is one
	// this relay chose, carrying the upstream's many subscribers.
	if e.opener != nil || st == nil || st.dialed {
		return true
	}
	if st.opened >= rl.cfg.MaxSessionTracks {
		return false
	}
	st.opened++
	e.opener = st
	return true
}

// isUpstream reports whether s is a session the relay dialed or asked as an
// upstream: its namespace subscriptions are not sent back to it.
func (rl *Relay) isUpstream(s *moqt.Session) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	st := rl.sessions[s]
	return st != nil && st.upstream
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
