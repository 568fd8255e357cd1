package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// nsRequester is the requester's end of a namespace request this end
// sent (PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE, SUBSCRIBE_TRACKS), as the
// request stream's read loop drives it (requestSide): the one answer that
// must come first (§9.15, §9.18, §4.2), the REQUEST_UPDATEs and their
// answers in order, and the request's end. A refused update ends the
// request: the responder closes the stream (§9.5.1).
type nsRequester struct {
	sess *Session
	rs   *requestStream
	kind wire.MessageType
	// okCtx is where the answer's parameters are checked.
	okCtx wire.ParamContext
	// more applies the kind's messages past the answer (reader
	// goroutine); nil when there are none.
	more func(m wire.Message) error
	// updated runs in the reader goroutine when an update's REQUEST_OK
	// comes, before its Update returns.
	updated func(params wire.Params)
	// ended runs once, when the request ends, with why.
	ended func(err error)

	answer    chan struct{} // closed once the answer came, or the request ended
	done      chan struct{} // closed when the request has ended
	gotAnswer bool          // reader goroutine only
	refused   bool          // the answer was REQUEST_ERROR (reader goroutine only)

	mu      sync.Mutex // guards the fields below; under it only authtoken.Sent's lock
	params  wire.Params
	result  error // the answer's: nil for REQUEST_OK
	err     error // why the request ended
	isEnded bool
	updates updateQueue // this end's REQUEST_UPDATEs, under mu
}

// errRequesterEnded stops the read loop of a request this end ended.
var errRequesterEnded = errors.New("moqt: namespace request ended")

func newNSRequester(s *Session, rs *requestStream, kind wire.MessageType, okCtx wire.ParamContext) *nsRequester {
	r := &nsRequester{sess: s, rs: rs, kind: kind, okCtx: okCtx,
		answer: make(chan struct{}), done: make(chan struct{})}
	r.updates = newUpdateQueue(rs, &r.mu, r.done, r.endErr)
	r.updates.closedLocked = func() bool { return r.isEnded }
	r.updates.write = r.writeUpdate
	return r
}

// start sends m, the request, and waits for its answer. ctx ending first
// cancels the request.
func (r *nsRequester) start(ctx context.Context, m wire.Message) error {
	if err := r.rs.write(m); err != nil {
		r.rs.cancel(wire.ResetInternalError)
		r.sess.requests.remove(r.rs)
		return err
	}
	r.rs.goServe(r)
	select {
	case <-r.answer:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.result
	case <-ctx.Done():
		r.cancel(ctx.Err(), wire.ResetCancelled)
		return ctx.Err()
	}
}

// end ends the request with err, once: outstanding updates fail with it.
func (r *nsRequester) end(err error) {
	r.mu.Lock()
	if r.isEnded {
		r.mu.Unlock()
		return
	}
	r.isEnded, r.err = true, err
	ups := r.updates.takeAllLocked()
	if !r.gotAnswerLocked() {
		r.result = err
		close(r.answer)
	}
	r.mu.Unlock()
	for _, u := range ups {
		u.settle(wire.Params{}, err)
	}
	close(r.done)
	if r.ended != nil {
		r.ended(err)
	}
}

// gotAnswerLocked reports whether answer is closed; mu held, under which
// it is closed.
func (r *nsRequester) gotAnswerLocked() bool {
	select {
	case <-r.answer:
		return true
	default:
		return false
	}
}

// cancel cancels the request from this end (§6.4.2.3) and ends it with
// err.
func (r *nsRequester) cancel(err error, code wire.ResetCode) {
	r.rs.cancel(code)
	r.end(err)
}

// endErr is why the request ended.
func (r *nsRequester) endErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	return fmt.Errorf("moqt: %s request stream closed: %w", r.kind, ErrCancelled)
}

// update sends REQUEST_UPDATE with params and waits for its answer.
// Updates are sent one at a time, and an update whose caller gave up
// stays outstanding until answered: the peer's MAX_REQUEST_UPDATES bounds
// how many are (§9.1.7), so a further one waits for credit rather than
// exceed it.
func (r *nsRequester) update(ctx context.Context, params wire.Params) (wire.Params, error) {
	if err := r.updates.enter(ctx); err != nil {
		return wire.Params{}, err
	}
	defer r.updates.leave()
	u, err := r.updates.send(ctx, &params, nil)
	if err != nil {
		return wire.Params{}, err
	}
	return r.updates.await(ctx, u)
}

// writeUpdate writes m, unless ctx ends first: a peer that does not read
// this end's direction holds the write on flow control, and a past write
// deadline breaks it off. Part of m may have left by then, so the stream
// cannot go on: the request is cancelled.
func (r *nsRequester) writeUpdate(ctx context.Context, m *wire.RequestUpdate) error {
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = r.rs.str.SetWriteDeadline(time.Unix(1, 0))
		close(fired)
	})
	err := r.rs.write(m)
	if stop() {
		return err
	}
	<-fired
	if err == nil {
		_ = r.rs.str.SetWriteDeadline(time.Time{})
		return nil
	}
	cause := fmt.Errorf("moqt: %s: REQUEST_UPDATE not written: %w", r.kind, context.Cause(ctx))
	r.cancel(cause, wire.ResetCancelled)
	return cause
}

