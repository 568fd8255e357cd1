package sendq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// drain writes the queue to its stream, oldest bytes first, until it is
// empty or the stream fails. A stream with objects under a delivery
// timeout is written up to the end of the oldest one at a time, so that
// its timer moves on as soon as that object has been passed to the
// transport. Each Write has a deadline a grace away: one that takes
// nothing, while no other stream of the group takes anything either,
// finds the subscriber stalled, too far behind.
func (q *Queue) drain() {
	defer q.drained()
	g := q.group
	err := q.owner.Ready()
	q.mu.Lock()
	for {
		if err != nil || q.dropped {
			q.dropAll()
			q.resetStorage()
			q.marks = nil
			q.owner.DisarmObject()
			q.broken.Store(true)
			q.active.Store(false)
			q.mu.Unlock()
			// The stream was reset, stopped by the peer or lost with the
			// session, or the subscriber is too far behind.
			q.owner.Failed(err)
			return
		}
		if len(q.marks) > 0 && q.marks[0].end <= q.sent {
			for len(q.marks) > 0 && q.marks[0].end <= q.sent {
				q.marks = q.marks[1:]
			}
			if len(q.marks) > 0 {
				q.owner.ArmObject(q.marks[0].deadline)
			} else {
				q.owner.DisarmObject()
			}
		}
		if q.queued == 0 {
			// Caught up. A mark left is the current object's, not all
			// written yet: its timer goes on, now the publisher's.
			fin, reset, code := q.fin, q.reset, q.code
			q.resetStorage()
			q.marks = q.marks[:0]
			q.active.Store(false)
			q.mu.Unlock()
			if fin {
				q.owner.Finish(reset, code)
			}
			return
		}
		limit := q.queued
		if len(q.marks) > 0 {
			limit = int(min(uint64(limit), q.marks[0].end-q.sent))
		}
		chunk, gathered := q.next(limit)
		q.mu.Unlock()

		// Not on a stream already reset: setting the deadline may undo
		// the past one a reset sets to wake a WebTransport Write (see
		// the transport's wtStream.CancelWrite).
		n := 0
		if err = context.Cause(q.str.Context()); err == nil {
			before := g.taken.Load()
			until := time.Now().Add(g.grace)
			if err = q.str.SetWriteDeadline(until); err == nil {
				n, err = q.write(chunk)
			}
			if n > 0 {
				g.taken.Add(1)
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = nil
				// Taking nothing is a stall, unless the deadline was
				// not ours (an interrupted publisher's) or the group's
				// other streams are taking bytes.
				if n == 0 && !time.Now().Before(until) && g.taken.Load() == before {
					err = &CutError{Err: ErrTooFarBehind, Reason: fmt.Sprintf("no data taken for %v", g.grace)}
				}
			}
		}

		if gathered != nil {
			gatherPool.Put(gathered)
		}
		q.mu.Lock()
		q.advance(n)
		q.sent += uint64(n)
	}
}

// drained wakes the Writer, which may be waiting for a stream to catch up
// (Await).
func (q *Queue) drained() {
	select {
	case q.w.caughtUp <- struct{}{}:
	default:
	}
	q.owner.Drained()
}
