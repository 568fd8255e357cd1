package moqt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// nsServed is the responder's end of a namespace request that stays open
// once accepted (PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE, SUBSCRIBE_TRACKS),
// as the request stream's read loop drives it (requestSide). Everything
// this end sends after the request, its answer included, goes through one
// bounded queue that a goroutine of its own writes, in order: the
// application and the read loop never block on the network, and a
// requester that reads nothing for Config.SubscriberGrace, or lets the
// queue fill, gets the stream reset with TOO_FAR_BEHIND (§9.15). The
// queue's messages count against the session's backlog budget
// (backlog_budget.go): past it, the stream is reset with EXCESSIVE_LOAD.
//
// The requester's REQUEST_UPDATEs are answered by the library, once the
// application's OnUpdate, if any, let them through: REQUEST_OK, renewing
// a granted EXPIRES (§9.20.17), or REQUEST_ERROR, after which this end
// closes its direction (§9.5.1). Updates that arrive before the Handler's
// answer wait for it, and are decided in order right after it; the bytes
// they hold are bounded (request_update_held.go), and one past the bound is
// refused with EXCESSIVE_LOAD, which closes the stream too.
type nsServed struct {
	in   *RequestCommon
	rs   *requestStream
	sess *Session
	kind wire.MessageType
	// update applies the kind's part of an accepted update, under mu,
	// and returns what follows its REQUEST_OK, or the refusal. Nil for a
	// kind that has none.
	update func(u *wire.RequestUpdate) ([]wire.Message, *RequestError)
	// onEnd releases the kind's state when the request ends, or once a
	// refused update has ended it; it may run twice.
	onEnd func()
	// onUpdate is the application's OnUpdate, set by accept; it runs
	// with no lock held, one update at a time.
	onUpdate func(update *wire.Params) error

	wake    chan struct{} // cap 1: the queue has something
	done    chan struct{} // closed when the request has ended
	drained chan struct{} // closed once the updates that came before the answer are decided

	mu       sync.Mutex // guards the fields below, and the kind's state
	answered bool       // the Handler accepted the request
	draining bool       // accepted, and pending still being decided
	pending  []pendingUpdate
	held     updateHold // the bytes of pending and of the update being applied
	queue    []wire.Message
	queued   int           // the bytes queue holds, charged to the session's backlog budget
	offered  int           // the bytes NamespaceWriter.offered holds, charged likewise
	spent    bool          // the budget refused a message: behind resets with EXCESSIVE_LOAD
	finning  bool          // FIN once the queue is written: nothing more may be queued
	refusal  *RequestError // the refused update that closes the stream
	ended    bool
	err      error // why the request ended
	expires  uint64
	expiry   *time.Timer
	stopLife func() bool
}

// maxEarlyUpdates is how many REQUEST_UPDATEs are held while the Handler
// has not answered; past it the stream is not read until it does, which
// flow control pushes back on.
const maxEarlyUpdates = 16

var errNamespaceQueueFull = errors.New("moqt: requester too far behind: namespace message queue full")

func newNSServed(in *RequestCommon, kind wire.MessageType) *nsServed {
	return &nsServed{in: in, rs: in.rs, sess: in.sess, kind: kind, wake: make(chan struct{}, 1), done: make(chan struct{}),
		drained: make(chan struct{})}
}

// accept queues the request's REQUEST_OK, granting params, and starts
// the writer; the updates that came first are decided after it, by
// drainEarly, which the caller runs once the answer is made. It runs as
// the request's answer, and fails if the request ended first (the
// requester cancelled it, or the session ended).
func (srv *nsServed) accept(params wire.Params, onUpdate func(*wire.Params) error) error {
	srv.mu.Lock()
	if srv.ended {
		err := srv.err
		srv.mu.Unlock()
		return err
	}
	srv.answered, srv.draining, srv.onUpdate = true, true, onUpdate
	srv.pushLocked(&wire.RequestOK{Parameters: params})
	if params.Expires.Set && params.Expires.Value > 0 {
		// This end granted EXPIRES, so it ends the request when the time
		// has passed, unless an update renews it (§9.20.17).
		srv.expires = params.Expires.Value
		srv.expiry = time.AfterFunc(msDuration(srv.expires), func() {
			srv.terminate(fmt.Errorf("%s: %w", srv.kind, errExpired), wire.ResetCancelled)
		})
	}
	srv.mu.Unlock()
	// The request lives as long as its Context: the requester's reset or
	// STOP_SENDING, the session's end and the loop's end all end it.
	stop := context.AfterFunc(srv.in.ctx, func() {
		srv.terminate(context.Cause(srv.in.ctx), wire.ResetCancelled)
	})
	srv.mu.Lock()
	srv.stopLife = stop
	srv.mu.Unlock()
	srv.sess.goroutines.Go(srv.run)
	return nil
}

