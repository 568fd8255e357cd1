package moqt

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// updateQueue is the REQUEST_UPDATEs (§9.5) this end sent on one request
// stream and awaits answers to: a Subscription's, a Fetch's and a
// namespace request's. The answers come back in the order of the updates,
// so the updates are queued and written one at a time, in turn. The
// owner's lock guards the queue: the owner reads it under that lock (a
// subscription's provisional filters) and settles answers with its own
// state.
type updateQueue struct {
	rs   *requestStream
	mu   *sync.Mutex     // the owner's
	done <-chan struct{} // closed when the request has ended
	// ended is why the request ended; called without mu.
	ended func() error
	// closedLocked, if set, reports with mu held that the request takes no
	// more updates.
	closedLocked func() bool
	// write writes an update; nil is rs.write.
	write func(ctx context.Context, m *wire.RequestUpdate) error

	turn chan struct{} // cap 1, held by the update being queued and written

	pending []*sentUpdate // oldest first; mu
	// credit is closed and replaced each time an outstanding update is
	// answered, waking an update held back by the peer's
	// MAX_REQUEST_UPDATES (§9.1.7); mu.
	credit chan struct{}
}

// sentUpdate is a REQUEST_UPDATE awaiting its answer.
type sentUpdate struct {
	id     uint64
	params *wire.Params
	tokens *tokenUse         // settled by the answer (§8.9)
	answer chan updateAnswer // cap 1
	// filter, for a subscription, is what params make of its filter
	// meanwhile, to accept objects the publisher sends under them before
	// its answer arrives (subscription_data.go).
	filter *filter.Filter
}

// updateAnswer is the answer to a REQUEST_UPDATE: REQUEST_OK's parameters,
// or why it failed.
type updateAnswer struct {
	granted wire.Params
	err     error
}

func newUpdateQueue(rs *requestStream, mu *sync.Mutex, done <-chan struct{}, ended func() error) updateQueue {
	return updateQueue{rs: rs, mu: mu, done: done, ended: ended, turn: make(chan struct{}, 1)}
}

// enter waits for the turn, which leave gives back.
func (q *updateQueue) enter(ctx context.Context) error {
	select {
	case q.turn <- struct{}{}:
		return nil
	case <-q.done:
		return q.ended()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *updateQueue) leave() { <-q.turn }

// send queues and writes a REQUEST_UPDATE with params; the turn is held.
// An update whose caller gave up stays outstanding until answered, so a
// further one waits for credit rather than exceed the peer's
// MAX_REQUEST_UPDATES (§9.1.7). The tokens are checked and the update
// queued in the turn, so that the peer sees tokens in the order they were
// checked (§8.9). queued, if set, runs with mu held once the update has
// its Request ID, before it is written.
func (q *updateQueue) send(ctx context.Context, params *wire.Params, queued func(u *sentUpdate)) (*sentUpdate, error) {
	sess := q.rs.sess
	q.mu.Lock()
	for limit := sess.peerSetup.MaxRequestUpdates.Value; limit > 0 && uint64(len(q.pending)) >= limit; {
		if q.credit == nil {
			q.credit = make(chan struct{})
		}
		credit := q.credit
		q.mu.Unlock()
		select {
		case <-credit:
		case <-q.done:
			return nil, q.ended()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		q.mu.Lock()
	}
	q.mu.Unlock()
	use, err := sess.sentTokens.prepare(params.AuthorizationTokens, q.rs.tokenKey)
	if err != nil {
		return nil, err
	}
	u := &sentUpdate{params: params, tokens: use, answer: make(chan updateAnswer, 1)}
	q.mu.Lock()
	if q.closedLocked != nil && q.closedLocked() {
		q.mu.Unlock()
		sess.sentTokens.abort(use)
		return nil, q.ended()
	}
	u.id = sess.ids.allocate()
	q.pending = append(q.pending, u)
	if queued != nil {
		queued(u)
	}
	q.mu.Unlock()
	m := &wire.RequestUpdate{RequestID: u.id, Parameters: *params}
	if q.write != nil {
		err = q.write(ctx, m)
	} else {
		err = q.rs.write(m)
	}
	if err != nil {
		q.mu.Lock()
		q.pending = slices.DeleteFunc(q.pending, func(v *sentUpdate) bool { return v == u })
		q.mu.Unlock()
		if errors.Is(err, errStreamDone) {
			sess.sentTokens.abort(use) // nothing left
		} // else whether any of it left is unknown: the tokens stay pending
		return nil, err
	}
	return u, nil
}

// await waits for u's answer: one that came before the request ended is
// still the update's result; otherwise the error is the request's, or
// ctx's.
func (q *updateQueue) await(ctx context.Context, u *sentUpdate) (wire.Params, error) {
	select {
	case a := <-u.answer:
		return a.granted, a.err
	case <-q.done:
		select {
		case a := <-u.answer:
			return a.granted, a.err
		default:
			return wire.Params{}, q.ended()
		}
	case <-ctx.Done():
		return wire.Params{}, ctx.Err()
	}
}

// popLocked takes the oldest outstanding update, which an answer just
// answered, and settles its tokens; nil if there is none. mu is held.
func (q *updateQueue) popLocked() *sentUpdate {
	if len(q.pending) == 0 {
		return nil
	}
	u := q.pending[0]
	q.pending = q.pending[1:]
	if q.credit != nil {
		close(q.credit)
		q.credit = nil
	}
	q.rs.sess.sentTokens.answered(u.tokens)
	return u
}

// takeAllLocked empties the queue, for the request's end: the caller
// answers each with why, without mu. mu is held.
func (q *updateQueue) takeAllLocked() []*sentUpdate {
	ups := q.pending
	q.pending = nil
	return ups
}

// settle delivers u's answer.
func (u *sentUpdate) settle(granted wire.Params, err error) {
	u.answer <- updateAnswer{granted: granted, err: err}
}
