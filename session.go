package moqt

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/internal/goroutines"
	"github.com/moqt-go/moqt/internal/priority"
	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Lock order: every mutex of the package, in one place.
//
// A lock may be taken while holding one listed above it in the same
// chain, never the other way round; locks marked leaf take no other lock
// and call out to nothing that might. No lock is held across a call into
// the application (the Handler, AcceptOptions.OnUpdate) except
// SubgroupWriter.turn, which LocalTrack.OnObject's function runs under.
//
// The control side:
//
//   - incoming.once, a lock in effect (sync.Once holds one while its
//     function runs): a request's one answer is made and written under
//     it, so a second answer waits for the first and then finds it sent.
//     Under it: LocalTrack.mu and the ServedSubscription's locks, since
//     LocalTrack.Accept joins the track there; requestStream.wmu; and, on
//     a REQUEST_ERROR, the termination of the request's subscription.
//   - updateQueue.turn (request_update_sent.go), a lock in effect, held by
//     the REQUEST_UPDATE being queued and written: its tokens are checked
//     and it is queued and written in the turn, so that the peer sees
//     tokens in the order they were checked (§8.9) and answers, which
//     come back in order, match updates in order. Under it, one at a
//     time: the owner's lock (Subscription.mu, fetchReq.mu,
//     nsRequester.mu), authtoken.Sent's lock (Session.sentTokens) and
//     requestStream.wmu.
//   - The owner's lock, then authtoken.Sent's lock: an answer settles its
//     update's tokens under the lock that guards the queue.
//   - requestStream.wmu: serializes a request stream's writes and guards
//     its FIN and cancel flags. It is held across the stream's Write,
//     Close, CancelWrite and CancelRead, never across a read; cancel sets
//     a past write deadline before taking it, so a Write blocked on the
//     peer's flow control never keeps cancel waiting. Under it only
//     Session.streamError runs, which cancels the session's Context and
//     takes no lock.
//   - controlStream.mu: serializes writes to this endpoint's control
//     stream (SETUP, GOAWAY, the probe for the stream's end); the same
//     holds as for requestStream.wmu, without the deadline: only GOAWAY
//     follows SETUP, once, and a blocked write ends with the session.
//
// The publisher's data side. Per object, a writer takes its own
// SubgroupWriter.turn and, once per object, the lock of LocalTrack.sent
// (what the track published, for checkSent in malformed.go), then
// LocalTrack.mu (the Largest Object); what it reads of each subscription (state, filter, parameters,
// the subscription list) is atomic, so the per-subscription cost is no
// lock while the subscribers keep up. turn is held while the writer
// queues an object for each stream and waits for room, which its bounds
// end and Close and Reset interrupt; the streams' drains write with no
// lock held.
//
//	SubgroupWriter.turn
//	  LocalTrack.sent's lock     (leaf: malformed.Sent, taken alone by WriteDatagram)
//	  LocalTrack.mu              (join, leave, the Largest Object)
//	    subState.mu              (a state move: establish in join)
//	    ServedSubscription.mu    (attachTrack; filter, parameters, streams)
//	  ServedSubscription.openMu  (read-locked to open a stream)
//	    ServedSubscription.mu
//	  sendq.Queue.mu, subgroupTimers.mu, sendq.Pending.mu, the session's
//	  priority table
//
// A LocalTrack's cache (internal/cache): LocalTrack.mu, then the cache's
// mu (noteObject begins each object there). A cache that passes its
// CacheBudget reclaims once its own mu is released, under LocalTrack.mu
// after a Begin: cache.Budget.mu, then each cache's mu in turn. Nothing
// holding Budget.mu or a cache's mu takes another lock.
//
// A fetch stream (fetch_writer.go) has the same shape: FetchWriter.turn is
// held across its stream's writes, each bounded by a write deadline, and
// Reset interrupts the holder without taking it; under turn a fill's
// stream opens (ServedSubscription.openMu, then .mu) and the priority
// table is updated. FetchWriter.mu and FetchRequest.mu are leaves.
//
// sendq.Watchdog.mu (the FETCH writer's) is taken alone, by the watchdog
// and by writers arming it, and never while taking another; a queue
// calls its stream's owner (delivery timers, whose timer has no lock)
// and charges its Group's atomic budgets under sendq.Queue.mu.
// sendq.Pending.mu is held
// while a stream that just opened is given what was asked of it before
// (priority, deadline, FIN, reset): calls that queue and do not block.
//
// The subscriber's data side:
//
//   - readahead.Pipe.mu, then aliasRoutes.mu: a pipe charges and releases the
//     bytes it reads ahead under its own lock (it copies only what its
//     bufio.Reader holds already: no read under it).
//   - aliasRoutes.mu (Session.routes), leaf: the Track Alias table and
//     what waits for an alias. Held datagrams are delivered after it is
//     released, since a malformed one cancels its subscription.
//   - Subscription.mu, on the data side a leaf: counters, stop codes and
//     timers, the stall watch reading its readers' atomics.
//   - arrival.mu (ReadObject's queue), leaf.
//   - the lock of Subscription.checks (malformed.Track), leaf: taken by
//     the Malformed Track checks of the subscription's streams,
//     datagrams and fill streams.
//
// Fetches (fetch_client.go, subscription_fill.go): Subscription.mu, then
// fetchData.mu (a fill's window at SUBSCRIBE_OK), then aliasRoutes.mu (a
// held stream's slot); fetchRoutes.mu (Session.fetches) and fetchReq.mu
// are leaves.
//
// Leaves anywhere: openRequests.mu (the open requests, for Shutdown and
// the session's end), requestIDSpace.mu (the peer's Request IDs),
// goroutines.mu (the session's goroutines, for Close), ownTracksRequests.mu
// (Session.ownTracks, this end's SUBSCRIBE_TRACKS), acceptQueue.mu
// (sessions waiting for Server.Accept; their places are given back after
// it is released), pending.Pool's lock (the Server's connection places),
// ServeMux.mu (its routes;
// read-locked while routing), authtoken.Cache's lock (Session.peerTokens),
// authtoken.Sent's lock, priority.Table's lock (Session.prio; under it the
// streams' SetPriority, which takes only the transport's own locks).
//
// This endpoint's next Request ID and whether it sent GOAWAY are atomics,
// and the peer's GOAWAY is a channel closed once: they need no lock.