// drainEarly decides, in order, the updates that came before the answer;
// later ones wait behind them (draining).
func (srv *nsServed) drainEarly() {
	for {
		srv.mu.Lock()
		if len(srv.pending) == 0 || srv.ended {
			srv.pending, srv.draining = nil, false
			srv.mu.Unlock()
			close(srv.drained)
			return
		}
		pu := srv.pending[0]
		srv.pending = srv.pending[1:]
		srv.mu.Unlock()
		srv.apply(pu)
	}
}

// rejected ends the request that the Handler refused.
func (srv *nsServed) rejected(e *RequestError) {
	if srv.endWith(e) {
		srv.closeDone()
	}
}

// closeDone tells of the request's end; whoever ended it calls it, once.
func (srv *nsServed) closeDone() {
	close(srv.done)
	if srv.onEnd != nil {
		srv.onEnd()
	}
}

// pushLocked queues msgs; false if the queue is full, or the session's
// backlog budget refuses them (one message into an empty queue is always
// taken, so that a request is answered). The caller holds mu and, on
// false, ends the request with behind once it released mu.
func (srv *nsServed) pushLocked(msgs ...wire.Message) bool {
	if len(msgs) == 0 {
		return true
	}
	if len(srv.queue)+len(msgs) > srv.sess.cfg.MaxActiveNamespaces {
		return false
	}
	n := 0
	for _, m := range msgs {
		n += queuedSize(m)
	}
	if len(srv.queue) == 0 && len(msgs) == 1 {
		srv.sess.backlog.Force(n)
	} else if srv.sess.backlog.Charge(n) != nil {
		srv.spent = true
		return false
	}
	srv.queued += n
	srv.queue = append(srv.queue, msgs...)
	signal(srv.wake)
	return true
}

// usableLocked is why nothing more may be queued, or nil.
func (srv *nsServed) usableLocked() error {
	switch {
	case srv.ended:
		if srv.err != nil {
			return srv.err
		}
		return errStreamDone
	case srv.finning:
		return srv.refusal
	}
	return nil
}

// behind ends the request of a requester that does not keep up: with
// TOO_FAR_BEHIND, or EXCESSIVE_LOAD when the session's backlog budget
// refused its queue more.
func (srv *nsServed) behind(err error) {
	srv.mu.Lock()
	spent := srv.spent
	srv.mu.Unlock()
	if spent {
		srv.terminate(fmt.Errorf("%w: namespace message queue refused", errExcessiveLoad), wire.ResetExcessiveLoad)
		return
	}
	srv.terminate(err, wire.ResetTooFarBehind)
}

// queuedSize estimates the memory a queued message holds: the namespace
// and name it carries, which it may be the last to hold (a NAMESPACE_DONE
// for a namespace no longer offered), and a fixed overhead.
func queuedSize(m wire.Message) int {
	const overhead = 64
	switch m := m.(type) {
	case *wire.NamespaceMsg:
		return overhead + fields(m.TrackNamespaceSuffix)
	case *wire.NamespaceDone:
		return overhead + fields(m.TrackNamespaceSuffix)
	case *wire.PublishSkipped:
		return overhead + fields(m.TrackNamespaceSuffix) + len(m.TrackName)
	case *wire.RequestError:
		return overhead + len(m.ErrorReason)
	}
	return overhead
}

// fields estimates the memory ns's fields hold.
func fields(ns wire.Namespace) int {
	n := 0
	for _, f := range ns {
		n += 24 + len(f) // a slice header and its bytes
	}
	return n
}

// offeredSize estimates the memory an entry of NamespaceWriter.offered
// holds: the namespace's copy, its key (about as large) and a fixed
// overhead.
func offeredSize(ns wire.Namespace) int {
	const overhead = 128
	return overhead + 2*fields(ns)
}

