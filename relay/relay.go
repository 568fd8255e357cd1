// Package relay is a MoQT relay (§7) built on the public API of package moqt:
// a moqt.Handler that routes SUBSCRIBE, PUBLISH, TRACK_STATUS, FETCH and the
// namespace requests between the sessions it serves, with one upstream
// subscription per track and publisher shared by every downstream subscriber.
//
//	r := relay.New(relay.Config{Authorize: relay.AllowAll})
//	defer r.Close()
//	srv, err := moqt.Listen(addr, &moqt.Config{TLSConfig: tlsConf, Handler: r}, nil)
//	if err != nil {
//		return err
//	}
//	defer srv.Close()
//	return srv.Serve(ctx) // accepts every session; when ctx ends, GOAWAY and drain
//
// The relay is the sessions' Handler: it serves their requests, and
// Server.Serve takes the sessions (a server that stops accepting refuses
// new connections once its pool is full; see moqt.Server).
//
// What the relay queues for slow downstream sessions is bounded by the
// sessions' moqt.Config: per session (MaxSessionBacklog) and across the
// Server's sessions (SharedBacklog, which Listen provides), so a session
// that subscribes to many tracks and reads nothing loses subscriptions to
// EXCESSIVE_LOAD, not the relay its memory.
//
// Relays chain: an edge's Config.Upstream is DialUpstream of its origin.
// Custom relays compose it: a moqt.ServeMux in front sends the namespaces
// an application serves itself to handlers of its own, and the rest (the
// empty prefix) to the Relay; tracks served that way are unknown to the
// Relay, which neither routes nor authorizes their requests.
package relay

import (
	"context"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/goroutines"
	"github.com/moqt-go/moqt/wire"
)

// Lock order: every mutex of the package, in one place.
//
// A lock may be taken while holding one listed above it in the same
// chain, never the other way round; leaf locks take no other lock of the
// package. None is held across network I/O. The registry, the router and
// the fetcher call one another with none of their locks held, but for
// fetcher.fetchMiss, which only makes a function and takes no lock.
//
//   - trackEntry.mu, then registry.mu: a track's state (track.go), then
//     the tables of tracks and sessions (registry.go), as when a track
//     leaves the registry (dropLocked). registry.mu is also taken alone,
//     never before a trackEntry's. Under trackEntry.mu the library's
//     LocalTrack is told the track's Largest Object and cache limits.
//   - output.mu, then outputs.mu: one subgroup being forwarded, then the
//     track's subgroups and duplicate table (forward.go, dedup.go).
//     output.mu is held while the object is written to the SubgroupWriter,
//     which a slow subscriber holds up at most its session's
//     SubscriberGrace; it serializes that subgroup's publishers only.
//     Neither is taken under trackEntry.mu, nor it under them.
//   - router.mu: the namespace table and the namespace requests
//     (router.go). Under it the NamespaceWriters are written to (they
//     never block), so that each subscriber sees the namespaces come and
//     go in the table's order; no other lock of the relay is held when it
//     is taken.
//   - fetcher.mu (the forwarded FETCHes), Dialer.mu and notifier.mu (the
//     names to tell Config.Observer of): leaves. The Observer is called
//     with no lock held.
//   - the goroutines.Group's lock (goRun): a leaf, taken under any of
//     the above.

// Relay routes requests between sessions as a MoQT relay (§7). It is a
// moqt.Handler: give it as Config.Handler to the sessions it serves,
// downstream subscribers and publishers alike, and to the upstream sessions it
// dials. It is safe for concurrent use.
//
// For each track it keeps one moqt.LocalTrack that serves every downstream
// subscriber, so an object is written once and fanned out by the library, and
// one upstream subscription per publisher of the track, whose objects it
// forwards, unchanged and in order, deduplicated by Location across
// publishers (§7.3); copies of one object that differ make the track
// Malformed (§7.1, §12.1). Upstream Forward is 1 while any downstream subscriber
// has Forward 1, and 0 otherwise (§7.2): the relay asks its publishers for
// objects only while someone receives them.
type Relay struct {
	env
	cancel context.CancelFunc // ends env.ctx

	reg   *registry // tracks and sessions: SUBSCRIBE, PUBLISH, TRACK_STATUS
	ns    *router   // PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE, SUBSCRIBE_TRACKS
	fetch *fetcher  // FETCH
}

// New returns a Relay configured by cfg.
func New(cfg Config) *Relay {
	cfg = withDefaults(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	v := env{cfg: cfg, log: cfg.Logger, met: cfg.Metrics, ctx: ctx, gs: &goroutines.Group{}}
	reg := newRegistry(v)
	rl := &Relay{env: v, cancel: cancel, reg: reg, ns: newRouter(v, reg), fetch: newFetcher(v, reg)}
	reg.miss, reg.offer = rl.fetch, rl.ns
	if cfg.Observer != nil {
		n := &notifier{env: v, nsState: rl.ns.observedAnnouncers, trackState: reg.trackPublishers}
		reg.note, rl.ns.note = n, n
	}
	return rl
}

// Watch counts s among the relay's sessions from now, as its first request
// would: Metrics.SessionStarted, and SessionEnded once it ends. A server
// that calls it at setup (ServerOptions.CheckSetup) counts the sessions
// that stay idle too. It reports false once the relay is closed.
func (rl *Relay) Watch(s *moqt.Session) bool { return rl.reg.watchSession(s) }

// ServeMOQT authorizes r and routes it.
func (rl *Relay) ServeMOQT(req moqt.Request) {
	kind := requestKind(req)
	if !rl.reg.watchSession(req.Session()) {
		_ = req.Reject(wire.ReqGoingAway, "relay closed")
		rl.reqDone(kind, OutcomeRefused)
		return
	}
	if err := rl.authorize(req, nil); err != nil {
		// Authorize's REQUEST_ERROR as it is, Redirect and Retry Interval
		// included; one the session cannot send (a code its draft lacks, a
		// Redirect §9.4.1 forbids) becomes UNAUTHORIZED, so that the
		// request is answered all the same.
		re := refusal(err)
		if req.RejectWith(re) != nil {
			_ = req.Reject(wire.ReqUnauthorized, re.Reason)
		}
		rl.reqDone(kind, OutcomeUnauthorized)
		rl.log.Debug("relay: request", "event", "unauthorized", "kind", kind, "err", err)
		return
	}
	switch r := req.(type) {
	case *moqt.SubscribeRequest:
		rl.reg.serveSubscribe(r)
	case *moqt.PublishRequest:
		rl.reg.servePublish(r)
	case *moqt.TrackStatusRequest:
		rl.reg.serveTrackStatus(r)
	case *moqt.FetchRequest:
		rl.fetch.serve(r)
	default:
		if !rl.ns.serve(req) {
			_ = req.Reject(wire.ReqNotSupported, "not supported")
			rl.reqDone(kind, OutcomeRefused)
		}
	}
}

// Close ends every subscription the relay serves and every upstream one it
// holds, and refuses later requests. Sessions stay up; closing them is the
// server's business.
func (rl *Relay) Close() error {
	if entries, first := rl.reg.close(); first {
		rl.cancel()
		for _, e := range entries {
			e.shutdown(wire.DoneGoingAway, "relay closed")
		}
		rl.ns.close()
		rl.fetch.close()
	}
	rl.gs.Wait()
	return nil
}
