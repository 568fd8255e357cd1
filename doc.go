// Package moqt implements Media over QUIC Transport (MoQT),
// draft-ietf-moq-transport-21 (ALPN "moqt-21"; "moqt-20" shares its wire
// format and is negotiated too), and drafts 18 and 19 ("moqt-18",
// "moqt-19"), chosen per session (Config.Versions, Session.Version), over
// raw QUIC and WebTransport.
//
// # Sessions
//
// A client calls Dial with a "moqt://host:port/path" URL (raw QUIC; the
// path and authority travel in SETUP) or an "https://host:port/path" URL
// (WebTransport). A server calls Listen, which serves both on one UDP port,
// and takes sessions from Server.Accept, or lets Server.Serve take every
// one when its Config.Handler does all the work (Serve also drains them
// with GOAWAY when its context ends). Either way the SETUP exchange is
// complete when the *Session is returned.
//
// TLS is configured in one place, Config.TLSConfig, for both: Listen needs a
// certificate in it, Dial verifies the server with it (nil: the system's
// roots). Both clone it and set the ALPNs they offer. A client can instead
// trust a server by the SHA-256 of its certificate, as browsers do with
// WebTransport's serverCertificateHashes: Config.ServerCertificateHashes,
// with the hash GenerateCertificate returns for the short-lived self-signed
// certificate it makes (ParseCertificateHash reads it as a server prints
// it). A server the client does not trust fails Dial with an error
// wrapping ErrUntrustedCertificate, which says why and what to set.
//
// A session stays up while it is idle: keep-alive PINGs
// (Config.KeepAlivePeriod, default 2 s) keep its connection within the
// idle timeout (Config.MaxIdleTimeout, default 6 s) for as long as the
// peer is reachable, and a peer that died without a word is noticed
// within their sum. Session.Close first delivers what was sent before it
// (within Config.CloseTimeout: it ends the subscriptions this end serves
// with PUBLISH_DONE GOING_AWAY and waits for the peer to finish what this
// end finished), then returns once the close is on the wire and the
// session's goroutines have ended, so a program may exit right after it.
// When the peer did not confirm everything within the timeout, Close
// still closes, and returns an error wrapping ErrCloseTimeout: what was in
// flight is lost, and the program can say so.
//
// # Connections of your own
//
// An application that makes its connections itself runs sessions over
// them: NewClientSession and NewServerSession over a raw QUIC connection
// (*quic.Conn) it dialed or accepted, NewWebTransportClientSession and
// NewWebTransportServerSession over a WebTransport session
// (*webtransport.Session) from its own dialer or HTTP/3 handler. They run
// the SETUP exchange with the Config as Dial and Listen do. The version is
// the one the connection negotiated, its ALPN or its WT-Protocol (§6.2),
// which must be one of Config.Versions: offer wire.ALPNs() in
// tls.Config.NextProtos or webtransport's ApplicationProtocols. A
// connection that negotiated none (or, raw QUIC, no QUIC DATAGRAM) is
// refused with an error and left as it is. Otherwise the session owns the
// QUIC connection, or the WebTransport session but not the QUIC connection
// under it, and closes it when it ends, with its code; a failed SETUP
// exchange closes it too. What makes the connection is the application's
// to set where it makes it: Config's TLSConfig, ServerCertificateHashes,
// HandshakeTimeout, receive windows, KeepAlivePeriod, MaxIdleTimeout,
// MaxIncomingStreams, MaxIncomingUniStreams and QlogDir do not apply.
//
// # Requests
//
// Outgoing requests are methods: Session.Subscribe returns the subscriber's
// end of a subscription (*Subscription), Session.TrackStatus a
// *TrackStatus, and LocalTrack.Publish offers a track with PUBLISH,
// returning the publisher's end (*ServedSubscription), as PublishTracks
// does for a peer's SUBSCRIBE_TRACKS, with its parameters;
// Session.PublishNamespace announces a namespace (*Announcement), and
// Session.SubscribeNamespace and SubscribeTracks discover namespaces and
// tracks under a prefix (*NamespaceSubscription). They block until the
// peer answers; a REQUEST_ERROR comes back as *RequestError.
//
// Incoming requests go to Config.Handler, in the manner of net/http: one
// goroutine per request, and the concrete type (*SubscribeRequest,
// *FetchRequest, *PublishRequest, *TrackStatusRequest,
// *PublishNamespaceRequest, *SubscribeNamespaceRequest) is answered with
// Accept or Reject (a SUBSCRIBE is accepted by the LocalTrack that serves
// it, LocalTrack.Accept, and a FETCH answered from it, LocalTrack.Fetch). Every request's Context ends when the peer gives it
// up, when it ends, or with the session. DefaultHandler rejects everything.
// A ServeMux routes requests by namespace prefix, the most specific
// registered prefix winning, as net/http's routes by path; relays and
// applications with many tracks route with it.
// A Handler that panics is recovered, as in net/http: the panic is logged
// with its stack to Config.Logger, the request ends with INTERNAL_ERROR (a
// REQUEST_ERROR if it was not answered yet, else a reset of its stream),
// and the session stays up.
//
// # Authorization tokens
//
// AUTHORIZATION_TOKENs travel in SETUP (Config.AuthorizationTokens) and in
// request parameters (wire.Params.AuthorizationTokens) (§8.9).
// wire.UseToken(wire.TokenTypeOutOfBand, value) makes the usual one: a
// credential whose kind (its Type) the endpoints agreed on;
// wire.RegisterToken and wire.UseTokenAlias send a long one once and name
// it by an alias afterwards. A peer may
// register tokens under aliases up to Config.MaxAuthTokenCacheSize bytes
// (default 0: no aliases); the session resolves them, so handlers see each
// request's tokens as Type and Value (Request.AuthorizationTokens,
// Session.PeerAuthorizationTokens) and reject with UNAUTHORIZED or
// EXPIRED_AUTH_TOKEN. Outgoing tokens are checked against what the peer has
// registered and its limit: a request that would break §8.9's rules fails
// with ErrAuthToken before anything is sent.
//
// # Concurrency
//
// Sessions, subscriptions and requests are safe for concurrent use. A
// session's goroutines — the stream accept loops, the control stream
// reader, one reader per request stream, one per handler call — all end
// when the session closes. Session.Close waits for them (at most 5 s, a
// guard against bugs), except the Handler calls: they are user code, may
// be the caller of Close, and learn of the end from the session's Context
// and the errors of their calls.
//
// A subscriber reads its objects, each a moqt.Object, either in arrival
// order across all its streams and datagrams (Subscription.ReadObject,
// bounded and back-pressured), or one subgroup stream at a time
// (AcceptSubgroup, then SubgroupReader.ReadObject into a reused buffer, or
// Next and Read or WriteTo for payloads that stream), with ReadDatagram
// for datagrams. Session.Fetch reads a past range of a track; a
// subscription's fill fetch streams (FILL_PARAMETERS, §3.4) come through
// Subscription.ReadObject, before the subscription's own objects, or one
// at a time from AcceptFill. Each method says who owns the payload it returns, and
// until when; a relay forwards objects without allocating per object.
//
// Objects go from the publisher's goroutine straight to the QUIC streams.
// A subscriber that cannot take them promptly while others of the same
// track can gets the rest queued and written by a goroutine of its own, so
// it does not hold up the others; see SubgroupWriter.
//
// # Cancellation and errors
//
// Blocking calls take a context; when it ends first, the request is
// cancelled on the wire (RESET_STREAM and STOP_SENDING, §6.4.2.3).
// Subscription.Close cancels a subscription; ServedSubscription.End ends
// one with PUBLISH_DONE, and LocalTrack.End all of a track's, in parallel:
// a subscriber that leaves its request stream unread has it reset with
// TOO_FAR_BEHIND after Config.PublishDoneTimeout. Session.Context is
// cancelled when the session ends, with the *SessionError (code, reason,
// which side) as its cause; every call blocked on the session, or made
// after, returns that same error, whether the session was closed here, by
// the peer, or died with its connection. A ServedSubscription's Context
// ends with its Err as cause, whatever ended it, the session included.
// Session.Shutdown drains with GOAWAY.
//
// Two error kinds reach the application: *SessionError ends the session,
// *RequestError ends one request. A session whose connection died without a
// MoQT close (an idle timeout, a stateless reset, a QUIC transport error)
// ends with a *SessionError whose Transport field, a *TransportError, says
// how (its Timeout method, and errors.As with quic-go's error types, tell
// the cases apart); Dial returns a *TransportError for a connection it could not make,
// and a server too busy to take one refuses it with QUIC's
// CONNECTION_REFUSED, which matches ErrConnectionRefused. A reset stream
// reports a *StreamError with its reset code (§12.5), from SubgroupReader
// reads and inside the error of a cancelled request. A subscription ended
// by its publisher reports *DoneError, whose Missing counts the data
// streams PUBLISH_DONE's Stream Count promised that never came (it then
// wraps ErrStreamsMissing, and ReadObject has yielded an entry saying so
// first); a REQUEST_ERROR or PUBLISH_DONE code
// this draft does not define is to be read as INTERNAL_ERROR (§13). Bad
// input from the peer never panics: it closes the session with the code
// the spec names, or rejects the one request. A
// publisher whose objects contradict one another sends a Malformed Track
// (§12.1): the subscription cancels itself and reports
// *MalformedTrackError. A subscription whose application leaves received
// data unread for longer than Config.ReadStallTimeout cancels itself too,
// so that its streams stop holding the connection's flow control, and
// reports an error wrapping ErrFellBehind. Objects outside a
// subscription's filters are never delivered to it.
//
// # Logging
//
// Sessions log to Config.Logger with log/slog: a stable message per
// subsystem ("moqt: session", "moqt: request", …), an "event" attribute
// saying what happened ("start", "end", "goaway_sent", …), and stable
// attribute keys; every session's records carry its role, transport,
// version and remote address. Each session's start and end is logged at
// Info (its end at Warn when its code is not NO_ERROR), a Handler's
// panic at Error, single requests at Debug. docs/logging.md in the
// repository lists every record of this package and of the relay
// package, with its attributes and when it is emitted.
//
// # Limits
//
// Control messages are at most 65535 bytes, names at most 4096, reason
// phrases 1024 (§8, §9). Requests that arrive before the peer's SETUP wait
// in their streams' flow-control windows; the number of streams is bounded
// by the QUIC stream limits (Config.MaxIncomingStreams and
// MaxIncomingUniStreams, 100 each by default). A Server holds at most
// ServerOptions.MaxPendingSessions (default 64) connections that are
// setting up (WebTransport's CONNECT, then SETUP) or wait for Accept. A
// newcomer that finds them all taken displaces the oldest connection still
// setting up from the source (IPv4 address, IPv6 /64) that holds the most,
// so one host cannot lock others out; sessions waiting for Accept are never
// displaced, and a server full of them refuses connections: accepting is
// therefore not optional (Server.Serve does it). MAX_REQUEST_UPDATES and MAX_FILTER_RANGES are
// set in Config (the peer's MAX_FILTER_RANGES is kept: range filters past
// it fail with ErrFilterRanges before they are sent). No subscriber holds
// up a publisher's write for longer than Config.SubscriberGrace, even when
// it is the only one: what it cannot take is queued, and a subscription
// whose queue would pass MaxSubscriberBacklog, or that takes nothing for a
// whole grace, ends with PUBLISH_DONE TOO_FAR_BEHIND, its streams reset
// with TOO_FAR_BEHIND. What is queued for one peer across its
// subscriptions and namespace requests is bounded too
// (MaxSessionBacklog, 16 MiB), and so is what a Server's sessions queue
// together (SharedBacklog, 256 MiB for the sessions of one Listen): the
// subscription whose write would pass a bound ends with PUBLISH_DONE
// EXCESSIVE_LOAD, and only a session holding more than its fair share of
// the shared budget is refused. SubgroupWriter.Close and Reset interrupt
// a write in progress.
// On the receive side, MaxPendingBytes bounds the memory of all streams
// that arrived before their Track Alias, and a unidirectional stream must
// deliver its header within DataStreamTimeout, counted only while this end
// holds none of the peer's data unread and none arrives. The peer's
// REQUEST_UPDATEs held until answered (before their request's answer, or
// while OnUpdate runs) hold at most 64 KiB per request and count against
// MaxSessionBacklog; one past that is refused with EXCESSIVE_LOAD, ending
// its request (§9.5.1). A LocalTrack's cache is bounded by its
// CacheLimits, and the caches of many tracks together by a CacheBudget
// they share (a relay's is 256 MiB by default).
//
// The codec for every control message and data-plane format lives in the
// wire subpackage, which imports only the standard library.
package moqt
