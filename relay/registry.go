package relay

import (
	"container/list"
	"context"
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// registry is the relay's table of tracks and sessions, and serves the
// requests about one track: SUBSCRIBE, PUBLISH and TRACK_STATUS (§7.4,
// §7.5). It keeps one trackEntry per Full Track Name, the sessions it
// serves (sessionState) and the namespaces they announced (announcer), so
// that a SUBSCRIBE finds its publishers. It offers the router what it
// needs (trackRegistry) and the fetcher where a track's objects are
// (fetchSources); it asks the fetcher for a track's cache misses
// (missFetcher) and tells the router of tracks published to it
// (trackOfferer).
//
// mu guards the tables; see the lock order in relay.go.
type registry struct {
	env
	miss  missFetcher
	offer trackOfferer
	note  *notifier // nil without Config.Observer
	// trackPublishedHook, set by tests, sees offer's calls.
	trackPublishedHook func(wire.FullTrackName, func(*moqt.Session) bool)
	// publishAcceptedHook, set by tests, runs between a PUBLISH_OK and
	// the track's registration.
	publishAcceptedHook func()
	// joinHook, set by tests, runs before a waiter's SUBSCRIBE_OK.
	joinHook func()

	mu       sync.Mutex
	closed   bool
	tracks   map[wire.TrackKey]*trackEntry
	sessions map[*moqt.Session]*sessionState
	anns     map[*announcer]struct{}
	held     int // rendezvous SUBSCRIBEs waiting
	// ended are the tracks kept after their end (Config.KeepEnded,
	// ended.go), endedOrder the same, oldest first.
	ended      map[wire.TrackKey]*endedTrack
	endedOrder list.List
}

// missFetcher fetches what a track's cache lacks from the track's
// publishers: the fetcher. Its function becomes the track's
// CacheLimits.Miss.
type missFetcher interface {
	fetchMiss(name wire.FullTrackName) func(ctx context.Context, start, end wire.Location) (*moqt.Fetch, error)
}

// trackOfferer hears of the tracks that became available by PUBLISH: the
// router, which offers them to SUBSCRIBE_TRACKS subscribers. Called
// without registry locks, on a goroutine of its own.
type trackOfferer interface {
	onTrackPublished(name wire.FullTrackName, exclude func(*moqt.Session) bool)
}

func newRegistry(v env) *registry {
	return &registry{
		env:      v,
		tracks:   map[wire.TrackKey]*trackEntry{},
		sessions: map[*moqt.Session]*sessionState{},
		anns:     map[*announcer]struct{}{},
		ended:    map[wire.TrackKey]*endedTrack{},
	}
}

// close refuses new tracks and sessions, for Relay.Close, releases the
// ended tracks kept, and returns the tracks to end; false when it was
// closed already.
func (reg *registry) close() ([]*trackEntry, bool) {
	reg.mu.Lock()
	if reg.closed {
		reg.mu.Unlock()
		return nil, false
	}
	reg.closed = true
	entries := make([]*trackEntry, 0, len(reg.tracks))
	for _, e := range reg.tracks {
		entries = append(entries, e)
	}
	drop := reg.releaseAllEndedLocked()
	reg.mu.Unlock()
	dropCaches(drop)
	return entries, true
}

// sessionState is what the relay keeps of a session it serves.
type sessionState struct {
	upstream bool // as counted by Metrics
	anns     map[*announcer]struct{}
	opened   int  // tracks it opened (trackEntry.opener), on registry.mu
	dialed   bool // Config.Upstream returned it, on registry.mu
	held     int  // its rendezvous SUBSCRIBEs waiting, on registry.mu
}

// announcer is a session's accepted PUBLISH_NAMESPACE.
type announcer struct {
	s  *moqt.Session
	ns wire.Namespace
}

// entry returns the registry's entry for name, made if absent; nil when the
// relay is closed.
func (reg *registry) entry(name wire.FullTrackName) *trackEntry {
	key := name.Key()
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if reg.closed {
		return nil
	}
	if e := reg.tracks[key]; e != nil {
		return e
	}
	e := &trackEntry{
		reg: reg, name: cloneName(name), key: key,
		ready:     make(chan struct{}),
		ups:       map[*upstream]struct{}{},
		downs:     map[*downstream]struct{}{},
		waiting:   map[*moqt.Session]int{},
		accepting: map[*moqt.Session]int{},
	}
	e.out.init(e)
	reg.tracks[key] = e
	return e
}

// lookup returns name's entry, or nil.
func (reg *registry) lookup(name wire.FullTrackName) *trackEntry {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.tracks[name.Key()]
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
func (reg *registry) watchSession(s *moqt.Session) bool {
	return reg.watch(s, false) != nil
}

// watch registers s and returns its state; nil when the relay is closed.
func (reg *registry) watch(s *moqt.Session, upstream bool) *sessionState {
	reg.mu.Lock()
	if reg.closed {
		reg.mu.Unlock()
		return nil
	}
	if st := reg.sessions[s]; st != nil {
		// A dialed session's first request may come before Upstream
		// returned it: it is an upstream all the same.
		follow := upstream && !st.dialed
		st.dialed = st.dialed || upstream
		reg.mu.Unlock()
		if follow {
			reg.goRun(func() { reg.followGoaway(s) })
		}
		return st
	}
	st := &sessionState{upstream: upstream, dialed: upstream, anns: map[*announcer]struct{}{}}
	reg.sessions[s] = st
	reg.mu.Unlock()
	if upstream {
		reg.goRun(func() { reg.followGoaway(s) }) // migrate.go
	}
	reg.met.SessionStarted(upstream)
	reg.log.Debug("relay: session", "event", "start", "upstream", upstream, "path", s.Path(), "authority", s.Authority())
	context.AfterFunc(s.Context(), func() { reg.sessionEnded(s, st) })
	return st
}

// sessionEnded drops what s left: its announcements. Its subscriptions,
// upstream and downstream, end by themselves with it.
func (reg *registry) sessionEnded(s *moqt.Session, st *sessionState) {
	reg.mu.Lock()
	delete(reg.sessions, s)
	for a := range st.anns {
		delete(reg.anns, a)
	}
	clear(st.anns)
	reg.mu.Unlock()
	reg.met.SessionEnded(st.upstream)
	reg.log.Debug("relay: session", "event", "end", "upstream", st.upstream, "cause", context.Cause(s.Context()))
}

// addAnnouncer registers s as a publisher of ns (see trackRegistry).
func (reg *registry) addAnnouncer(s *moqt.Session, ns wire.Namespace) (remove func()) {
	st := reg.watch(s, false)
	if st == nil {
		return func() {}
	}
	a := &announcer{s: s, ns: cloneName(wire.FullTrackName{Namespace: ns}).Namespace}
	reg.mu.Lock()
	if s.Context().Err() != nil || reg.closed {
		reg.mu.Unlock()
		return func() {}
	}
	reg.anns[a] = struct{}{}
	st.anns[a] = struct{}{}
	var matching []*trackEntry
	for _, e := range reg.tracks {
		if e.name.Namespace.HasPrefix(a.ns) {
			matching = append(matching, e)
		}
	}
	// A publisher of the namespace may publish the ended tracks under it
	// again, numbering their groups anew: it is asked for them from now
	// on, not their kept caches.
	drop := reg.releaseEndedUnderLocked(a.ns)
	reg.mu.Unlock()
	dropCaches(drop)
	for _, e := range matching {
		e.addPublisher(s)
	}
	return func() {
		reg.mu.Lock()
		delete(reg.anns, a)
		delete(st.anns, a)
		reg.mu.Unlock()
	}
}

// retryHeld has the tracks under prefix whose SUBSCRIBEs are held for a
// publisher ask Config.Upstream again, which may now serve them
// (Relay.OfferNamespace, RetryNamespace), as do the tracks carried for
// subscribers when it is an UpstreamSet (retryUpstream).
func (reg *registry) retryHeld(prefix wire.Namespace) {
	if reg.cfg.Upstream == nil {
		return
	}
	reg.mu.Lock()
	var matching []*trackEntry
	for _, e := range reg.tracks {
		if e.name.Namespace.HasPrefix(prefix) {
			matching = append(matching, e)
		}
	}
	reg.mu.Unlock()
	for _, e := range matching {
		e.retryUpstream()
	}
}

// retryPublishers returns the sessions to SUBSCRIBE for a track, as
// publishersFor does, asking Config.Upstream for each session whose
// SUBSCRIBE waits or is served until one gets an answer from it: an
// Upstream may route by who asks (RequestSession), and answer none for
// some.
func (reg *registry) retryPublishers(asking []*moqt.Session, name wire.FullTrackName) ([]*moqt.Session, error) {
	anns := reg.announcersOf(name.Namespace)
	var last error
	for _, s := range asking {
		pubs, err := reg.withUpstream(withRequest(reg.ctx, s, name), name.Namespace, anns)
		if len(pubs) > len(anns) {
			return pubs, nil
		}
		if err != nil {
			last = err
		}
	}
	return anns, last
}

// announcersOf returns the sessions that announced a prefix of ns.
func (reg *registry) announcersOf(ns wire.Namespace) []*moqt.Session {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var out []*moqt.Session
	for a := range reg.anns {
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
// upstream serves: those that announced a prefix of its namespace, and
// Config.Upstream's (see withUpstream).
func (reg *registry) publishersFor(ctx context.Context, name wire.FullTrackName) ([]*moqt.Session, error) {
	return reg.withUpstream(ctx, name.Namespace, reg.announcersOf(name.Namespace))
}

// withUpstream returns pubs, the sessions connected to the relay that
// publish a track under ns, with Config.Upstream's after them: its session
// when pubs is empty, or, for an UpstreamSet, each of its sessions (§7.5:
// every matching publisher), whose failure is then no error while pubs
// has some.
func (reg *registry) withUpstream(ctx context.Context, ns wire.Namespace, pubs []*moqt.Session) ([]*moqt.Session, error) {
	set, ok := reg.cfg.Upstream.(UpstreamSet)
	if !ok {
		if len(pubs) > 0 {
			return pubs, nil
		}
		return reg.upstreamSession(ctx, ns)
	}
	if len(pubs) > 0 {
		ctx = withPublished(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, reg.cfg.UpstreamTimeout)
	defer cancel()
	more, err := set.Sessions(ctx, ns)
	if err != nil && len(pubs) > 0 {
		reg.log.Warn("relay: upstream", "event", "unavailable", "namespace", ns.String(), "err", err)
		err = nil
	}
	for _, s := range more {
		if s != nil && !containsSession(pubs, s) {
			reg.watch(s, true)
			pubs = append(pubs, s)
		}
	}
	return pubs, err
}

// upstreamSession asks Config.Upstream for the session serving ns.
func (reg *registry) upstreamSession(ctx context.Context, ns wire.Namespace) ([]*moqt.Session, error) {
	if reg.cfg.Upstream == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reg.cfg.UpstreamTimeout)
	defer cancel()
	s, err := reg.cfg.Upstream.Session(ctx, ns)
	if err != nil || s == nil {
		return nil, err
	}
	reg.watch(s, true)
	return []*moqt.Session{s}, nil
}

// publisherSessions returns the sessions publishing name to the relay.
func (reg *registry) publisherSessions(name wire.FullTrackName) []*moqt.Session {
	e := reg.lookup(name)
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
func (reg *registry) availableTracks(prefix wire.Namespace) []wire.FullTrackName {
	entries := reg.entriesUnder(prefix)
	var out []wire.FullTrackName
	for _, e := range entries {
		if e.publishedBy(nil) {
			out = append(out, e.name)
		}
	}
	return out
}

// entriesUnder returns the registry's entries under prefix.
func (reg *registry) entriesUnder(prefix wire.Namespace) []*trackEntry {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	entries := make([]*trackEntry, 0, len(reg.tracks))
	for _, e := range reg.tracks {
		if e.name.Namespace.HasPrefix(prefix) {
			entries = append(entries, e)
		}
	}
	return entries
}

// countTracks counts the tracks under prefix offered to the relay by
// PUBLISH, the registered ones and those whose PUBLISH_OK is on its way,
// that except does not publish: the matches a SUBSCRIBE_TRACKS from
// except is limited by (§4.3.1). A track the relay answered PUBLISH_OK
// for counts at once, so that a SUBSCRIBE_TRACKS sent once its publisher
// has the answer is refused as it would be a moment later.
func (reg *registry) countTracks(prefix wire.Namespace, except *moqt.Session) int {
	entries := reg.entriesUnder(prefix)
	n := 0
	for _, e := range entries {
		e.mu.Lock()
		if e.offeredLocked(except) {
			n++
		}
		e.mu.Unlock()
	}
	return n
}

// fetchSources returns the track's LocalTrack and the publishers to ask
// for what it lacks (see the fetchSources interface).
func (reg *registry) fetchSources(ctx context.Context, name wire.FullTrackName) (*moqt.LocalTrack, []*moqt.Session, error) {
	var track *moqt.LocalTrack
	var pubs []*moqt.Session
	if e := reg.lookup(name); e != nil {
		e.mu.Lock()
		if !e.dead {
			track = e.track
		}
		e.mu.Unlock()
		pubs = reg.publisherSessions(name)
	}
	if track == nil {
		// Ended, its cache kept: it answers until a publisher comes.
		track = reg.endedTrack(name)
	}
	for _, s := range reg.announcersOf(name.Namespace) {
		if !containsSession(pubs, s) {
			pubs = append(pubs, s)
		}
	}
	pubs, err := reg.withUpstream(ctx, name.Namespace, pubs)
	if err != nil {
		return track, nil, err
	}
	return track, pubs, nil
}

// trackProps is the Track Properties of the relay's track name; nil if it
// has none, or is gone (its PUBLISH then fails).
func (reg *registry) trackProps(name wire.FullTrackName) wire.KVList {
	e := reg.lookup(name)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.props
}

// isUpstream reports whether s is a session the relay dialed or asked as an
// upstream: its namespace subscriptions are not sent back to it.
func (reg *registry) isUpstream(s *moqt.Session) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	st := reg.sessions[s]
	return st != nil && st.upstream
}

// drop removes e from the registry, if it is still there, and its
// cache from the relay's cache budget, unless it is kept: among the ended
// tracks (keepEnded), or for the track's End to drop (keepCache). e.mu is
// held.
func (reg *registry) dropLocked(e *trackEntry) {
	e.dead = true
	reg.note.markTrack(e.name)
	cached := e.track != nil && !reg.cfg.NoCache && !e.keepCache
	if cached && !e.keepEnded {
		// The track serves no new FETCH from here on; a fetch already
		// reading the cache goes on over what it holds.
		e.track.SetCache(moqt.CacheLimits{})
	}
	e.forwardChangedLocked()
	if e.linger != nil {
		e.linger.Stop()
		e.linger = nil
	}
	reg.mu.Lock()
	if reg.tracks[e.key] == e {
		delete(reg.tracks, e.key)
	}
	if e.opener != nil {
		e.opener.opened--
		e.opener = nil
	}
	var drop []*moqt.LocalTrack
	if cached && e.keepEnded {
		drop = reg.keepEndedLocked(e)
	}
	reg.mu.Unlock()
	dropCaches(drop)
}

// chargeOpenerLocked counts e against the MaxSessionTracks of s, whose
// SUBSCRIBE is about to ask the publishers for it; false when s has opened
// as many already. e.mu is held.
func (reg *registry) chargeOpenerLocked(e *trackEntry, s *moqt.Session) bool {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	st := reg.sessions[s]
	// st nil: s ended, its request with it. An upstream session is one
	// this relay chose, carrying the upstream's many subscribers.
	if e.opener != nil || st == nil || st.dialed {
		return true
	}
	if st.opened >= reg.cfg.MaxSessionTracks {
		return false
	}
	st.opened++
	e.opener = st
	return true
}