func (r *nsRequester) handle(m wire.Message, _ *wire.RejectError) error {
	if _, ok := m.(*wire.Goaway); ok {
		return nil
	}
	if !r.gotAnswer {
		switch m := m.(type) {
		case *wire.RequestOK:
			r.gotAnswer = true
			r.rs.answered()
			if err := m.Check(r.okCtx); err != nil {
				return err
			}
			r.mu.Lock()
			if !r.gotAnswerLocked() { // else the request ended first
				r.params = m.Parameters
				close(r.answer)
			}
			r.mu.Unlock()
			return nil
		case *wire.RequestError:
			r.gotAnswer, r.refused = true, true
			r.rs.answered()
			own, err := detach(r.sess.version, m)
			if err != nil {
				return err
			}
			r.end(requestErrorFrom(own)) // the responder's FIN follows
			return nil
		}
		return protocolViolation("%s as the first answer to %s", m.Type(), r.kind)
	}
	if r.refused {
		return protocolViolation("%s after the REQUEST_ERROR answering %s", m.Type(), r.kind)
	}
	switch m := m.(type) {
	case *wire.RequestOK:
		if err := r.rs.sess.rules.checkRequestOK(m, wire.InUpdateOK); err != nil {
			return err
		}
		u, err := r.nextUpdate(m.Type())
		if err != nil || u == nil {
			return err
		}
		if r.updated != nil {
			r.updated(*u.params)
		}
		u.settle(m.Parameters, nil)
		return nil
	case *wire.RequestError:
		u, err := r.nextUpdate(m.Type())
		if err != nil {
			return err
		}
		own, err := detach(r.sess.version, m)
		if err != nil {
			return err
		}
		// The update failed: the responder closes the stream (§9.5.1), and
		// the request is over; one REQUEST_ERROR may answer every
		// outstanding update.
		r.refused = true
		re := requestErrorFrom(own)
		if u != nil {
			u.settle(wire.Params{}, re)
		}
		r.end(re)
		return nil
	}
	r.mu.Lock()
	ended := r.isEnded
	r.mu.Unlock()
	if ended {
		return nil // this end cancelled; the loop ends with the stream
	}
	if r.more == nil {
		return protocolViolation("unexpected %s on %s", m.Type(), r.kind)
	}
	return r.more(m)
}

// nextUpdate takes the oldest outstanding update, which an answer of type
// t answers; none is a PROTOCOL_VIOLATION. nil with no error: the request
// ended meanwhile.
func (r *nsRequester) nextUpdate(t wire.MessageType) (*sentUpdate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.updates.popLocked()
	if u == nil && !r.isEnded {
		return nil, protocolViolation("%s on %s with no REQUEST_UPDATE outstanding", t, r.kind)
	}
	return u, nil
}

// peerFinished: the responder's FIN. Before the answer the request failed
// (or a GOAWAY migrated it, §9.2); after it, the request is complete
// (§6.4.2.2). Either way this end finishes its direction too.
func (r *nsRequester) peerFinished() {
	_ = r.rs.fin()
	if !r.gotAnswer {
		err := fmt.Errorf("moqt: %s stream closed without an answer", r.kind)
		if r.rs.goawayIn {
			err = fmt.Errorf("moqt: %s migrated by the peer's GOAWAY: %w", r.kind, ErrGoingAway)
		}
		r.end(err)
		return
	}
	r.end(io.EOF)
}

// reset: the responder cancelled the request (cause wraps ErrCancelled),
// or this end did.
func (r *nsRequester) reset(cause error) {
	r.rs.cancel(wire.ResetCancelled)
	r.end(cause)
}

func (r *nsRequester) failed(se *SessionError) { r.end(se) }

// stoppedByPeer: the responder's STOP_SENDING cancels the request
// (§6.4.2.3, §4.1), whether or not it resets its direction too; after its
// FIN this end has finished its own, and none is seen.
func (r *nsRequester) stoppedByPeer() {
	cause := fmt.Errorf("moqt: %s: STOP_SENDING from the responder: %w", r.kind, ErrCancelled)
	if se := r.stopError(); se != nil {
		cause = fmt.Errorf("moqt: %s: STOP_SENDING from the responder: %w: %w", r.kind, ErrCancelled, se)
	}
	r.cancel(cause, wire.ResetCancelled)
}

// stopError is the responder's STOP_SENDING as a *StreamError with its
// code, or nil: a write of nothing meets it and sends nothing. The code
// is the responder's reason, which its reset, if one follows, would carry
// too; that reset may come after.
func (r *nsRequester) stopError() error {
	r.rs.wmu.Lock()
	defer r.rs.wmu.Unlock()
	if r.rs.finSent || r.rs.cancelled {
		return nil
	}
	_, err := r.rs.str.Write(nil)
	var se *StreamError
	if errors.As(publicError(err), &se) && se.Remote {
		return se
	}
	return nil
}
