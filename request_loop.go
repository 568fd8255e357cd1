package moqt

import (
	"errors"
	"fmt"
	"io"

	"github.com/moqt-go/moqt/wire"
)

// requestSide is one end of a request, as the read loop that every request
// kind shares drives it (requestStream.serve): the loop reads the peer's
// messages, applies the rules that hold for every request (readMessage),
// and tells the side what came and how the peer's direction ended.
type requestSide interface {
	// handle applies one message from the peer past the request itself.
	// rej is set only with a REQUEST_UPDATE that is whole but must be
	// refused (§9.5). An error ends the loop: a session error closes the
	// session, any other cancels the request as a reset would.
	handle(m wire.Message, rej *wire.RejectError) error
	// peerFinished applies the peer's FIN at a message boundary: its
	// direction is complete (§6.4.2.2). The loop, and so the request,
	// ends when it returns.
	peerFinished()
	// reset applies the end of the peer's direction without a FIN: its
	// RESET_STREAM, or a read this end's own cancellation broke off.
	// cause wraps ErrCancelled.
	reset(cause error)
	// failed applies the end of the session, with se, while the request
	// was open.
	failed(se *SessionError)
}

// stopWatcher is a requestSide that acts on the peer's STOP_SENDING while
// this end still sends (§3.1.1): stoppedByPeer runs in a goroutine of its
// own.
type stopWatcher interface {
	stoppedByPeer()
}

// errRequestEnded is the cause of an incoming request's Context once the
// request is over.
var errRequestEnded = errors.New("moqt: request ended")

// serve reads the peer's side of the stream until it ends, hands each
// message and the ending to side, and returns the error that must close
// the session, if any. It is the stream's only reader. On a peer's
// request (rs.peer set) it also ends the request's Context: at once when
// the peer gives up (reset, STOP_SENDING) or the session ends, else when
// the loop returns.
func (rs *requestStream) serve(side requestSide) error {
	in := rs.peer
	if in != nil {
		defer in.cancel(errRequestEnded)
	}
	w, _ := side.(stopWatcher)
	if in != nil || w != nil {
		stop := rs.watchStopSending(func() {
			if in != nil {
				in.cancel(fmt.Errorf("%w: STOP_SENDING from the peer", ErrCancelled))
			}
			if w != nil {
				w.stoppedByPeer()
			}
		})
		defer stop()
	}
	for {
		m, err := rs.readMessage()
		var rej *wire.RejectError
		if err == nil || errors.As(err, &rej) {
			err = side.handle(m, rej)
		}
		if err != nil {
			return rs.end(side, err)
		}
	}
}

// end applies the error that stopped serve: a session error, the peer's
// FIN (io.EOF), or anything else, which cancels the request.
func (rs *requestStream) end(side requestSide, err error) error {
	if se, ok := asSessionError(err); ok {
		if !se.Remote {
			// Closed first, so that whoever the side wakes finds the
			// session ended.
			rs.sess.fail(se)
		}
		if rs.peer != nil {
			rs.peer.cancel(se)
		}
		side.failed(se)
		if se.Remote {
			return nil
		}
		return se
	}
	if errors.Is(err, io.EOF) {
		side.peerFinished()
		return nil
	}
	cause := fmt.Errorf("%w: %w", ErrCancelled, err)
	if rs.peer != nil {
		rs.peer.cancel(cause)
	}
	side.reset(cause)
	return nil
}

// goServe runs serve for a request this end opened, in a goroutine of its
// own: the request counts as open, for Shutdown, until the loop ends, and
// an error of the peer's closes the session.
func (rs *requestStream) goServe(side requestSide) {
	s := rs.sess
	s.goroutines.Go(func() {
		defer s.requests.remove(rs)
		if err := rs.serve(side); err != nil {
			s.fail(err)
		}
	})
}

// drain reads and discards what the peer still sends on a request that
// this end refused, until its FIN or reset (§6.4.2.2).
func (rs *requestStream) drain() error { return rs.serve(&drained{rs: rs}) }

// drained is the side of a refused request. Messages the peer sent before
// it saw the answer, such as a REQUEST_UPDATE, are no error; but they are
// held to the same rules as on a live request: who may send them
// (checkSender, in readMessage) and those of crossed. This end sends no
// REQUEST_UPDATE here, so a REQUEST_OK or REQUEST_ERROR answers nothing,
// and nothing may follow a PUBLISH_DONE.
type drained struct {
	rs    *requestStream
	ended bool // a PUBLISH_DONE came
}

func (d *drained) handle(m wire.Message, _ *wire.RejectError) error {
	if d.ended {
		return protocolViolation("%s after PUBLISH_DONE on request stream %d", m.Type(), d.rs.id)
	}
	if err := d.rs.crossed(m); err != nil {
		return err
	}
	switch m.(type) {
	case *wire.RequestOK, *wire.RequestError:
		return protocolViolation("%s with no REQUEST_UPDATE outstanding on request stream %d", m.Type(), d.rs.id)
	case *wire.PublishDone:
		d.ended = true
	}
	return nil
}

func (*drained) peerFinished()        {}
func (*drained) reset(error)          {}
func (*drained) failed(*SessionError) {}
