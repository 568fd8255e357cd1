package moqt

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Config configures a Session. A nil *Config and every zero field mean the
// documented default.
type Config struct {
	// TLSConfig is used by Dial. Dial adds the ALPNs it needs to a clone.
	TLSConfig *tls.Config

	// Versions lists the drafts to offer or accept, preferred first.
	// Default: wire.Versions (moqt-21, moqt-20).
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
	// before closing with CONTROL_MESSAGE_TIMEOUT. Default 10s.
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
	// names it (§3.1.2). Default 2s.
	AliasWait time.Duration
	// MaxPendingStreams bounds how many such streams wait at once; more are
	// refused with STOP_SENDING EXCESSIVE_LOAD. Default 64.
	MaxPendingStreams int
	// MaxPendingBytes bounds the bytes read ahead, in total, from streams
	// waiting for their alias. They are read rather than left unread so
	// that they can never starve the control streams of flow control
	// (C036); the bytes count until the application reads them, even
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
	// DoneLinger is how long a subscription keeps receiving late streams
	// after PUBLISH_DONE when they have not all arrived (§9.9). Default 2s.
	DoneLinger time.Duration
	// MaxSubscriberBacklog bounds the bytes held back for one subscription
	// this end serves, across its data streams. When a track's objects go
	// to several subscriptions, a stream that cannot take its bytes at
	// once gets the rest queued, so that it does not hold up the others
	// (see SubgroupWriter); a subscription whose queued bytes would pass
	// the bound ends with PUBLISH_DONE TOO_FAR_BEHIND, its streams reset.
	// An object larger than the bound reaches a subscriber of a shared
	// track only if that subscriber keeps up with it. Default 4 MiB.
	MaxSubscriberBacklog int

	// The subscriber's receive side.

	// DataStreamTimeout bounds how long a unidirectional stream from the
	// peer may take to deliver its type and header; past it the session
	// is closed with DATA_STREAM_TIMEOUT (§12.2). Default 10s.
	DataStreamTimeout time.Duration
	// ReadStallTimeout bounds how long a subscription's received data may
	// wait for its application: a stream AcceptSubgroup has not returned,
	// or one it returned whose data is left unread (not inside Next or
	// Read, with payload or buffered bytes waiting). Past it the
	// subscription is cancelled, its streams stopped with EXCESSIVE_LOAD,
	// and it ends with an error wrapping ErrFellBehind. Unread streams
	// would otherwise fill the connection's flow-control window and stall
	// every other subscription and the control messages, the publisher's
	// PUBLISH_DONE TOO_FAR_BEHIND included. A stream taken and not wanted
	// must be read to its end or closed. Default 10s; negative disables
	// the check.
	ReadStallTimeout time.Duration

	// Handler serves requests the peer opens. Default: DefaultHandler.
	Handler Handler

	// Logger receives the session's logs. Default: slog.Default().
	Logger *slog.Logger

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
	// graceExpired runs when a fan-out write to a data stream of ss passed
	// writeGrace and the rest of it went to the stream's backlog.
	graceExpired func(ss *ServedSubscription)
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
	// The subscriber's receive side.
	if out.DataStreamTimeout <= 0 {
		out.DataStreamTimeout = 10 * time.Second
	}
	if out.ReadStallTimeout == 0 {
		out.ReadStallTimeout = 10 * time.Second
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

// windows returns the receive windows to give the transport.
func (c *Config) windows() transport.Windows {
	return transport.Windows{Stream: c.StreamReceiveWindow, Connection: c.ConnectionReceiveWindow}
}
