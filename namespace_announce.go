package moqt

import (
	"context"
	"errors"
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

// Announcement is one end of an accepted PUBLISH_NAMESPACE (§9.14): on the
// publisher's end, what Session.PublishNamespace returns; on the
// subscriber's end, what PublishNamespaceRequest.Accept returns. It lasts
// until either end cancels the request (§6.4.2.3), the subscriber's
// granted EXPIRES passes, or the session ends.
type Announcement struct {
	// Namespace is the namespace announced.
	Namespace wire.Namespace
	// Params are the parameters of the REQUEST_OK that accepted it: EXPIRES,
	// if the subscriber granted one (§9.20.17). On the publisher's end
	// Update sets Params.Expires to what its REQUEST_OK grants.
	Params wire.Params

	req *nsRequester // the publisher's end
	srv *nsServed    // the subscriber's end
}

var (
	// errSessionNamespacePublish refuses a publication in the .session
	// namespace, which is the implementation's (§6.5).
	errSessionNamespacePublish = errors.New("moqt: applications must not publish in the .session namespace")
	errAnnouncementClosed      = fmt.Errorf("%w: announcement closed", ErrCancelled)
	errNotPublisher            = errors.New("moqt: only the publisher of a PUBLISH_NAMESPACE updates it")
)

// PublishNamespace announces ns to the peer (PUBLISH_NAMESPACE, §9.14)
// and returns once it is accepted. params carry AUTHORIZATION_TOKENs. A
// REQUEST_ERROR is returned as *RequestError. If ctx ends first, the
// request is cancelled. A second REQUEST_OK, or any other first answer,
// closes the session with PROTOCOL_VIOLATION (§4.2).
func (s *Session) PublishNamespace(ctx context.Context, ns wire.Namespace, params wire.Params) (*Announcement, error) {
	if err := ns.Validate(0); err != nil {
		return nil, err
	}
	if isSessionNamespace(ns) {
		return nil, errSessionNamespacePublish // §6.5
	}
	rs, err := s.openChecked(ctx, &params, wire.InPublishNamespace)
	if err != nil {
		return nil, err
	}
	r := newNSRequester(s, rs, wire.MsgPublishNamespace, wire.InPublishNamespaceOK)
	if err := r.start(ctx, &wire.PublishNamespace{RequestID: rs.id, TrackNamespace: ns, Parameters: params}); err != nil {
		return nil, err
	}
	r.mu.Lock()
	granted := r.params
	r.mu.Unlock()
	return &Announcement{Namespace: cloneNamespace(ns), Params: granted, req: r}, nil
}

// Done is closed when the announcement has ended.
func (a *Announcement) Done() <-chan struct{} {
	if a.req != nil {
		return a.req.done
	}
	return a.srv.done
}

// Err is why the announcement ended, nil while it lasts. The other end's
// cancellation wraps ErrCancelled (and *StreamError, with its code); a
// refused Update is its *RequestError; the subscriber's FIN is io.EOF;
// Close is an error wrapping ErrCancelled; the session's end its
// *SessionError.
func (a *Announcement) Err() error {
	if a.req != nil {
		a.req.mu.Lock()
		defer a.req.mu.Unlock()
		return a.req.err
	}
	a.srv.mu.Lock()
	defer a.srv.mu.Unlock()
	return a.srv.err
}

// Update sends REQUEST_UPDATE for the announcement (§9.5), to refresh its
// AUTHORIZATION_TOKENs or to extend a granted EXPIRES (§9.20.17), and
// waits for the answer; the EXPIRES its REQUEST_OK grants is stored in
// Params (so Params is not to be read concurrently with Update). A
// refused update ends the announcement (the subscriber closes the stream,
// §9.5.1) and returns the *RequestError. One whose ctx ends while it is
// still being written (the subscriber does not read) cancels the
// announcement: part of it may have left. On the subscriber's end it
// fails: only the publisher updates.
func (a *Announcement) Update(ctx context.Context, params wire.Params) error {
	if a.req == nil {
		return errNotPublisher
	}
	if err := a.req.sess.rules.checkOwnParams(&params, wire.InUpdatePublishNamespace); err != nil {
		return err
	}
	granted, err := a.req.update(ctx, params)
	if err != nil {
		return err
	}
	if granted.Expires.Set {
		a.Params.Expires = granted.Expires
	}
	return nil
}

// Close ends the announcement by cancelling its request (§6.4.2.3): on the
// publisher's end that withdraws the namespace, on the subscriber's end it
// revokes the acceptance. It is safe to call more than once.
func (a *Announcement) Close() error {
	if a.req != nil {
		a.req.cancel(errAnnouncementClosed, wire.ResetCancelled)
		return nil
	}
	a.srv.terminate(errAnnouncementClosed, wire.ResetCancelled)
	return nil
}

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
	// OnUpdate, if set before Accept, is called with the parameters of
	// each REQUEST_UPDATE of the accepted request before the library
	// applies them: refreshed AUTHORIZATION_TOKENs (resolved, as
	// USE_VALUE), so that the application keeps deciding what it
	// authorized (§9.14). An
	// error refuses the update, which ends the request (§9.5.1); a
	// *RequestError chooses the REQUEST_ERROR code. Calls come one at a
	// time, in order, and the stream is not read meanwhile; the first
	// may come within Accept. Without it every update is accepted.
	OnUpdate func(update *wire.Params) error

	srv *nsServed
}

// Accept answers with REQUEST_OK (§9.14); only EXPIRES may be set in
// params, and this end then ends the announcement when it passes unless a
// REQUEST_UPDATE of the publisher's comes first, which renews it. The
// publisher's updates are answered by the library, after OnUpdate. It
// fails if the request has ended already: the publisher withdrew it, or
// the session ended.
func (r *PublishNamespaceRequest) Accept(params wire.Params) (*Announcement, error) {
	if err := r.sess.rules.checkOwnParams(&params, wire.InPublishNamespaceOK); err != nil {
		return nil, err
	}
	err := r.answer(func() error { return r.srv.accept(params, r.OnUpdate) })
	if err != nil {
		return nil, err
	}
	r.srv.drainEarly()
	return &Announcement{Namespace: r.Namespace, Params: params, srv: r.srv}, nil
}

// servePublishNamespace hands a PUBLISH_NAMESPACE to the Handler and
// serves the publisher's side of the stream.
func servePublishNamespace(s *Session, rs *requestStream, m *wire.PublishNamespace, toks []AuthToken) error {
	req := &PublishNamespaceRequest{
		RequestCommon: newIncoming(rs, toks, m.TrackNamespace),
		Namespace:     m.TrackNamespace,
		Params:        m.Parameters,
	}
	req.srv = newNSServed(&req.RequestCommon, wire.MsgPublishNamespace)
	req.rejected = req.srv.rejected
	s.handOff(req)
	return rs.serve(req.srv)
}