// Session is one MoQT session over a QUIC connection or a WebTransport
// session (§6). It is safe for concurrent use.
//
// A Session runs one goroutine accepting request streams, one accepting
// unidirectional streams, one reading the peer's control stream, one per
// request stream and one per request handed to the Handler. All of them end
// when the session closes; Close waits for all but the Handler calls.
type Session struct {
	conn     transport.Conn
	version  wire.Version
	rules    draftRules // what differs in the negotiated draft
	isClient bool
	cfg      *Config
	log      *slog.Logger
	handler  Handler
	// path and authority are the URI parts the client asked for: from the
	// WebTransport request, or from the PATH and AUTHORITY Setup Options.
	path, authority string
	// checkSetup lets a Server refuse a client's SETUP (INVALID_PATH, …).
	checkSetup func(*wire.Setup) error

	ctx        context.Context
	cancel     context.CancelCauseFunc
	goroutines goroutines.Group // the session's own, which Close waits for
	// handlers counts running Handler calls, which Close does not wait
	// for: user code, possibly the caller of Close.
	handlers sync.WaitGroup

	setupDone chan struct{} // closed when the peer's SETUP has been accepted
	peerSetup *wire.Setup   // written once, before setupDone is closed
	// peerSetupTokens are the peer's SETUP tokens, resolved; written once,
	// before setupDone is closed.
	peerSetupTokens []AuthToken

	peerTokens *tokenCache // the peer's token registrations (§8.9)
	sentTokens *sentTokens // this endpoint's registrations with the peer

	ctrl controlStream // this endpoint's control stream, and the claim on the peer's
	away goawayState   // GOAWAY, both ways (§9.2)
	// goawayFirst, set by a draining Server before the handshake, is the
	// GOAWAY sent right after this end's SETUP; nil for none.
	goawayFirst *goawayFirst
	// closing is set once Close lingers: the peer's new requests are
	// refused with GOING_AWAY.
	closing atomic.Bool

	requests *openRequests   // the open requests, both ways, for Shutdown's drain
	ids      *requestIDSpace // Request IDs, both ways (§6.4.2.1)

	routes aliasRoutes // Track Aliases and what waits for one (data plane)
	// fetches routes FETCH_HEADER streams by Request ID (fetch_route.go).
	fetches fetchRoutes
	// joins are the subscriptions a peer's Joining FETCH may name, on 18
	// and 19 (fetch_join.go).
	joins joinTable

	prio priority.Table // urgency of this session's data streams (raw QUIC)
	// hold tells whether this end holds the peer's data streams back, for
	// the header timeout (session_data_hold.go).
	hold holdWatch
	// uni bounds the peer's unidirectional streams this end holds
	// (session_data_hold.go).
	uni uniSlots
	// serving counts the FETCHes and fill fetch streams served now, up to
	// Config.MaxServedFetches (fetch_serve.go).
	serving fetchServing
	// nsPrefixes are the prefixes of the peer's open SUBSCRIBE_NAMESPACE
	// and SUBSCRIBE_TRACKS requests (namespace_overlap.go).
	nsPrefixes prefixClaims
	// tracks holds the one subscription per track and role of a draft
	// that allows no more (draftRules.onePerTrack, draft_tracks.go).
	tracks trackClaims
	// ownTracks are this end's open SUBSCRIBE_TRACKS, whose Range filters
	// the subscriptions of their PUBLISHes take (namespace_tracks.go).
	ownTracks ownTracksRequests
	// backlog counts what is queued for the peer, within
	// Config.MaxSessionBacklog and Config.SharedBacklog (internal/sendq).
	backlog sendq.Session
}

