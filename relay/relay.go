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

// Internal contract between the files of this package.
//
// relay.go, registry*.go, subscribe*.go, upstream*.go, forward*.go,
// publish*.go, status*.go, dial*.go, metrics*.go (helper "relay") own the
// track registry, SUBSCRIBE / PUBLISH / TRACK_STATUS routing, fan-out,
// upstreams, authorization and metrics. namespaces*.go (helper "ns-relay")
// owns PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE and SUBSCRIBE_TRACKS;
// fetch*.go (helper "fetch") owns FETCH.
//
// Dispatch. ServeMOQT registers the request's session (watchSession) and
// authorizes every request first (Config.Authorize; refused ones never reach
// the functions below), then calls:
//
//	func (r *Relay) serveNamespaceRequest(req moqt.Request) bool // namespaces.go
//	    for every request type relay.go does not know (PublishNamespaceRequest,
//	    SubscribeNamespaceRequest); it answers req and reports true, or
//	    reports false without touching it (ServeMOQT then rejects it with
//	    NOT_SUPPORTED).
//	func (r *Relay) serveFetch(req *moqt.FetchRequest) // fetch.go
//
// Both run on the request's Handler goroutine and must answer before they
// return, as any Handler. They call r.reqDone(kind, outcome) for the
// request's outcome (see metrics.go): OutcomeOK, OutcomeRefused, ...
// Goroutines they start go through r.goRun, which Relay.Close waits for;
// r.log is the Logger, r.ctx ends with Relay.Close.
//
// Offered to namespaces.go (all safe for concurrent use, none blocks on the
// network, none may be called with the caller's own locks held if those locks
// are taken in onTrackPublished):
//
//	func (r *Relay) addAnnouncer(s *moqt.Session, ns wire.Namespace) (remove func())
//	    registers s as a publisher of ns after its PUBLISH_NAMESPACE was
//	    accepted. SUBSCRIBE routing then finds s for every track whose
//	    namespace has ns as a field-wise prefix; every track of the registry
//	    under ns that has downstream subscribers gets a SUBSCRIBE to s, as an
//	    extra publisher (§7.5); held rendezvous SUBSCRIBEs under ns proceed.
//	    remove (idempotent) withdraws it when the announcement ends; upstream
//	    subscriptions already made to s go on until they end by themselves.
//	    The registration is also dropped when s ends.
//	func (r *Relay) availableTracks(prefix wire.Namespace) []wire.FullTrackName
//	    the tracks under prefix offered to this relay by PUBLISH and still
//	    Established upstream: what a new SUBSCRIBE_TRACKS gets PUBLISHes of.
//	func (r *Relay) publishDownstream(ctx context.Context, s *moqt.Session,
//	    name wire.FullTrackName, req wire.Params) (*moqt.ServedSubscription, error)
//	    sends PUBLISH for the relay's track name to s as a result of a
//	    SUBSCRIBE_TRACKS whose parameters are req (LocalTrack.PublishTracks:
//	    what PUBLISH carries goes in it, LARGEST_OBJECT added by the library;
//	    the object Range filters and INCLUDE_PROPERTIES are applied) and
//	    serves it like any downstream subscription: it keeps the track's
//	    entry alive and counts for the upstream Forward state (its
//	    subscriber's REQUEST_UPDATEs apply as a SUBSCRIBE's do, by
//	    AcceptOptions.OnUpdate); req's NEW_GROUP_REQUEST goes upstream once
//	    the PUBLISH is accepted. Fails (DOES_NOT_EXIST) when the track is no
//	    longer available.
//	func (r *Relay) publisherSessions(name wire.FullTrackName) []*moqt.Session
//	    the sessions that publish name to this relay (PUBLISH or Established
//	    upstream subscription): a SUBSCRIBE_TRACKS subscriber's own tracks
//	    are excluded with it.
//
// Implemented by namespaces.go and called by relay.go:
//
//	func (r *Relay) onTrackPublished(name wire.FullTrackName, exclude func(*moqt.Session) bool)
//	    a track became available by PUBLISH (a new entry, or a first
//	    publisher by PUBLISH): send it to every SUBSCRIBE_TRACKS subscriber
//	    whose prefix matches, except the sessions exclude reports (the
//	    track's publishers, and sessions whose held rendezvous SUBSCRIBE for
//	    it this PUBLISH releases, which get SUBSCRIBE_OK instead). Called
//	    without relay locks, on a goroutine of its own; it must not block for
//	    long (publishDownstream in goroutines of its own, bounded by the
//	    subscriber's request context).
//	func namespaceKind(req moqt.Request) string // KindPublishNamespace, ... for Metrics
//	func (r *Relay) closeNamespaces()      // Relay.Close: end everything held
//	func (r *Relay) namespacesEmpty() bool // tests: no table entry left
//	type nsState struct{ ... }             // the field r.ns
//
// Offered to fetch.go:
//
//	func (r *Relay) fetchSources(ctx context.Context, name wire.FullTrackName) (*moqt.LocalTrack, []*moqt.Session, error)
//	    the relay's LocalTrack for name, nil when it has no entry (its cache,
//	    Config.Cache, answers with LocalTrack.Fetch what it holds), and the
//	    publishers to ask upstream for the rest, in order of preference:
//	    those with an Established upstream subscription, then sessions that
//	    announced a matching namespace, then Config.Upstream's session. An
//	    error only when Config.Upstream fails.
//
// Implemented by fetch.go and called by relay.go:
//
//	func (r *Relay) closeFetches()      // Relay.Close
//	func (r *Relay) fetchesEmpty() bool // tests
//	type fetchState struct{ ... }       // the field r.fetch

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/goroutines"
	"github.com/moqt-go/moqt/wire"
)

