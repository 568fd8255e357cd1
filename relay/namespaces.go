package relay

import (
	"bytes"
	"context"
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// KindSubscribeTracks is the Metrics kind of a SUBSCRIBE_TRACKS.
const KindSubscribeTracks = "subscribe_tracks"

// defaultMaxNamespaceMatches is Config.MaxNamespaceMatches's default.
const defaultMaxNamespaceMatches = 1024

// nsState is what the namespace routing keeps: the namespaces offered to
// the relay, by PUBLISH_NAMESPACE or learned upstream, and the namespace
// subscriptions it serves. Its lock is taken after no relay lock and
// before none, except the NamespaceWriters' (which never block): writes to
// the writers happen under it, so that each writer sees the namespaces
// come and go in the order the table does.
type nsState struct {
	mu      sync.Mutex
	closed  bool
	entries map[wire.NamespaceKey]*nsEntry
	anns    map[*localAnn]struct{}
	subs    map[*nsSub]struct{}     // SUBSCRIBE_NAMESPACE
	tsubs   map[*tracksSub]struct{} // SUBSCRIBE_TRACKS
	discs   map[*upDisc]struct{}    // upstream namespace requests, prefixes pairwise disjoint per type
	// subIdx indexes subs by the first field of their current prefix
	// (subKey), so that a namespace's change reaches the subscribers it
	// may concern only.
	subIdx map[string]map[*nsSub]struct{}
	// discBy counts the requests of each session that discover upstream,
	// discPending the upstream requests admitted and not made yet.
	discBy      map[*moqt.Session]int
	discPending int
}

// nsEntry is one namespace the relay offers, with where it comes from.
type nsEntry struct {
	ns     wire.Namespace
	local  map[*localAnn]struct{}
	remote map[*upDisc]*moqt.Session // the upstream session that reported it
	subs   map[*nsSub]struct{}       // the subscribers it is offered to
	// fwd forwards the announcement upstream while a local announcer
	// exists (Config.Upstream only).
	fwd *upForward
}

// localAnn is an accepted PUBLISH_NAMESPACE.
type localAnn struct {
	s   *moqt.Session
	ann *moqt.Announcement
	e   *nsEntry
}

// nsSub is an accepted SUBSCRIBE_NAMESPACE.
type nsSub struct {
	s     *moqt.Session
	w     *moqt.NamespaceWriter
	limit int
	// ref.prefix is the current prefix as the relay follows it
	// (followPrefix); offered the namespaces under it offered to w.
	ref     *discRef
	offered map[*nsEntry]struct{}
}

// discRef is a downstream request's share of an upstream one: its prefix,
// as requested and then updated, and the upstream request covering it.
type discRef struct {
	prefix wire.Namespace
	disc   *upDisc
	// owner is the session whose share of the discovery limits the
	// request holds, nil when it does not discover upstream; pending
	// that it holds one of the relay's upstream requests it has not
	// made yet (admitDiscLocked).
	owner   *moqt.Session
	pending bool
}

// maxMatches is Config.MaxNamespaceMatches or its default.
func (rl *Relay) maxMatches() int {
	if rl.cfg.MaxNamespaceMatches > 0 {
		return rl.cfg.MaxNamespaceMatches
	}
	return defaultMaxNamespaceMatches
}

// serveNamespaceRequest answers PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE and
// SUBSCRIBE_TRACKS (see the contract in relay.go).
func (rl *Relay) serveNamespaceRequest(req moqt.Request) bool {
	switch r := req.(type) {
	case *moqt.PublishNamespaceRequest:
		rl.servePublishNamespace(r)
	case *moqt.SubscribeNamespaceRequest:
		if r.Tracks {
			rl.serveSubscribeTracks(r)
		} else {
			rl.serveSubscribeNamespace(r)
		}
	default:
		return false
	}
	return true
}

// namespaceKind names the kind of a namespace request for Metrics.
func namespaceKind(req moqt.Request) string {
	switch r := req.(type) {
	case *moqt.PublishNamespaceRequest:
		return KindPublishNamespace
	case *moqt.SubscribeNamespaceRequest:
		if r.Tracks {
			return KindSubscribeTracks
		}
		return KindSubscribeNamespace
	}
	return KindOther
}

// sessionLevel reports a namespace of the .session space (§6.5), which a
// relay never forwards to another session. The library refuses requests
// for them before they reach the relay; namespaces learned upstream are
// filtered here.
func sessionLevel(ns wire.Namespace) bool {
	return len(ns) > 0 && bytes.Equal(ns[0], []byte(".session"))
}

// servePublishNamespace accepts a publisher's PUBLISH_NAMESPACE (§7.5):
// SUBSCRIBEs for tracks under it are routed to the publisher, the
// SUBSCRIBE_NAMESPACE subscribers under it get NAMESPACE (§4.2), and the
// namespace is announced upstream, for as long as the announcement lasts.
func (rl *Relay) servePublishNamespace(r *moqt.PublishNamespaceRequest) {
	s := r.Session()
	r.OnUpdate = func(u *wire.Params) error { return rl.authorizeUpdate(r, u) }
	ann, err := r.Accept(wire.Params{})
	if err != nil {
		rl.reqDone(KindPublishNamespace, OutcomeRefused)
		return
	}
	// Routed first: a subscriber that learns of the namespace may
	// SUBSCRIBE at once.
	remove := rl.addAnnouncer(s, r.Namespace)
	ns := cloneName(wire.FullTrackName{Namespace: r.Namespace}).Namespace
	st := &rl.ns
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		remove()
		_ = ann.Close()
		rl.reqDone(KindPublishNamespace, OutcomeRefused)
		return
	}
	e := st.entryLocked(ns)
	la := &localAnn{s: s, ann: ann, e: e}
	e.local[la] = struct{}{}
	st.anns[la] = struct{}{}
	rl.changedLocked(e)
	st.mu.Unlock()
	context.AfterFunc(r.Context(), func() {
		remove()
		rl.withdraw(la)
	})
	rl.reqDone(KindPublishNamespace, OutcomeOK)
	rl.log.Debug("relay: publish_namespace", "event", "ok", "namespace", ns.String())
}

