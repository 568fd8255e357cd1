package moqt

import (
	"context"
	"errors"

	"github.com/moqt-go/moqt/wire"
)

// NamespaceSubscription is the requester's end of an accepted
// SUBSCRIBE_NAMESPACE (§9.15) or SUBSCRIBE_TRACKS (§9.18). Next, Update and
// Close may be called from different goroutines; Next is not safe for
// concurrent use with itself.
type NamespaceSubscription struct {
	// Params are the parameters of the REQUEST_OK that accepted the
	// request: EXPIRES, if the peer granted one (§9.20.17).
	Params wire.Params

	sess *Session
	rs   *requestStream
}

// NamespaceEvent is one report of a NamespaceSubscription.
type NamespaceEvent struct {
	// Namespace is the whole namespace: the subscription's prefix and the
	// suffix the peer sent.
	Namespace wire.Namespace
	// Done reports a NAMESPACE_DONE (§9.17): the namespace is no longer
	// published. Without Done or Skipped, the event is a NAMESPACE (§9.16).
	Done bool
	// Skipped reports a PUBLISH_SKIPPED (§9.19), on a SUBSCRIBE_TRACKS: no
	// PUBLISH will come for the track TrackName in Namespace.
	Skipped   bool
	TrackName []byte
}

// SubscribeNamespace sends SUBSCRIBE_NAMESPACE for prefix (§9.15) and
// returns once it is accepted; Next reports the namespaces under prefix
// that the peer publishes. A REQUEST_ERROR is returned as *RequestError. If
// ctx ends first, the request is cancelled.
func (s *Session) SubscribeNamespace(ctx context.Context, prefix wire.Namespace, params wire.Params) (*NamespaceSubscription, error) {
	return nil, errors.New("moqt: SUBSCRIBE_NAMESPACE not yet implemented")
}

// SubscribeTracks sends SUBSCRIBE_TRACKS for prefix (§9.18) and returns
// once it is accepted. The peer then sends a PUBLISH for each of its tracks
// under prefix: those arrive at the Handler, as every PUBLISH does, as
// *PublishRequest. Next reports the tracks it skips (PUBLISH_SKIPPED).
func (s *Session) SubscribeTracks(ctx context.Context, prefix wire.Namespace, params wire.Params) (*NamespaceSubscription, error) {
	return nil, errors.New("moqt: SUBSCRIBE_TRACKS not yet implemented")
}

// Next returns the next event. When the response stream ends, it first
// returns a Done event for every namespace still active (§9.15), then the
// end: io.EOF after the peer's FIN, else the cause (a *StreamError, a
// *RequestError of a refused Update, the session's error, or an error
// wrapping ErrCancelled after Close). It returns ctx's error if ctx ends
// first.
func (ns *NamespaceSubscription) Next(ctx context.Context) (NamespaceEvent, error) {
	return NamespaceEvent{}, errors.New("moqt: not yet implemented")
}

// Prefix is the current prefix: the request's, or that of the last
// accepted TRACK_NAMESPACE_PREFIX update.
func (ns *NamespaceSubscription) Prefix() wire.Namespace { return nil }

// Update sends REQUEST_UPDATE (§9.5) and waits for its answer.
// TRACK_NAMESPACE_PREFIX changes the prefix (§9.5.2): the namespaces no
// longer under it are reported Done, and the peer reports those under the
// new one. A refused update (PREFIX_OVERLAP, …) returns *RequestError and
// ends the subscription, whose stream the peer closes.
func (ns *NamespaceSubscription) Update(ctx context.Context, params wire.Params) error {
	return errors.New("moqt: not yet implemented")
}

// Close cancels the request (§6.4.2.3). It is safe to call more than once.
func (ns *NamespaceSubscription) Close() error { return nil }

// SubscribeNamespaceRequest is a peer's SUBSCRIBE_NAMESPACE (§9.15) or,
// with Tracks set, SUBSCRIBE_TRACKS (§9.18), handed to the Handler. One
// whose prefix overlaps another open request of the same type on the
// session is refused with PREFIX_OVERLAP before it gets here.
type SubscribeNamespaceRequest struct {
	RequestCommon
	// Prefix is the requested namespace prefix.
	Prefix wire.Namespace
	// Params are the request's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params
	// Tracks reports a SUBSCRIBE_TRACKS: the requester wants a PUBLISH
	// for each track under Prefix (LocalTrack.Publish on Session).
	Tracks bool
}

// Accept answers with REQUEST_OK; only EXPIRES may be set in params, and
// this end then ends the request when it passes unless a REQUEST_UPDATE
// comes first, which renews it. The NamespaceWriter it returns lasts as
// long as the request's Context.
func (r *SubscribeNamespaceRequest) Accept(params wire.Params) (*NamespaceWriter, error) {
	return nil, errors.New("moqt: not yet implemented")
}
