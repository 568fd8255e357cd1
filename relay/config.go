package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Upstream maps a namespace to the session a relay asks for the tracks in it
// that no session connected to the relay publishes: another relay, an origin,
// a cluster's coordination service. A nil session with a nil error means
// none; the request then fails as if no publisher existed.
type Upstream interface {
	Session(ctx context.Context, ns wire.Namespace) (*moqt.Session, error)
}

// UpstreamSet is an Upstream that stands for several publishers at once,
// each of which may have some of a namespace's tracks: a cluster's other
// relays. The relay asks Sessions, not Session, for a track's publishers,
// and subscribes to every session returned (§7.5: a SUBSCRIBE goes to all
// matching publishers) as well as to the sessions connected to it that
// announced a prefix of the namespace; FETCH and TRACK_STATUS try them in
// turn. A plain Upstream is asked only when no connected session
// announced one.
type UpstreamSet interface {
	Upstream
	// Sessions returns the sessions to ask for a track under ns; none
	// (nil, nil) when it knows of no publisher. RequestPublished(ctx)
	// tells whether sessions connected to the relay announced it already,
	// so that Sessions need not wait for publishers it does not know yet.
	Sessions(ctx context.Context, ns wire.Namespace) ([]*moqt.Session, error)
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

	// Upstream is asked for tracks no connected session publishes (an
	// UpstreamSet, for every track). Nil: none. The ctx of its Session call tells which request asks
	// (RequestSession, RequestTrack).
	Upstream Upstream
	// UpstreamTracksOnly keeps namespaces from travelling to and from
	// Upstream: nothing announced here is announced there, and no
	// SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS is asked there; SUBSCRIBE,
	// FETCH and TRACK_STATUS still are. For an Upstream that is not one
	// relay but many, such as a cluster, whose namespaces the relay learns
	// from elsewhere (Relay.OfferNamespace) and whose registry hears of
	// this relay's through Observer.
	UpstreamTracksOnly bool

	// Observer, if set, is told of the namespaces and tracks published
	// at the relay as they come and go.
	Observer Observer

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
	// KeepEnded is how long a track's cache outlives the track once its
	// publishers ended it (PUBLISH_DONE, or their sessions' end), so that
	// a FETCH or TRACK_STATUS a moment later is still answered from it,
	// with the track's final Largest Object (and End Of Track, if its
	// publisher sent END_OF_TRACK), not refused for want of a publisher.
	// The track's MAX_CACHE_DURATION caps it (§10.3); the cache stays in
	// Cache.Budget, which takes from it as from any, and at most 1024
	// ended tracks are kept, the oldest released first. A new publisher
	// of the track releases it: a PUBLISH of it, an upstream SUBSCRIBE to
	// it Established, a PUBLISH_NAMESPACE covering it, or
	// Relay.OfferNamespace and Relay.RetryHeld. A SUBSCRIBE meanwhile is
	// served as for any track without a publisher: refused with
	// DOES_NOT_EXIST, or held for one (RENDEZVOUS_TIMEOUT), since
	// SUBSCRIBE_OK needs an Established upstream (§7.4). A Malformed
	// Track's cache is never kept (§12.1), nor one whose publisher ended
	// it with UNAUTHORIZED. Default: Cache.Duration, or 30 s without one;
	// negative: none.
	KeepEnded time.Duration

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

// withDefaults returns cfg with its zero fields set to their defaults.
func withDefaults(cfg Config) Config {
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
	switch {
	case cfg.KeepEnded < 0:
		cfg.KeepEnded = 0
	case cfg.KeepEnded == 0 && cfg.Cache.Duration > 0:
		cfg.KeepEnded = cfg.Cache.Duration
	case cfg.KeepEnded == 0:
		cfg.KeepEnded = 30 * time.Second
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
	return cfg
}
