package relay

import (
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Observer hears what becomes available at a relay, and goes, from the
// sessions it serves: a coordination service registers it for other relays
// to find (the cluster module). Sessions Config.Upstream returned are left
// out: what they offer is another relay's to tell.
//
// Calls come one at a time, on a goroutine of the relay, with none of its
// locks held, so an Observer may block briefly or call the relay back.
// Each tells the current state of one name, changes in between coalesced:
// the same state may be told twice, and a name's last call is its state.
// Relay.Close waits for the calls in progress.
type Observer interface {
	// Namespace tells the sessions whose PUBLISH_NAMESPACE of ns (exactly)
	// the relay holds; none once the last one ended.
	Namespace(ns wire.Namespace, from []*moqt.Session)
	// Track tells the sessions that PUBLISHed name to the relay and
	// still publish it; none once the last one ended.
	Track(name wire.FullTrackName, from []*moqt.Session)
}

// notifier tells Config.Observer of the names marked changed: one
// goroutine at a time drains them, reading each name's state anew. Its
// lock is a leaf: marking takes it under any other lock of the relay.
type notifier struct {
	env
	nsState    func(wire.Namespace) []*moqt.Session
	trackState func(wire.FullTrackName) []*moqt.Session

	mu      sync.Mutex
	ns      map[wire.NamespaceKey]wire.Namespace
	tracks  map[wire.TrackKey]wire.FullTrackName
	running bool
}

// markNamespace notes that ns's announcers changed.
func (n *notifier) markNamespace(ns wire.Namespace) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ns == nil {
		n.ns = map[wire.NamespaceKey]wire.Namespace{}
	}
	n.ns[ns.Key()] = ns
	n.startLocked()
}

// markTrack notes that name's publishers by PUBLISH changed.
func (n *notifier) markTrack(name wire.FullTrackName) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tracks == nil {
		n.tracks = map[wire.TrackKey]wire.FullTrackName{}
	}
	n.tracks[name.Key()] = name
	n.startLocked()
}

func (n *notifier) startLocked() {
	if !n.running {
		n.running = true
		n.goRun(n.drain)
	}
}

// drain tells the Observer of every marked name until none is left.
func (n *notifier) drain() {
	for {
		n.mu.Lock()
		nss, tracks := n.ns, n.tracks
		n.ns, n.tracks = nil, nil
		if len(nss) == 0 && len(tracks) == 0 {
			n.running = false
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		for _, ns := range nss {
			n.cfg.Observer.Namespace(ns, n.nsState(ns))
		}
		for _, name := range tracks {
			n.cfg.Observer.Track(name, n.trackState(name))
		}
	}
}

// observedAnnouncers lists the sessions, but upstream ones, whose
// PUBLISH_NAMESPACE of exactly ns the router holds: the Observer's view.
func (rt *router) observedAnnouncers(ns wire.Namespace) []*moqt.Session {
	rt.mu.Lock()
	var list []*moqt.Session
	if e := rt.entries[ns.Key()]; e != nil {
		for a := range e.local {
			if a.ann != nil && !containsSession(list, a.s) {
				list = append(list, a.s)
			}
		}
	}
	rt.mu.Unlock()
	out := list[:0]
	for _, s := range list {
		if !rt.reg.isUpstream(s) {
			out = append(out, s)
		}
	}
	return out
}

// trackPublishers lists the sessions, but upstream ones, that publish
// name to the relay by PUBLISH: the Observer's view.
func (reg *registry) trackPublishers(name wire.FullTrackName) []*moqt.Session {
	e := reg.lookup(name)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return nil
	}
	var out []*moqt.Session
	reg.mu.Lock()
	defer reg.mu.Unlock()
	for u := range e.ups {
		st := reg.sessions[u.s]
		if u.byPublish && !u.closing && (st == nil || !st.dialed) && !containsSession(out, u.s) {
			out = append(out, u.s)
		}
	}
	return out
}
