package moqt

import (
	"context"
	"errors"

	"github.com/moqt-go/moqt/wire"
)

// Announcement is one end of an accepted PUBLISH_NAMESPACE (§9.14): on the
// publisher's end, what Session.PublishNamespace returns; on the
// subscriber's end, what PublishNamespaceRequest.Accept returns. It lasts
// until either end cancels the request (§6.4.2.3), a granted EXPIRES
// passes, or the session ends.
type Announcement struct {
	// Namespace is the namespace announced.
	Namespace wire.Namespace
	// Params are the parameters of the REQUEST_OK that accepted it: EXPIRES,
	// if the subscriber granted one (§9.20.17).
	Params wire.Params

	sess *Session
	rs   *requestStream
}

// PublishNamespace announces ns to the peer (PUBLISH_NAMESPACE, §9.14)
// and returns once it is accepted. params carry AUTHORIZATION_TOKENs. A
// REQUEST_ERROR is returned as *RequestError. If ctx ends first, the
// request is cancelled.
func (s *Session) PublishNamespace(ctx context.Context, ns wire.Namespace, params wire.Params) (*Announcement, error) {
	return nil, errors.New("moqt: PUBLISH_NAMESPACE not yet implemented")
}

// Done is closed when the announcement has ended.
func (a *Announcement) Done() <-chan struct{} { return nil }

// Err is why the announcement ended, nil while it lasts. The other end's
// cancellation wraps ErrCancelled; a refused Update is its *RequestError.
func (a *Announcement) Err() error { return nil }

// Update sends REQUEST_UPDATE for the announcement (§9.5), to refresh its
// AUTHORIZATION_TOKENs, and waits for the answer. A refused update ends the
// announcement (the subscriber closes the stream) and returns the
// *RequestError. On the subscriber's end it fails: only the publisher
// updates.
func (a *Announcement) Update(ctx context.Context, params wire.Params) error {
	return errors.New("moqt: not yet implemented")
}

// Close ends the announcement by cancelling its request (§6.4.2.3): on the
// publisher's end that withdraws the namespace, on the subscriber's end it
// revokes the acceptance. It is safe to call more than once.
func (a *Announcement) Close() error { return nil }

// PublishNamespaceRequest is a peer's PUBLISH_NAMESPACE (§9.14), handed to
// the Handler: the peer offers the tracks under Namespace. Its Context ends
// when the announcement does.
type PublishNamespaceRequest struct {
	RequestCommon
	// Namespace is the namespace announced.
	Namespace wire.Namespace
	// Params are the request's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params
}

// Accept answers with REQUEST_OK (§9.14); only EXPIRES may be set in
// params, and this end then ends the announcement when it passes unless a
// REQUEST_UPDATE of the publisher's comes first, which renews it.
func (r *PublishNamespaceRequest) Accept(params wire.Params) (*Announcement, error) {
	return nil, errors.New("moqt: not yet implemented")
}