// Upstream maps a namespace to the session a relay asks for the tracks in it
// that no session connected to the relay publishes: another relay, an origin,
// a cluster's coordination service. A nil session with a nil error means
// none; the request then fails as if no publisher existed.
type Upstream interface {
	Session(ctx context.Context, ns wire.Namespace) (*moqt.Session, error)
}

// UpstreamFunc adapts a function to an Upstream.
type UpstreamFunc func(ctx context.Context, ns wire.Namespace) (*moqt.Session, error)

// Session calls f(ctx, ns).
func (f UpstreamFunc) Session(ctx context.Context, ns wire.Namespace) (*moqt.Session, error) {
	return f(ctx, ns)
}

// AllowAll authorizes every request. A relay refuses everything unless its
// Config.Authorize says otherwise, so allowing all has to be said.
func AllowAll(moqt.Request, *wire.Params) error { return nil }

// Config configures a Relay. Zero fields mean the documented defaults.
type Config struct {
	// Authorize decides every request the relay receives (§7.4, §7.5):
	// SUBSCRIBE, PUBLISH, TRACK_STATUS, FETCH, PUBLISH_NAMESPACE,
	// SUBSCRIBE_NAMESPACE, SUBSCRIBE_TRACKS, from its track or namespace,
	// its AuthorizationTokens and its Session's Path, Authority and
	// PeerAuthorizationTokens. A nil error allows it; an error refuses it
	// with REQUEST_ERROR: a *moqt.RequestError (errors.As) with its own
	// Code and Reason, any other with UNAUTHORIZED and the error's text.
	// Nil refuses everything; AllowAll allows all.
	// Requests that upstream sessions send back (the PUBLISHes of a
	// SUBSCRIBE_TRACKS, an origin's SUBSCRIBE for a namespace announced
	// through this relay) are decided too: there Session().Path() is the
	// path this relay dialed.
	//
	// update is nil for the request itself. For a REQUEST_UPDATE of a
	// SUBSCRIBE, PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS
	// the relay serves, it is the update's parameters (its
	// AUTHORIZATION_TOKENs resolved, a TRACK_NAMESPACE_PREFIX the new
	// prefix), req the request as first received: an error refuses the
	// update, which ends the request (§9.5.1), so that widening a prefix
	// or refreshing a token is decided as the request was.
	Authorize func(req moqt.Request, update *wire.Params) error

	// Upstream is asked for tracks no connected session publishes. Nil:
	// none.
	Upstream Upstream

	// Metrics receives the relay's counters. Default: none kept.
	Metrics Metrics

	// Logger receives the relay's records: its view of sessions and
	// requests, and of its upstreams, at Debug, and what failed at Warn,
	// each with a stable message ("relay: upstream", …) and "event"
	// attribute; docs/logging.md in the repository lists them all. The
	// sessions log to their own moqt.Config.Logger. Default: slog.Default().
	Logger *slog.Logger

	// Cache bounds the objects each track keeps for FETCH and fills
	// (moqt.LocalTrack.SetCache). Zero Objects and Bytes: 8 MiB and 30 s
	// per track. Set NoCache to keep none. A nil Miss is the relay's:
	// what a track's cache lacks is FETCHed from the track's publishers,
	// including what it was not given between the objects it received,
	// which may still be on the way (§2.1); what they answer is kept.
	// Budget bounds every track's cache together, since a session may
	// open MaxSessionTracks tracks whose caches fill as fast as their
	// publishers publish (256 × 8 MiB per session with the defaults).
	// Nil: a budget of 256 MiB of the relay's own. Past it the caches
	// holding the most lose their oldest objects (moqt.CacheBudget),
	// which a later FETCH or fill asks the publishers for again. Share
	// one budget between relays, or with the application's own tracks,
	// to bound them together; read its Held for metrics.
	Cache   moqt.CacheLimits
	NoCache bool

	// MaxRendezvousTimeout caps how long a SUBSCRIBE with
	// RENDEZVOUS_TIMEOUT waits for a publisher (§9.20.7). Default 30 s.
	MaxRendezvousTimeout time.Duration
	// MaxHeldSubscribes bounds the SUBSCRIBEs held at once waiting for a
	// publisher; more are refused with EXCESSIVE_LOAD. Default 1024.
	// MaxSessionHeldSubscribes is one session's share of them, so that a
	// few sessions cannot take every place. Default 64.
	MaxHeldSubscribes        int
	MaxSessionHeldSubscribes int
	// MaxSessionTracks bounds the tracks one session may make the relay
	// ask its publishers for: tracks it subscribed to first, counted until
	// they leave the relay (Linger included), so that one subscriber
	// cannot make the relay open an upstream subscription per name it
	// invents. A SUBSCRIBE past it is refused with EXCESSIVE_LOAD; one for
	// a track the relay already has is not counted, nor are sessions
	// Upstream returned. Default 256; raise it when downstream relays,
	// each one session for many viewers, connect.
	MaxSessionTracks int

	// Linger is how long a track's upstream subscriptions outlive its last
	// downstream subscriber, so that a subscriber coming back at once does
	// not pay for a new upstream SUBSCRIBE. Default 2 s; negative: none.
	Linger time.Duration

	// UpstreamTimeout bounds how long an upstream SUBSCRIBE or
	// TRACK_STATUS may take to be answered. Default 10 s. It also ends a
	// SUBSCRIBE in a loop of relays (each the other's upstream): a relay
	// that gets back a SUBSCRIBE it has in flight joins it rather than
	// asking again, so the loop goes round once and waits, and the first
	// relay's timeout (plus any RENDEZVOUS_TIMEOUT) fails it everywhere.
	UpstreamTimeout time.Duration

	// Namespace routing. MaxNamespaceMatches bounds the namespaces a
	// SUBSCRIBE_NAMESPACE, or the tracks a SUBSCRIBE_TRACKS, may match:
	// more are refused with NAMESPACE_TOO_LARGE, and one that grows past
	// it later is reset with EXCESSIVE_LOAD (§4.3.1). Keep it below the
	// sessions' moqt.Config.MaxActiveNamespaces. Default 1024.
	MaxNamespaceMatches int

	// Upstream discovery. With Upstream, each SUBSCRIBE_NAMESPACE and
	// SUBSCRIBE_TRACKS (but an upstream session's) is asked upstream too,
	// on the upstream session every client shares: by one request of its
	// own unless one asked already covers its prefix. So that one client
	// cannot take all of that session's request streams,
	// MaxSessionDiscoveries bounds the requests of one session asked
	// upstream, and MaxDiscoveries the relay's upstream discovery
	// requests; a request, or a prefix update, past either is refused with
	// EXCESSIVE_LOAD (rather than served from what the relay knows, which
	// would hide the upstream's namespaces without a word). Defaults 16
	// and 64; keep MaxDiscoveries well below the upstream's stream limit
	// (moqt.Config.MaxIncomingStreams, 100 by default), which SUBSCRIBEs
	// use too, and raise MaxSessionDiscoveries when downstream relays
	// connect.
	MaxSessionDiscoveries int
	MaxDiscoveries        int
}