// newSession wraps conn. The caller runs handshake next.
func newSession(conn transport.Conn, version wire.Version, isClient bool, cfg *Config) *Session {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{
		conn:       conn,
		version:    version,
		rules:      rulesOf(version),
		isClient:   isClient,
		cfg:        cfg,
		handler:    cfg.Handler,
		ctx:        ctx,
		cancel:     cancel,
		setupDone:  make(chan struct{}),
		away:       goawayState{in: make(chan struct{})},
		requests:   newOpenRequests(ctx),
		routes:     newAliasRoutes(cfg),
		uni:        newUniSlots(cfg.MaxIncomingUniStreams),
		peerTokens: newTokenCache(cfg.MaxAuthTokenCacheSize),
		sentTokens: newSentTokens(),
	}
	role := "server"
	if isClient {
		role = "client"
		s.ids = newRequestIDSpace(0, 1) // the server's IDs are odd
	} else {
		s.ids = newRequestIDSpace(1, 0) // the client's IDs are even
	}
	// It draws on the shared backlog budget, if any, until it ends.
	context.AfterFunc(ctx, s.backlog.Init(cfg.MaxSessionBacklog, cfg.SharedBacklog.shared()))
	s.backlog.SetPath(conn.Path)
	over := "quic"
	if conn.WebTransport() {
		over = "webtransport"
	}
	s.log = cfg.Logger.With("role", role, "transport", over, "version", version.String(), "remote", conn.RemoteAddr().String())
	return s
}

// hook runs the test hook pick selects, if any.
func (s *Session) hook(pick func(*sessionHooks) func()) {
	if h := s.cfg.hooks; h != nil {
		if f := pick(h); f != nil {
			f()
		}
	}
}

// closeErr returns the session's close cause if it is closed, else err.
func (s *Session) closeErr(err error) error {
	if cause := context.Cause(s.ctx); cause != nil {
		return cause
	}
	return err
}

// Context is cancelled when the session ends; its cause is the
// *SessionError that ended it.
func (s *Session) Context() context.Context { return s.ctx }

// Version is the negotiated draft, one of Config.Versions: the session
// speaks its wire format and follows its rules (docs/design-notes.md,
// "Drafts 18 to 21").
func (s *Session) Version() wire.Version { return s.version }

// WebTransport reports whether the session runs over WebTransport.
func (s *Session) WebTransport() bool { return s.conn.WebTransport() }

// Path is the path and query the client asked for: in the PATH Setup
// Option on raw QUIC (§9.1.2), in the CONNECT request on WebTransport.
func (s *Session) Path() string { return s.path }

// Authority is the host and port the client asked for: in the AUTHORITY
// Setup Option on raw QUIC (§9.1.1), in the CONNECT request on
// WebTransport.
func (s *Session) Authority() string { return s.authority }

// PeerSetup returns the peer's SETUP: its Setup Options, including any
// AUTHORIZATION_TOKENs as sent, for the application to inspect.
// PeerAuthorizationTokens has the tokens resolved.
func (s *Session) PeerSetup() *wire.Setup { return s.peerSetup }