// withdraw forgets an announcement that ended.
func (rl *Relay) withdraw(la *localAnn) {
	st := &rl.ns
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.anns[la]; !ok {
		return
	}
	delete(st.anns, la)
	delete(la.e.local, la)
	rl.changedLocked(la.e)
	rl.log.Debug("relay: publish_namespace", "event", "end", "namespace", la.e.ns.String())
}

// initLocked makes the tables, on first use and after Close.
func (st *nsState) initLocked() {
	if st.entries == nil {
		st.entries = map[wire.NamespaceKey]*nsEntry{}
		st.anns = map[*localAnn]struct{}{}
		st.subs = map[*nsSub]struct{}{}
		st.tsubs = map[*tracksSub]struct{}{}
		st.discs = map[*upDisc]struct{}{}
		st.discBy = map[*moqt.Session]int{}
		st.subIdx = map[string]map[*nsSub]struct{}{}
	}
}

// entryLocked returns ns's entry, made if absent.
func (st *nsState) entryLocked(ns wire.Namespace) *nsEntry {
	st.initLocked()
	k := ns.Key()
	if e := st.entries[k]; e != nil {
		return e
	}
	e := &nsEntry{ns: ns, local: map[*localAnn]struct{}{}, remote: map[*upDisc]*moqt.Session{}, subs: map[*nsSub]struct{}{}}
	st.entries[k] = e
	return e
}

// visibleTo reports whether e is offered to a subscriber on s: by a source
// other than s itself, so that no session is told of its own namespaces.
func (e *nsEntry) visibleTo(s *moqt.Session) bool {
	for a := range e.local {
		if a.s != s {
			return true
		}
	}
	for _, from := range e.remote {
		if from != s {
			return true
		}
	}
	return false
}

// matchesLocked counts the namespaces under prefix offered to s.
func (st *nsState) matchesLocked(s *moqt.Session, prefix wire.Namespace) int {
	n := 0
	for _, e := range st.entries {
		if e.ns.HasPrefix(prefix) && e.visibleTo(s) {
			n++
		}
	}
	return n
}

// serveSubscribeNamespace accepts a SUBSCRIBE_NAMESPACE (§4.1, §9.15): the
// namespaces offered to the relay under the prefix, then their comings and
// goings. One that matches more than Config.MaxNamespaceMatches is refused
// with NAMESPACE_TOO_LARGE (§4.3.1). With Config.Upstream, the upstream's
// namespaces under the prefix are discovered too.
func (rl *Relay) serveSubscribeNamespace(r *moqt.SubscribeNamespaceRequest) {
	s := r.Session()
	limit := rl.maxMatches()
	st := &rl.ns
	ref := &discRef{prefix: cloneName(wire.FullTrackName{Namespace: r.Prefix}).Namespace}
	up := rl.discovers(s, r.Prefix)
	r.OnUpdate = rl.checkUpdate(r, ref, limit, func(p wire.Namespace) int {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.matchesLocked(s, p)
	})
	w := rl.acceptLocked(r, func() *moqt.RequestError {
		if st.matchesLocked(s, r.Prefix) > limit {
			return tooLarge()
		}
		if up {
			return rl.admitDiscLocked(ref, s, false)
		}
		return nil
	})
	if w == nil {
		rl.unadmit(ref)
		return
	}
	sub := &nsSub{s: s, w: w, limit: limit, ref: ref, offered: map[*nsEntry]struct{}{}}
	st.subs[sub] = struct{}{}
	st.indexLocked(sub)
	rl.offerAllLocked(sub)
	st.mu.Unlock()
	rl.reqDone(KindSubscribeNamespace, OutcomeOK)
	rl.log.Debug("relay: subscribe_namespace", "event", "ok", "prefix", r.Prefix.String())
	alive := func() bool { _, ok := st.subs[sub]; return ok }
	if up {
		rl.discoverUpstream(ref, false, alive)
	}
	context.AfterFunc(r.Context(), func() {
		st.mu.Lock()
		rl.dropSubLocked(sub)
		st.mu.Unlock()
	})
	rl.goRun(func() {
		rl.followPrefix(r.Context(), w, ref, false, up, alive, func(p wire.Namespace) { rl.movePrefixLocked(sub, p) })
	})
}