// terminate ends the request with cause, resetting the stream with code
// unless the session is over (its close tells the peer). It is
// idempotent.
func (srv *nsServed) terminate(cause error, code wire.ResetCode) {
	if !srv.endWith(cause) {
		return
	}
	// The Context ends first, so that its cause is this one and not the
	// requester's answer to the reset.
	srv.in.cancel(cause)
	if srv.sess.ctx.Err() == nil {
		srv.rs.cancel(code)
	}
	srv.closeDone()
}

// finished ends the request after this end's FIN, which followed a
// refused update (§9.5.1).
func (srv *nsServed) finished(cause error) {
	if srv.endWith(cause) {
		srv.in.cancel(cause)
		srv.closeDone()
	}
}

// endWith marks the request ended with cause and stops its timers; false
// if it had ended already.
func (srv *nsServed) endWith(cause error) bool {
	srv.mu.Lock()
	if srv.ended {
		srv.mu.Unlock()
		return false
	}
	srv.ended, srv.err = true, cause
	srv.queue, srv.pending = nil, nil
	srv.held.close(&srv.sess.backlog)
	srv.sess.backlog.Release(srv.queued + srv.offered)
	srv.queued, srv.offered = 0, 0
	if srv.expiry != nil {
		srv.expiry.Stop()
	}
	stop := srv.stopLife
	srv.mu.Unlock()
	if stop != nil {
		stop()
	}
	return true
}

// run writes the queue in order, each message within
// Config.SubscriberGrace.
func (srv *nsServed) run() {
	for {
		select {
		case <-srv.wake:
		case <-srv.done:
			return
		}
		for {
			srv.mu.Lock()
			batch, fin, ended := srv.queue, srv.finning, srv.ended
			held := srv.queued
			srv.queue, srv.queued = nil, 0
			refusal := srv.refusal
			srv.mu.Unlock()
			if ended {
				return
			}
			if len(batch) == 0 {
				if fin {
					_ = srv.rs.fin()
					srv.finished(refusal)
					return
				}
				break
			}
			ok := true
			for _, m := range batch {
				if ok = srv.write(m); !ok {
					break
				}
			}
			srv.sess.backlog.Release(held)
			if !ok {
				return
			}
		}
	}
}

// write writes m, giving the requester SubscriberGrace to make room.
func (srv *nsServed) write(m wire.Message) bool {
	grace := srv.sess.cfg.SubscriberGrace
	deadline := time.Now().Add(grace)
	_ = srv.rs.str.SetWriteDeadline(deadline)
	srv.mu.Lock()
	ended := srv.ended
	srv.mu.Unlock()
	if ended {
		// Checked after the deadline is set: a terminate that set its past
		// deadline before ours is seen here.
		return false
	}
	err := srv.rs.write(m)
	if err == nil {
		return true
	}
	if !time.Now().Before(deadline) {
		srv.behind(fmt.Errorf("moqt: requester did not read its %s response stream for %v", srv.kind, grace))
	} else {
		srv.terminate(err, wire.ResetCancelled)
	}
	return false
}