// PeerAuthorizationTokens returns the authorization tokens of the peer's
// SETUP, resolved (§9.1.4).
func (s *Session) PeerAuthorizationTokens() []AuthToken { return s.peerSetupTokens }

// StoreTokenError records that the token tok, registered by the peer under
// an alias, now fails with code: every later request or update that uses
// the alias with USE_ALIAS is rejected with code before it reaches the
// Handler (§8.9). The peer may still delete the alias. Use it for errors the
// token cannot recover from: EXPIRED_AUTH_TOKEN, or UNAUTHORIZED or
// MALFORMED_AUTH_TOKEN for a token that can never become valid. tok must
// come from this session's requests or SETUP; StoreTokenError reports false
// when it came without an alias.
func (s *Session) StoreTokenError(tok AuthToken, code wire.RequestErrorCode) bool {
	return s.peerTokens.refuse(tok, code)
}

// priorities returns the session's data stream priorities, or nil on
// WebTransport, where streams have none.
func (s *Session) priorities() *priority.Table {
	if s.conn.WebTransport() {
		return nil
	}
	return &s.prio
}

// acceptUniStreams dispatches the peer's unidirectional streams by their
// stream type (§6.4.1).
//
// Each stream takes one of the session's uniSlots first, and holds it
// until it is read to its end or stopped (see uniSlots).
func (s *Session) acceptUniStreams() {
	for {
		slot, ok := s.uni.acquire(s.ctx)
		if !ok {
			return
		}
		str, err := s.conn.AcceptUniStream(s.ctx)
		if err != nil {
			slot.release()
			return
		}
		s.goroutines.Go(func() {
			err := s.serveUniStream(str, slot)
			if !slot.handedOver() {
				slot.release()
			}
			if err != nil {
				s.fail(err)
			}
		})
	}
}

// serveUniStream reads a unidirectional stream's type and routes it
// (§6.4.1). The control stream's type is SETUP's own Type, 0x2F00, so a
// control stream cannot start with any other message: a stream that starts
// with another message's bytes is a stream of that type. Message types
// that are not stream types (SUBSCRIBE 0x03, REQUEST_OK 0x07, the old
// CLIENT_SETUP 0x20 and 0x40, …) close the session with PROTOCOL_VIOLATION;
// those that coincide with a data stream type (GOAWAY 0x10 is a
// SUBGROUP_HEADER type, REQUEST_ERROR 0x05 is FETCH_HEADER) are read as
// data streams.
//
// The type and the header must arrive within Config.DataStreamTimeout,
// counted only while the peer could have sent them (session_data_hold.go);
// otherwise the session is closed with DATA_STREAM_TIMEOUT (§12.2), which
// ends the read: a stream stalled there would hold its goroutine and
// buffer for the rest of the session.
func (s *Session) serveUniStream(raw transport.ReceiveStream, slot *uniSlot) error {
	str := s.hold.watch(raw)
	timer := s.timeHeader()
	br := getReader(str)
	h, err := wire.ReadStreamHeader(br)
	if !timer.arrived() {
		str.CancelRead(uint64(wire.ResetSessionClosed))
		return nil // the session is closing for it
	}
	switch {
	case err == nil:
	case isCleanEOF(err):
		// A stream that ends before its type carries nothing.
		str.CancelRead(uint64(wire.ResetCancelled))
		return nil
	default:
		// An unknown stream type or a malformed header closes the session
		// (§6.4.1, §11.3.1); a reset only drops the stream.
		return s.dataStreamError(str, err)
	}
	switch h.Type {
	case wire.StreamControl:
		// The stream type is the SETUP message's Type (§9.1): put it back
		// in front of the message.
		prefix := wire.AppendVarint(nil, wire.ControlStreamType)
		ctl := &controlReader{r: io.MultiReader(bytes.NewReader(prefix), br), s: s}
		defer ctl.stop()
		return s.readControl(wire.NewMessageReader(ctl), ctl)
	case wire.StreamSubgroup:
		str.startData()
		return s.receiveSubgroup(str, br, h.Subgroup, slot)
	case wire.StreamFetch:
		str.startData()
		return receiveFetch(s, str, br, h.Fetch)
	default:
		// Padding is discarded (§11.5.1).
		str.CancelRead(uint64(wire.ResetCancelled))
		return nil
	}
}
