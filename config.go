package moqt

import (
	"crypto/tls"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Config configures a Session. A nil *Config and every zero field mean the
// documented default.
type Config struct {
	// TLSConfig configures TLS for Dial and Listen alike. Listen needs a
	// certificate in it (Certificates, GetCertificate or
	// GetConfigForClient; GenerateCertificate makes one for development).
	// For Dial it may be nil: the system's roots then verify the server.
	// Both work on a clone and set its NextProtos to the ALPNs they offer.
	TLSConfig *tls.Config

	// Versions lists the drafts to offer or accept, preferred first: as
	// ALPN on raw QUIC, in WT-Available-Protocols on WebTransport (the
	// server picks by its own order on raw QUIC, by the client's on
	// WebTransport). Default: wire.Versions, moqt-21, moqt-20, moqt-19,
	// moqt-18. Session.Version says which was negotiated; what differs
	// between them is in docs/drafts.md.
	Versions []wire.Version

	// Implementation is sent as the MOQT_IMPLEMENTATION Setup Option (§9.1.5).
	// Default: "moqt-go". Set DisableImplementation to send none.
	Implementation        string
	DisableImplementation bool

	// MaxRequestUpdates is sent as MAX_REQUEST_UPDATES (§9.1.7): how many
	// unanswered REQUEST_UPDATEs the peer may have on one request stream.
	// 0, the default, means no limit.
	MaxRequestUpdates uint64

	// MaxFilterRanges is sent as MAX_FILTER_RANGES (§9.1.6): how many Ranges
	// the peer may send in the range filters of one request. Default 0: the
	// peer may not send range filters.
	MaxFilterRanges uint64

	// AuthorizationTokens are sent in SETUP (§9.1.4). Only USE_VALUE and
	// REGISTER tokens may be used there, each alias and each Type and
	// Value once; Dial and Listen refuse others. A REGISTER that does not
	// fit in the peer's MAX_AUTH_TOKEN_CACHE_SIZE is used as USE_VALUE by
	// the peer, and its alias is then unknown to later requests.
	AuthorizationTokens []wire.Token

	// MaxAuthTokenCacheSize is sent as MAX_AUTH_TOKEN_CACHE_SIZE (§9.1.3):
	// how many bytes of authorization tokens (16 + the value's length
	// each) the peer may register under aliases. A registration past it
	// closes the session with AUTH_TOKEN_CACHE_OVERFLOW. Default 0: the
	// peer may not use aliases.
	MaxAuthTokenCacheSize uint64

	// SetupTimeout bounds how long the session waits for the peer's SETUP
	// before closing with CONTROL_MESSAGE_TIMEOUT. A Server also closes,
	// with H3_NO_ERROR, an HTTP/3 connection that has not opened its
	// WebTransport session this long after its QUIC handshake. Default 10s.
	SetupTimeout time.Duration

	// StreamReceiveWindow and ConnectionReceiveWindow, when set, fix the
	// QUIC flow-control receive windows of the connections Dial and
	// Listen make, instead of quic-go's auto-tuned defaults. Small windows
	// make a receiver hold back its publisher.
	StreamReceiveWindow, ConnectionReceiveWindow uint64

	// HandshakeTimeout bounds Dial's transport handshake. Default 10s.
	HandshakeTimeout time.Duration

	// AliasWait bounds how long a data stream or datagram whose Track
	// Alias is not known yet waits for the SUBSCRIBE_OK or PUBLISH that
	// names it (§3.1.2). Default 2s. A stream waits longer while one of
	// this end's SUBSCRIBEs is unanswered: its SUBSCRIBE_OK may be what
	// names it, delayed on a lossy path (within MaxPendingStreams and
	// MaxPendingBytes, as ever).
	AliasWait time.Duration
	// MaxPendingStreams bounds how many such streams wait at once; more are
	// refused with STOP_SENDING EXCESSIVE_LOAD. Default 64.
	MaxPendingStreams int
	// MaxPendingBytes bounds the bytes read ahead, in total, from streams
	// waiting for their alias. They are read rather than left unread so
	// that they can never starve the control streams of flow control
	// (§11.3.1); the bytes count until the application reads them, even
	// after the alias is known, and a stream that would exceed the bound
	// is stopped with EXCESSIVE_LOAD. Default 1 MiB.
	MaxPendingBytes int
	// MaxPendingDatagrams bounds how many such datagrams are held; more are
	// dropped, as §11.2 allows. Default 256.
	MaxPendingDatagrams int
	// MaxEarlyObjects bounds how many objects a PUBLISH sends before its
	// PUBLISH_OK arrives (§3.1); later ones wait for the answer. Default
	// 64.
	MaxEarlyObjects int
	// DoneLinger is how long, after PUBLISH_DONE, a subscription keeps
	// waiting for its streams once none of its data has come for that
	// long: for late streams (§9.9), and for the ones open to be read
	// before this end finishes its request stream. Default 2s.
	DoneLinger time.Duration
	// Slow subscribers (see SubgroupWriter). No subscriber holds up
	// another, or a publisher it cannot keep pace with while another
	// subscriber does, for longer than SubscriberGrace:
	// what its streams cannot take by then is queued for it, and a
	// subscription that falls too far behind ends with PUBLISH_DONE
	// TOO_FAR_BEHIND, its data streams reset with TOO_FAR_BEHIND first.
	//
	// MaxSubscriberBacklog bounds the bytes queued for one subscription
	// this end serves, across its data streams (objects of a PUBLISH
	// waiting for its answer included); a subscription whose queue would
	// pass it is too far behind. Default 4 MiB. What a stream that keeps
	// up holds on its way to the transport (up to 16 KiB, gathered into
	// one Write) is in flight, not queued; a stream is behind once a
	// write's wait for it is over. Once an object written
	// whole (SubgroupWriter.WriteObject) larger than half of it was queued,
	// the bound is twice the largest such object instead, here and in
	// MaxSessionBacklog: a subscriber may be one such object behind the
	// fastest, as a publisher that goes at the fastest's pace leaves the
	// others, but not two.
	MaxSubscriberBacklog int
	// MaxSessionBacklog bounds the bytes queued for the peer across every
	// subscription this end serves it (the backlogs above, and 8 KiB for
	// each data stream waiting for the peer's stream credit) and every
	// namespace request it serves (messages not yet written): a peer may
	// hold as many subscriptions as it may open request streams
	// (MaxIncomingStreams), and reading none of them must not make this
	// end hold that many MaxSubscriberBacklogs. The subscription whose
	// write would pass it ends with PUBLISH_DONE EXCESSIVE_LOAD, its
	// streams reset with EXCESSIVE_LOAD first; a namespace request is
	// reset with EXCESSIVE_LOAD. The other subscriptions go on: they may
	// be the ones the peer reads. Default: four times MaxSubscriberBacklog
	// (16 MiB), room for a few subscriptions a whole bound behind at once.
	//
	// The peer's REQUEST_UPDATEs held until answered (those that come
	// before their request's answer, or while OnUpdate decides an earlier
	// one) count against it too, each request's within 64 KiB (one update
	// is always held, whatever its size): an update past either bound is
	// refused with REQUEST_ERROR EXCESSIVE_LOAD, which ends its request as
	// a refused update does (§9.5.1).
	//
	// It is the largest part of what a peer alone can make a session
	// hold. With the defaults: 16 MiB queued and held here (up to about
	// twice that in heap while backlogs grow), 15 MiB of received bytes in
	// QUIC's connection window (see ConnectionReceiveWindow), 6.25 MiB of
	// control messages arriving on 100 request streams, 2 MiB of streams
	// and datagrams waiting for their alias (MaxPendingBytes and the rest),
	// under 1 MiB of request state and fetch buffers: about 40 MiB. What
	// the application asks for (subscriptions' arrival queues, fetches) is
	// its own choice.
	MaxSessionBacklog int
	// SharedBacklog bounds the bytes queued for the peers of every session
	// whose Config points to it, and decides, when they hold too much
	// together, which session is refused: one holding more than its fair
	// share, never one within it (see BacklogBudget). It is refused as
	// MaxSessionBacklog refuses. Default: Listen makes one of 256 MiB for
	// its sessions (a relay built with relay.New and served by one Server
	// is bounded by it); Dial uses none, the session being bounded by
	// MaxSessionBacklog alone.
	SharedBacklog *BacklogBudget
	// SubscriberGrace bounds how long a write to a track waits for
	// subscribers that take nothing. An object going to one subscription
	// is written with back-pressure: the write blocks while that
	// subscriber is slow, up to the grace, so a bulk publisher goes at its
	// subscriber's pace. An object going to several waits at most 5 ms for
	// each. If every one of them had to queue, the write then waits for
	// the first to catch up, a grace at a time while their queues move
	// (SubgroupWriter.SetWriteDeadline bounds the whole); a relay's write
	// of an object it received waits half a grace in all, counted from
	// the object's receipt, so that its own upstream does not find it
	// stalled. A subscription whose queued bytes are taken by none of its
	// streams for a whole grace (a subscriber that stopped reading, or
	// died) is too far behind, unless its connection is recovering from
	// loss meanwhile (the peer heard from, this end retransmitting): then
	// up to five graces. Default 2s.
	SubscriberGrace time.Duration

	// Subscription lifecycle (publisher side).
	//
	// PublishDoneTimeout bounds the write of a PUBLISH_DONE (§9.9) to a
	// subscriber that does not read its request stream; past it the
	// stream is reset with TOO_FAR_BEHIND, so that ending a subscription
	// (LocalTrack.End, ServedSubscription.End) never waits longer.
	// Default 2s.
	PublishDoneTimeout time.Duration
	// CloseTimeout bounds how long Session.Close waits for what was sent
	// before it to reach the peer: a QUIC close discards stream data in
	// flight, so Close first ends this end's subscriptions with
	// PUBLISH_DONE (their finished streams delivered) and waits for the
	// peer to finish every request this end finished. Default 2s;
	// negative closes at once, as CloseWithError does.
	CloseTimeout time.Duration
	// SharedTrackAliases makes concurrent subscriptions to one track in a
	// session share a Track Alias, as §3.1 allows. By default each
	// subscription gets an alias of its own: with a shared one, objects
	// still in flight for a subscription that is ending can pass for
	// those of a new one, and the subscriber must tell look-alike copies
	// apart by filter (§3.1.2).
	SharedTrackAliases bool

	// Request streams, bounded against the peer.
	//
	// ControlMessageTimeout bounds how long a control message on a request
	// stream takes to arrive whole: from the opening of a peer's request
	// stream to the end of its request, and from the first byte of any
	// later message, on any request stream or on the control stream after
	// SETUP (which SetupTimeout bounds), to its last. A message left
	// half sent holds a goroutine and a buffer for nothing, so the session
	// closes with CONTROL_MESSAGE_TIMEOUT (§12.2); the draft has no stream
	// reset code for it (§12.5). How long the peer takes to answer a
	// request is not bounded here: the request's context is. Default 10s.
	ControlMessageTimeout time.Duration

	// Transport: how long a quiet session lives, and how many streams the
	// peer may open. Applied to raw QUIC and WebTransport, by Dial and
	// Listen alike.
	//
	// KeepAlivePeriod is how often an idle connection sends a PING, so
	// that a session with nothing to say outlives the idle timeout for as
	// long as the peer is reachable. It is capped at half the idle
	// timeout. Default 2s; negative disables keep-alive.
	KeepAlivePeriod time.Duration
	// MaxIdleTimeout ends a session whose connection received nothing for
	// this long (the smaller of both endpoints' values applies, RFC 9000
	// §10.1); the session then ends with a *SessionError whose Transport
	// says idle timeout. With the keep-alive's PINGs, which a live peer
	// acknowledges, it is how a peer that died without a word (a killed
	// process, a lost network) is noticed: within KeepAlivePeriod plus
	// MaxIdleTimeout of its last packet, 8s by default. Default 6s.
	MaxIdleTimeout time.Duration
	// MaxIncomingStreams bounds the request streams the peer may have open
	// at once, MaxIncomingUniStreams its control and data streams; a
	// request or data stream past them waits for credit. On WebTransport
	// they count HTTP/3's streams too: a server's MaxIncomingStreams the
	// CONNECT stream, and MaxIncomingUniStreams HTTP/3's 3 unidirectional
	// streams. Default 100 each.
	MaxIncomingStreams, MaxIncomingUniStreams int64
	// packetConn, if set, carries Dial's connection instead of a socket
	// of its own: tests close it to play a process that exits.
	packetConn net.PacketConn

	// The subscriber's receive side.

	// DataStreamTimeout bounds how long a unidirectional stream from the
	// peer may take to deliver its type and header; past it the session
	// is closed with DATA_STREAM_TIMEOUT (§12.2). Only time in which the
	// peer could have sent them counts: not while this end holds the
	// peer back, with data it has not read yet on any of the session's
	// data streams (an application reading slowly or not yet, a fetch
	// stream held for its FETCH_OK; the connection's flow-control window
	// may be full), nor while data keeps arriving on them (the peer may
	// send higher-priority streams first). The session is closed once a
	// header has been missing for a whole DataStreamTimeout, checked every
	// quarter of it, in which every data stream had a read waiting and
	// nothing arrived. Default 10s.
	DataStreamTimeout time.Duration
	// ReadStallTimeout bounds how long a subscription's received data may
	// wait for its application: a stream AcceptSubgroup has not returned,
	// or one it returned whose data is left unread (not inside Next or
	// Read, with payload or buffered bytes waiting), while the application
	// takes and reads none of the subscription's streams: one that reads
	// its subgroups one after another is not behind. Past it the
	// subscription is cancelled, its streams stopped with EXCESSIVE_LOAD,
	// and it ends with an error wrapping ErrFellBehind. Unread streams
	// would otherwise fill the connection's flow-control window and stall
	// every other subscription and the control messages, the publisher's
	// PUBLISH_DONE TOO_FAR_BEHIND included. A stream taken and not wanted
	// must be read to its end or closed. Default 10s; negative disables
	// the check.
	ReadStallTimeout time.Duration

	// Certificate pinning (Dial only).
	//
	// ServerCertificateHashes, when set, trusts a server by the SHA-256
	// of its certificate's DER encoding, as a browser does with
	// WebTransport's serverCertificateHashes option, instead of by a
	// chain to TLSConfig's roots: the leaf certificate must hash to one of
	// them, be valid now (TLSConfig.Time, if set, tells the time), and
	// have a validity period of at most 14 days. Neither
	// the chain nor the server name is then checked; TLSConfig's own
	// VerifyConnection, if any, still runs after this check. Dial fails
	// with an error naming the hash when none matches. GenerateCertificate
	// returns the hash of the certificate it makes.
	ServerCertificateHashes [][32]byte

	// Reading whole objects.
	//
	// MaxObjectSize bounds the payload that ReadObject, on a
	// SubgroupReader or a Subscription, reads into memory as one object;
	// a larger one fails with ErrObjectTooLarge (SubgroupReader.Read and
	// WriteTo move payloads of any size). Default 16 MiB.
	MaxObjectSize int

	// Serving FETCH and fill fetch streams (publisher side).
	//
	// MaxServedFetches bounds the FETCHes and fill fetch streams this end
	// serves at once in a session, each holding one stream and one
	// object's worth of memory: a FETCH past it is refused with
	// REQUEST_ERROR EXCESSIVE_LOAD, a fill past it is reset right after
	// its FETCH_HEADER with EXCESSIVE_LOAD (§3.4.1). Default 16. A fetch
	// stream's write waits for the subscriber at most SubscriberGrace;
	// one that takes nothing for that long is reset with TOO_FAR_BEHIND.
	MaxServedFetches int
	// FillTimeout is the total time a FETCH or fill without FILL_TIMEOUT
	// waits for objects whose publication has begun but is not complete
	// before reporting them as timed out (§9.20.6). Default 2s.
	FillTimeout time.Duration
	// Fill fetch streams, as Subscription.ReadObject reads them (§3.4).
	//
	// FillWait bounds how long ReadObject holds a subscription's objects
	// back for its initial fill fetch stream to open, once SUBSCRIBE_OK
	// promised one, and then for each of its entries; past it the fill is
	// reported failed and the objects flow (the rest of the fill follows
	// as it comes). The held objects fill the connection's flow-control
	// window, and may be what keeps the fill from coming. Default 5s.
	FillWait time.Duration

	// Namespace requests (PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE,
	// SUBSCRIBE_TRACKS).
	//
	// MaxActiveNamespaces bounds the namespaces a NamespaceSubscription
	// holds active: a peer that publishes more gets the request cancelled
	// with EXCESSIVE_LOAD. It also bounds the messages queued for a
	// requester on one namespace request this end serves: past it, the
	// requester is too far behind and its stream is reset with
	// TOO_FAR_BEHIND. Default 4096.
	MaxActiveNamespaces int

	// Handler serves requests the peer opens. Default: DefaultHandler.
	Handler Handler

	// Logger receives the session's logs (docs/logging.md lists them).
	// Default: slog.Default().
	Logger *slog.Logger

	// QlogDir, when set, makes every QUIC connection that Dial or Listen
	// makes write a qlog of its QUIC events (and HTTP/3's, under
	// WebTransport) to a file of its own in this directory, which is
	// created if need be: JSON-SEQ named <ODCID>_<client|server>.sqlog, as
	// quic-go writes for $QLOGDIR, for qvis and other qlog tools. A file is
	// complete once its connection has closed, and closing waits for it
	// (a second at most): Session.Close of a session this end closes,
	// Server.Close for every connection of the server. A file that cannot
	// be written is logged. For debugging: it costs CPU and disk per packet.
	QlogDir string

	// hooks lets the package's tests observe internal steps; nil outside
	// tests.
	hooks *sessionHooks
}

// sessionHooks are called at internal steps, for tests only. Each may be
// nil.
type sessionHooks struct {
	// requestWaitsForSetup runs when a peer's request stream has arrived
	// before the peer's SETUP and starts waiting for it (§6.3).
	requestWaitsForSetup func()
	// updateReceived runs when a REQUEST_UPDATE has been read from the
	// peer, before it is answered.
	updateReceived func()
	// deliveryTimedOut runs when a data stream has been reset with
	// DELIVERY_TIMEOUT (§5.2).
	deliveryTimedOut func()
	// backlogEnded runs when the goroutine writing a data stream's backlog
	// ends: the backlog was written, or dropped with its stream.
	backlogEnded func()
	// publisherWaits runs when a SubgroupWriter waits because every
	// stream it writes to is backlogged.
	publisherWaits func()
	// headerSent runs when a SubgroupWriter has sent an object's header
	// to one of its streams, before the next stream gets it.
	headerSent func()
	// graceExpired runs when a fan-out write to a data stream of ss passed
	// writeGrace and the rest of it went to the stream's backlog.
	graceExpired func(ss *ServedSubscription)
	// streamRouted runs when a received subgroup stream has been routed
	// to a subscription, before it is handed to it.
	streamRouted func()
	// sessionEnded runs in watchTransport once the session has ended,
	// before it unblocks the open requests.
	sessionEnded func()
	// trackStatusWritten runs when a TRACK_STATUS this end sends has been
	// written, before its FIN.
	trackStatusWritten func()
	// setupOver runs in a Server's setup once the session's SETUP
	// exchange is over, before it is queued for Accept.
	setupOver func()
}

// withDefaults returns a copy of c with every zero field set to its default.
func (c *Config) withDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	if len(out.Versions) == 0 {
		out.Versions = wire.Versions
	}
	if out.Implementation == "" {
		out.Implementation = "moqt-go"
	}
	if out.SetupTimeout == 0 {
		out.SetupTimeout = 10 * time.Second
	}
	if out.HandshakeTimeout == 0 {
		out.HandshakeTimeout = 10 * time.Second
	}
	if out.AliasWait == 0 {
		out.AliasWait = 2 * time.Second
	}
	if out.MaxPendingStreams == 0 {
		out.MaxPendingStreams = 64
	}
	if out.MaxPendingBytes == 0 {
		out.MaxPendingBytes = 1 << 20
	}
	if out.MaxPendingDatagrams == 0 {
		out.MaxPendingDatagrams = 256
	}
	if out.MaxEarlyObjects == 0 {
		out.MaxEarlyObjects = 64
	}
	if out.DoneLinger == 0 {
		out.DoneLinger = 2 * time.Second
	}
	if out.MaxSubscriberBacklog <= 0 {
		out.MaxSubscriberBacklog = 4 << 20
	}
	if out.MaxSessionBacklog <= 0 {
		out.MaxSessionBacklog = 4 * min(out.MaxSubscriberBacklog, math.MaxInt/4)
	}
	if out.PublishDoneTimeout <= 0 {
		out.PublishDoneTimeout = 2 * time.Second
	}
	if out.CloseTimeout == 0 {
		out.CloseTimeout = 2 * time.Second
	}
	if out.ControlMessageTimeout <= 0 {
		out.ControlMessageTimeout = 10 * time.Second
	}
	// Transport.
	if out.KeepAlivePeriod == 0 {
		out.KeepAlivePeriod = 2 * time.Second
	}
	if out.MaxIdleTimeout <= 0 {
		out.MaxIdleTimeout = 6 * time.Second
	}
	if out.MaxIncomingStreams <= 0 {
		out.MaxIncomingStreams = 100
	}
	if out.MaxIncomingUniStreams <= 0 {
		out.MaxIncomingUniStreams = 100
	}
	if out.SubscriberGrace <= 0 {
		out.SubscriberGrace = defaultSubscriberGrace
	}
	// The subscriber's receive side.
	if out.DataStreamTimeout <= 0 {
		out.DataStreamTimeout = 10 * time.Second
	}
	if out.ReadStallTimeout == 0 {
		out.ReadStallTimeout = 10 * time.Second
	}
	// Reading whole objects.
	if out.MaxObjectSize <= 0 {
		out.MaxObjectSize = 16 << 20
	}
	// Serving FETCH and fill fetch streams.
	if out.MaxServedFetches <= 0 {
		out.MaxServedFetches = 16
	}
	if out.FillTimeout <= 0 {
		out.FillTimeout = 2 * time.Second
	}
	// Fill fetch streams.
	if out.FillWait <= 0 {
		out.FillWait = 5 * time.Second
	}
	// Namespace requests.
	if out.MaxActiveNamespaces <= 0 {
		out.MaxActiveNamespaces = 4096
	}
	if out.Handler == nil {
		out.Handler = DefaultHandler
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// alpns returns the protocol identifiers of c.Versions, preferred first.
func (c *Config) alpns() []string {
	out := make([]string, 0, len(c.Versions))
	for _, v := range c.Versions {
		out = append(out, v.ALPN())
	}
	return out
}

// transportOptions returns the QUIC settings to give the transport.
func (c *Config) transportOptions() transport.Options {
	o := transport.Options{KeepAlivePeriod: max(c.KeepAlivePeriod, 0), MaxIdleTimeout: c.MaxIdleTimeout,
		MaxIncomingStreams: c.MaxIncomingStreams, MaxIncomingUniStreams: c.MaxIncomingUniStreams}
	if c.QlogDir != "" {
		log := c.Logger
		o.QlogDir = c.QlogDir
		o.QlogFailed = func(err error) { log.Warn("moqt: qlog", "event", "failed", "err", err) }
	}
	return o
}

// windows returns the receive windows to give the transport.
func (c *Config) windows() transport.Windows {
	return transport.Windows{Stream: c.StreamReceiveWindow, Connection: c.ConnectionReceiveWindow}
}