// defaultCacheBudget bounds the caches of a relay's tracks together when
// Config.Cache.Budget is nil: 32 tracks' worth of full default caches, or,
// among 256 tracks (one session's MaxSessionTracks), 1 MiB each, seconds
// of a video track for a joining subscriber's FETCH.
const defaultCacheBudget = 256 << 20

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
	cfg Config
	log *slog.Logger
	met Metrics

	mu       sync.Mutex
	closed   bool
	tracks   map[wire.TrackKey]*trackEntry
	sessions map[*moqt.Session]*sessionState
	anns     map[*announcer]struct{}
	held     int // rendezvous SUBSCRIBEs waiting

	gs goroutines.Group // the goroutines Close waits for

	// trackPublishedHook, set by tests, sees onTrackPublished's calls.
	trackPublishedHook func(wire.FullTrackName, func(*moqt.Session) bool)

	ns    nsState
	fetch fetchState

	ctx    context.Context
	cancel context.CancelFunc
}

// New returns a Relay configured by cfg.
func New(cfg Config) *Relay {
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !cfg.NoCache && cfg.Cache.Objects == 0 && cfg.Cache.Bytes == 0 {
		cfg.Cache.Bytes = 8 << 20
		if cfg.Cache.Duration == 0 {
			cfg.Cache.Duration = 30 * time.Second
		}
	}
	if !cfg.NoCache && cfg.Cache.Budget == nil {
		cfg.Cache.Budget = moqt.NewCacheBudget(defaultCacheBudget)
	}
	if cfg.MaxRendezvousTimeout <= 0 {
		cfg.MaxRendezvousTimeout = 30 * time.Second
	}
	if cfg.MaxHeldSubscribes <= 0 {
		cfg.MaxHeldSubscribes = 1024
	}
	if cfg.MaxSessionHeldSubscribes <= 0 {
		cfg.MaxSessionHeldSubscribes = 64
	}
	if cfg.MaxSessionTracks <= 0 {
		cfg.MaxSessionTracks = 256
	}
	if cfg.Linger == 0 {
		cfg.Linger = 2 * time.Second
	} else if cfg.Linger < 0 {
		cfg.Linger = 0
	}
	if cfg.UpstreamTimeout <= 0 {
		cfg.UpstreamTimeout = 10 * time.Second
	}
	if cfg.MaxSessionDiscoveries <= 0 {
		cfg.MaxSessionDiscoveries = 16
	}
	if cfg.MaxDiscoveries <= 0 {
		cfg.MaxDiscoveries = 64
	}
	ctx, cancel := context.WithCancel(context.Background())
	rl := &Relay{
		cfg:      cfg,
		log:      cfg.Logger,
		met:      cfg.Metrics,
		tracks:   map[wire.TrackKey]*trackEntry{},
		sessions: map[*moqt.Session]*sessionState{},
		anns:     map[*announcer]struct{}{},
		ctx:      ctx,
		cancel:   cancel,
	}
	return rl
}