// handle applies the requester's messages: REQUEST_UPDATEs (and GOAWAY).
func (srv *nsServed) handle(m wire.Message, rej *wire.RejectError) error {
	if _, ok := m.(*wire.Goaway); ok {
		return nil
	}
	u, ok := m.(*wire.RequestUpdate)
	if !ok {
		return protocolViolation("%s after %s", m.Type(), srv.kind)
	}
	srv.mu.Lock()
	over := srv.ended || srv.finning
	srv.mu.Unlock()
	if over {
		// The request is over; the update crossed its end.
		return srv.rs.crossed(m)
	}
	if err := srv.sess.ids.checkPeer(u.RequestID); err != nil {
		return err
	}
	if err := srv.sess.rules.checkPeerParams(&u.Parameters, updateContext(srv.kind)); err != nil {
		return sessionErrorFrom(err)
	}
	var pu pendingUpdate
	if rej != nil {
		// Refused already: its Request ID is all the answer needs.
		pu = pendingUpdate{msg: &wire.RequestUpdate{RequestID: u.RequestID}, rej: rej}
	} else {
		own, size, err := detachSized(srv.sess.version, u)
		if err != nil {
			return err
		}
		pu = pendingUpdate{msg: own, cost: heldUpdateCost(size, &own.Parameters)}
		srv.mu.Lock()
		if err := srv.held.take(&srv.sess.backlog, pu.cost); err != nil {
			// Past the bytes a request may hold unanswered, or the
			// session's budget: refused in its turn, which closes the
			// stream (request_update_held.go).
			pu = refusedUpdate(u.RequestID, err)
		}
		srv.mu.Unlock()
	}
	for {
		srv.mu.Lock()
		if srv.answered && !srv.draining || srv.ended {
			srv.mu.Unlock()
			break
		}
		if limit := srv.sess.maxRequestUpdates(); limit > 0 && uint64(len(srv.pending)) >= limit {
			srv.mu.Unlock()
			return &SessionError{Code: wire.TooManyRequestUpdates,
				Reason: fmt.Sprintf("more than %d outstanding REQUEST_UPDATEs on request stream %d", limit, srv.rs.id)}
		}
		if len(srv.pending) < maxEarlyUpdates {
			srv.pending = append(srv.pending, pu)
			srv.mu.Unlock()
			return nil
		}
		srv.mu.Unlock()
		select {
		case <-srv.drained:
		case <-srv.done:
		case <-srv.sess.ctx.Done():
			return nil
		}
	}
	srv.apply(pu)
	return nil
}

// apply answers one update of the accepted request, once the
// application's OnUpdate has seen it.
func (srv *nsServed) apply(pu pendingUpdate) {
	var refusal *RequestError
	if pu.rej != nil {
		refusal = refusalOf(pu.rej)
	} else if srv.onUpdate != nil {
		if err := srv.onUpdate(&pu.msg.Parameters); err != nil {
			refusal = asRequestError(err)
		}
	}
	srv.mu.Lock()
	ok := srv.applyLocked(pu, refusal)
	srv.held.give(&srv.sess.backlog, pu.cost)
	srv.mu.Unlock()
	if !ok {
		srv.behind(errNamespaceQueueFull)
	}
}

// applyLocked queues the answer to one update, under mu, refusing it
// with refusal if set; false if the queue is full.
func (srv *nsServed) applyLocked(pu pendingUpdate, refusal *RequestError) bool {
	if srv.usableLocked() != nil {
		return true
	}
	var after []wire.Message
	if refusal == nil && srv.update != nil {
		after, refusal = srv.update(pu.msg)
	}
	var ok bool
	if refusal != nil {
		// A refused update closes the stream (§9.5.1): the request is over
		// for the requester as soon as it reads the REQUEST_ERROR, so what
		// the request holds (its prefix claim) goes before that is sent,
		// not after the FIN that follows; releasing is idempotent.
		ok = srv.pushLocked(refusal.message())
		srv.finning, srv.refusal = true, refusal
		if !ok {
			srv.finning = false
		}
		if srv.onEnd != nil {
			srv.onEnd()
		}
	} else {
		grant := wire.Params{}
		if srv.expires > 0 {
			grant.Expires = wire.Some(srv.expires)
			srv.expiry.Reset(msDuration(srv.expires))
		}
		ok = srv.pushLocked(append([]wire.Message{&wire.RequestOK{Parameters: grant}}, after...)...)
	}
	return ok
}

// peerFinished waits for the request's end: the requester's FIN is no
// cancellation (§6.4.2.2).
func (srv *nsServed) peerFinished() {
	select {
	case <-srv.done:
	case <-srv.sess.ctx.Done():
	}
}

// reset: the requester cancelled the request (or this end did, and the
// read broke off). It ends now, answered or not: a Handler still deciding
// finds its Context done and its answer refused, and the prefix it
// claimed is free for the requester's next request.
func (srv *nsServed) reset(cause error) { srv.terminate(cause, wire.ResetCancelled) }

// stoppedByPeer: the requester's STOP_SENDING alone cancels the request
// too (§6.4.2.3), before the answer as after it.
func (srv *nsServed) stoppedByPeer() {
	srv.terminate(fmt.Errorf("%w: STOP_SENDING from the requester", ErrCancelled), wire.ResetCancelled)
}

func (srv *nsServed) failed(*SessionError) {}
