package moqt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// A Handler serves the requests a peer opens, in the manner of
// net/http.Handler. ServeMOQT runs in its own goroutine per request and
// must answer it (Accept or Reject on the concrete type) before returning;
// a request left unanswered is rejected with INTERNAL_ERROR. A handler
// that waits, on an upstream or a cache, selects on the request's Context
// too, which ends when the peer gives up.
//
// The concrete types are *SubscribeRequest (answered with LocalTrack.Accept
// or Reject), *FetchRequest (LocalTrack.Fetch serves one from a local
// track), *PublishRequest, *TrackStatusRequest (LocalTrack.Status
// answers one for a local track), *PublishNamespaceRequest and
// *SubscribeNamespaceRequest (SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS,
// routed by their prefix). A relay or an application with many
// tracks routes them by namespace with a ServeMux:
//
//	mux := moqt.NewServeMux()
//	mux.HandleFunc(wire.NewNamespace("live"), func(r moqt.Request) {
//		if sr, ok := r.(*moqt.SubscribeRequest); ok && sr.Track.Equal(liveTrack.Name()) {
//			_, _ = liveTrack.Accept(sr, moqt.AcceptOptions{})
//			return
//		}
//		moqt.DefaultHandler.ServeMOQT(r)
//	})
//	mux.Handle(wire.NewNamespace("vod"), upstream) // everything under (vod)
//	cfg := &moqt.Config{Handler: mux}
type Handler interface {
	ServeMOQT(r Request)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(Request)

// ServeMOQT calls f(r).
func (f HandlerFunc) ServeMOQT(r Request) { f(r) }

// Request is an incoming request awaiting an answer.
type Request interface {
	// Session is the session the request arrived on.
	Session() *Session
	// Context is cancelled, with the reason as its cause, when the peer
	// gives up the request (a stream reset or STOP_SENDING, whose cause
	// wraps ErrCancelled), when the request ends (it is refused, its
	// subscription ends, its stream closes), or when the session ends: a
	// handler that waits on something else, an upstream or a cache,
	// selects on it.
	Context() context.Context
	// Reject answers with REQUEST_ERROR and closes the stream (§9.4).
	Reject(code wire.RequestErrorCode, reason string) error
	// RejectWith does so with a Retry Interval or a Redirect (§9.4.1).
	RejectWith(e *RequestError) error
	// AuthorizationTokens returns the request's authorization tokens,
	// resolved (§8.9).
	AuthorizationTokens() []AuthToken
	base() *RequestCommon
}

// DefaultHandler rejects every request: SUBSCRIBE, FETCH and TRACK_STATUS
// with DOES_NOT_EXIST, PUBLISH with NOT_SUPPORTED, PUBLISH_NAMESPACE with
// UNINTERESTED (nobody here wants the namespace), SUBSCRIBE_NAMESPACE and
// SUBSCRIBE_TRACKS with DOES_NOT_EXIST (no namespace is available under
// the prefix). It serves a session without Config.Handler, and the
// requests a ServeMux has no Handler for.
var DefaultHandler Handler = HandlerFunc(func(r Request) {
	code, reason := wire.ReqDoesNotExist, "no such track"
	switch r.(type) {
	case *PublishRequest:
		code = wire.ReqNotSupported
	case *PublishNamespaceRequest:
		code, reason = wire.ReqUninterested, "namespace not wanted"
	case *SubscribeNamespaceRequest:
		reason = "no namespace under the prefix"
	}
	_ = r.Reject(code, reason)
})

// RequestCommon is what every incoming request shares, embedded in each
// of SubscribeRequest, PublishRequest, TrackStatusRequest, FetchRequest,
// PublishNamespaceRequest and SubscribeNamespaceRequest: the session it arrived on, its Context, its resolved
// authorization tokens, and Reject. A request is answered exactly once;
// a later answer fails. Only the library makes one.
type RequestCommon struct {
	sess *Session
	rs   *requestStream
	once sync.Once
	// answeredCh is closed once an answer has been sent.
	answeredCh chan struct{}
	// rejected, if set, runs right after a REQUEST_ERROR is sent, before
	// answeredCh closes: the request's owner terminates its state there.
	// Set before the request reaches the Handler.
	rejected func(*RequestError)
	// unclaim, if set, runs right before a REQUEST_ERROR is sent: what
	// the request holds against the peer's next requests (a prefix claim)
	// is let go first, so that a request the peer sends as soon as it
	// reads the error is not refused for it.
	unclaim func()
	tokens  []AuthToken
	ns      wire.Namespace
	// ctx is the request's Context; the stream's read loop, a refusal and
	// the request's own end cancel it.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// newIncoming prepares the shared part of a peer's request on rs, which
// names ns (detached). Its Context ends at the latest with the read loop
// that the request's stream runs once handed to the Handler (handOff).
func newIncoming(rs *requestStream, tokens []AuthToken, ns wire.Namespace) RequestCommon {
	ctx, cancel := context.WithCancelCause(rs.sess.ctx)
	return RequestCommon{sess: rs.sess, rs: rs, answeredCh: make(chan struct{}), tokens: tokens, ns: ns,
		ctx: ctx, cancel: cancel}
}

func (in *RequestCommon) base() *RequestCommon { return in }

// Session is the session the request arrived on.
func (in *RequestCommon) Session() *Session { return in.sess }

// requestID is the Request ID the peer gave the request.
func (in *RequestCommon) requestID() uint64 { return in.rs.id }

// namespace is the namespace the request names (§2.4.1): its track's
// Track Namespace, or for a request about a namespace, that namespace or
// prefix. ServeMux routes by it.
func (in *RequestCommon) namespace() wire.Namespace { return in.ns }

// Context is cancelled when the peer gives up the request, when it ends,
// or when the session ends; its cause says which.
func (in *RequestCommon) Context() context.Context { return in.ctx }

// AuthorizationTokens returns the request's AUTHORIZATION_TOKENs with their
// aliases resolved, in message order; a DELETE only retires an alias and
// is not among them (§8.9). The request's Params hold the same tokens as
// USE_VALUE. A handler that finds one expired or invalid rejects the
// request (EXPIRED_AUTH_TOKEN, UNAUTHORIZED, …), and may have later uses of
// its alias refused too with Session.StoreTokenError.
func (in *RequestCommon) AuthorizationTokens() []AuthToken { return in.tokens }

// answer runs send as the request's one answer. It reports
// errAlreadyAnswered on every later call.
func (in *RequestCommon) answer(send func() error) error {
	err := errAlreadyAnswered
	in.once.Do(func() {
		err = send()
		close(in.answeredCh)
	})
	return err
}

// waitAnswered blocks until the request is answered or the session ends.
func (in *RequestCommon) waitAnswered() {
	select {
	case <-in.answeredCh:
	case <-in.sess.ctx.Done():
	}
}

// Reject answers with REQUEST_ERROR and FIN (§6.4.2.3). A code the
// session's draft lacks (DUPLICATE_SUBSCRIPTION outside 18, INVALID_FILTER
// on 18, …) fails with an error wrapping wire.ErrNotInDraft and leaves the
// request unanswered; so does REDIRECT, which needs RejectWith's Redirect.
func (in *RequestCommon) Reject(code wire.RequestErrorCode, reason string) error {
	return in.RejectWith(&RequestError{Code: code, Reason: reason})
}

// RejectWith answers with the REQUEST_ERROR e describes and FIN
// (§6.4.2.3): its Code, Reason, RetryInterval (milliseconds plus one, 0
// for "do not retry", §9.4.2) and, exactly when Code is REDIRECT, its
// Redirect (§9.4.1). An e that the session's draft or §9.4.1 does not
// allow fails with an error, and the request stays unanswered: a client's
// Redirect carries no Connect URI, and one answering a namespace request
// no Track Name.
func (in *RequestCommon) RejectWith(e *RequestError) error {
	if err := in.sess.rules.checkRequestCode(e.Code); err != nil {
		return err
	}
	if (e.Code == wire.ReqRedirect) != (e.Redirect != nil) {
		return fmt.Errorf("moqt: a REQUEST_ERROR carries a Redirect exactly when its code is REDIRECT (§9.4.2), not with %s", e.Code)
	}
	// What the peer would check on receipt (§9.4.1), checked before
	// anything is sent.
	if err := e.message().Check(in.sess.isClient, in.rs.requestType()); err != nil {
		return err
	}
	c := *e
	return in.rejectWith(&c)
}

// rejectWith sends e as the request's one answer.
func (in *RequestCommon) rejectWith(e *RequestError) error {
	return in.answer(func() error {
		if in.unclaim != nil {
			in.unclaim()
		}
		in.rs.reject(e)
		// The request is over. Its Context ends first, so that the cause
		// is e and not the end of the read loop that rejected wakes.
		in.cancel(e)
		if in.rejected != nil {
			in.rejected(e)
		}
		return nil
	})
}

// errAlreadyAnswered is returned when a request is answered twice.
var errAlreadyAnswered = errors.New("moqt: request already answered")