// ServeMOQT authorizes r and routes it.
func (rl *Relay) ServeMOQT(req moqt.Request) {
	kind := requestKind(req)
	if !rl.watchSession(req.Session()) {
		_ = req.Reject(wire.ReqGoingAway, "relay closed")
		rl.reqDone(kind, OutcomeRefused)
		return
	}
	if err := rl.authorize(req, nil); err != nil {
		re := refusal(err)
		_ = req.Reject(re.Code, re.Reason)
		rl.reqDone(kind, OutcomeUnauthorized)
		rl.log.Debug("relay: request", "event", "unauthorized", "kind", kind, "err", err)
		return
	}
	switch r := req.(type) {
	case *moqt.SubscribeRequest:
		rl.serveSubscribe(r)
	case *moqt.PublishRequest:
		rl.servePublish(r)
	case *moqt.TrackStatusRequest:
		rl.serveTrackStatus(r)
	case *moqt.FetchRequest:
		rl.serveFetch(r)
	default:
		if !rl.serveNamespaceRequest(req) {
			_ = req.Reject(wire.ReqNotSupported, "not supported")
			rl.reqDone(kind, OutcomeRefused)
		}
	}
}

// authorize runs Config.Authorize on req or, update set, on one of its
// REQUEST_UPDATEs; nil refuses.
func (rl *Relay) authorize(req moqt.Request, update *wire.Params) error {
	if rl.cfg.Authorize == nil {
		return errors.New("relay: no authorizer configured")
	}
	return rl.cfg.Authorize(req, update)
}

// authorizeUpdate decides a REQUEST_UPDATE of req by Config.Authorize: a
// refusal is a REQUEST_ERROR UNAUTHORIZED, or the *moqt.RequestError the
// authorizer returned.
func (rl *Relay) authorizeUpdate(req moqt.Request, update *wire.Params) error {
	err := rl.authorize(req, update)
	if err == nil {
		return nil
	}
	rl.log.Debug("relay: request", "event", "update_unauthorized", "kind", requestKind(req), "err", err)
	return refusal(err)
}

// refusal is the REQUEST_ERROR that reports err, a refusal by
// Config.Authorize: a *moqt.RequestError in err's chain as it is, with its
// own Code and Reason (its Error text, which names the code, would say it
// twice), any other error as UNAUTHORIZED with its text.
func refusal(err error) *moqt.RequestError {
	var re *moqt.RequestError
	if errors.As(err, &re) {
		return re
	}
	return &moqt.RequestError{Code: wire.ReqUnauthorized, Reason: err.Error()}
}

// Close ends every subscription the relay serves and every upstream one it
// holds, and refuses later requests. Sessions stay up; closing them is the
// server's business.
func (rl *Relay) Close() error {
	rl.mu.Lock()
	if rl.closed {
		rl.mu.Unlock()
		rl.gs.Wait()
		return nil
	}
	rl.closed = true
	entries := make([]*trackEntry, 0, len(rl.tracks))
	for _, e := range rl.tracks {
		entries = append(entries, e)
	}
	rl.mu.Unlock()
	rl.cancel()
	for _, e := range entries {
		e.shutdown(wire.DoneGoingAway, "relay closed")
	}
	rl.closeNamespaces()
	rl.closeFetches()
	rl.gs.Wait()
	return nil
}