// checkUpdate is the OnUpdate of a SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS
// r whose discovery share is ref: Config.Authorize decides the update, and
// a new prefix is refused with NAMESPACE_TOO_LARGE when count, its
// matches, passes limit (§4.3.1), with EXCESSIVE_LOAD past the discovery
// limits.
func (rl *Relay) checkUpdate(r *moqt.SubscribeNamespaceRequest, ref *discRef, limit int,
	count func(wire.Namespace) int) func(*wire.Params) error {
	return func(u *wire.Params) error {
		if err := rl.authorizeUpdate(r, u); err != nil {
			return err
		}
		p := u.TrackNamespacePrefix
		if !p.Set {
			return nil
		}
		if count(p.Value) > limit {
			return tooLarge()
		}
		rl.ns.mu.Lock()
		defer rl.ns.mu.Unlock()
		return rl.admitMoveLocked(ref, p.Value, r.Tracks)
	}
}

// tooLarge is the refusal of a request, or of a prefix update, that
// matches more than Config.MaxNamespaceMatches (§4.3.1).
func tooLarge() *moqt.RequestError {
	return &moqt.RequestError{Code: wire.ReqNamespaceTooLarge, Reason: "too many matches under the prefix"}
}

// acceptLocked accepts r unless the relay is closed or check, evaluated
// under nsState.mu, refuses it: with NAMESPACE_TOO_LARGE past
// Config.MaxNamespaceMatches (§4.3.1), EXCESSIVE_LOAD past the discovery
// limits. It returns with nsState.mu held when it accepted; nil, having
// answered r, otherwise.
func (rl *Relay) acceptLocked(r *moqt.SubscribeNamespaceRequest, check func() *moqt.RequestError) *moqt.NamespaceWriter {
	st := &rl.ns
	st.mu.Lock()
	st.initLocked()
	code, reason := wire.ReqGoingAway, "relay closed"
	var refusal *moqt.RequestError
	switch {
	case st.closed:
	case func() bool { refusal = check(); return refusal != nil }():
		code, reason = refusal.Code, refusal.Reason
	default:
		// Accepted without the lock: r.OnUpdate, which takes it, may run
		// within Accept.
		st.mu.Unlock()
		w, err := r.Accept(wire.Params{})
		if err != nil {
			rl.reqDone(requestKind(r), OutcomeRefused)
			return nil
		}
		st.mu.Lock()
		if !st.closed {
			st.initLocked()
			return w
		}
		st.mu.Unlock()
		w.End(wire.ResetGoingAway)
		rl.reqDone(requestKind(r), OutcomeRefused)
		return nil
	}
	st.mu.Unlock()
	rl.refuse(r, code, reason, OutcomeRefused)
	return nil
}

// dropSubLocked forgets a SUBSCRIBE_NAMESPACE that ended, and its share of
// an upstream discovery.
func (rl *Relay) dropSubLocked(sub *nsSub) {
	st := &rl.ns
	if _, ok := st.subs[sub]; !ok {
		return
	}
	delete(st.subs, sub)
	st.unindexLocked(sub)
	for e := range sub.offered {
		delete(e.subs, sub)
	}
	rl.releaseDiscLocked(sub.ref)
	rl.unadmitLocked(sub.ref)
}

// isUpstream reports whether s is a session the relay dialed or asked as an
// upstream: its namespace subscriptions are not sent back to it.
func (rl *Relay) isUpstream(s *moqt.Session) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	st := rl.sessions[s]
	return st != nil && st.upstream
}

// closeNamespaces ends what the namespace routing holds: announcements
// are revoked, namespace subscriptions reset with GOING_AWAY; upstream
// announcements and discoveries end with the relay's context.
func (rl *Relay) closeNamespaces() {
	st := &rl.ns
	st.mu.Lock()
	st.closed = true
	anns := st.anns
	subs := st.subs
	tsubs := st.tsubs
	for _, e := range st.entries {
		if e.fwd != nil {
			e.fwd.stop()
			e.fwd = nil
		}
	}
	for d := range st.discs {
		d.cancel()
	}
	st.entries, st.anns, st.subs, st.tsubs, st.discs, st.discBy, st.subIdx = nil, nil, nil, nil, nil, nil, nil
	st.discPending = 0
	for sub := range tsubs {
		sub.ended = true
	}
	st.mu.Unlock()
	for la := range anns {
		_ = la.ann.Close()
	}
	for sub := range subs {
		sub.w.End(wire.ResetGoingAway)
	}
	for sub := range tsubs {
		sub.stop()
		sub.w.End(wire.ResetGoingAway)
	}
}

// namespacesEmpty reports that no namespace state is left.
func (rl *Relay) namespacesEmpty() bool {
	st := &rl.ns
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.entries) == 0 && len(st.anns) == 0 && len(st.subs) == 0 && len(st.tsubs) == 0 && len(st.discs) == 0
}
