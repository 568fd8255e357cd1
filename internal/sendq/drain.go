package sendq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
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
	var stalled time.Time // when the Writes began to take nothing; zero while they take bytes
	var err error
	q.mu.Lock()
	for {
		if err == nil && q.holding && q.sent >= q.holdAt && !q.dropped {
			// Held bytes: they wait for the owner (PUBLISH_OK).
			q.mu.Unlock()
			err = q.owner.Ready()
			q.mu.Lock()
			q.holding = false
		}
		if err != nil || q.dropped {
			told := false
			if err != nil && !q.dropped {
				// The owner first, so that the stream is reset with
				// the failure's code (and its subscription cut off)
				// before a publisher can find the queue broken and
				// reset it with its own.
				q.mu.Unlock()
				q.owner.Failed(err)
				q.mu.Lock()
				told = true
			}
			q.dropAll()
			q.resetStorage()
			q.marks = nil
			q.owner.DisarmObject()
			q.holding = false
			q.broken.Store(true)
			q.active.Store(false)
			q.roomMade()
			q.mu.Unlock()
			// The stream was reset, stopped by the peer or lost with the
			// session, or the subscriber is too far behind.
			if !told {
				q.owner.Failed(err)
			}
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
			q.fin = false
			q.roomMade()
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
		if q.holding {
			limit = int(min(uint64(limit), q.holdAt-q.sent))
		}
		if q.markFirst.Load() {
			// The marked write carries the stream's header, not a
			// whole gathered chunk that a full window may leave
			// untaken when a reset comes (MarkFirstWrite).
			limit = min(limit, len(q.segs[0].b))
		}
		chunk, gathered := q.next(limit)
		// The write that empties the queue before a reset that keeps
		// what was written ends reserved (ReserveLast).
		reserve := len(chunk) == q.queued && (q.reserveLast.Load() || q.fin && q.reset)
		// A fan-out stream whose Write has not returned in WriteGrace
		// is behind; one that is has the whole grace to take a byte.
		wait := g.grace
		if q.fanout && !q.behind.Load() {
			wait = min(wait, WriteGrace)
		}
		q.mu.Unlock()

		// Not on a stream already reset: setting the deadline may undo
		// the past one a reset sets to wake a WebTransport Write (see
		// the transport's wtStream.CancelWrite).
		n := 0
		if err = context.Cause(q.str.Context()); err == nil {
			before, path := g.taken.Load(), g.sess.pathCounts()
			begun := time.Now()
			until := begun.Add(wait)
			if err = q.str.SetWriteDeadline(until); err == nil {
				n, err = q.write(chunk, reserve)
			}
			if n > 0 {
				g.taken.Add(1)
			}
			progress := n > 0 || g.taken.Load() != before
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = nil
				// Taking nothing is a stall, unless the deadline was
				// not ours (an interrupted publisher's) or the group's
				// other streams are taking bytes.
				if !progress && !time.Now().Before(until) {
					if stalled.IsZero() {
						stalled = begun
					}
					if wait == g.grace {
						err = g.stall(path, stalled)
					}
				}
			}
			if progress {
				stalled = time.Time{}
			}
		}

		if gathered != nil {
			gatherPool.Put(gathered)
		}
		q.mu.Lock()
		q.advance(n)
		q.sent += uint64(n)
		switch {
		case n == len(chunk):
			q.caughtUp()
		case err == nil && wait < g.grace:
			// Still blocked at WriteGrace: a backlog.
			var fell bool
			if fell, err = q.fallBehindLocked(true); fell {
				q.mu.Unlock()
				q.owner.GraceExpired()
				q.mu.Lock()
			}
		}
	}
}

// lossStall bounds, in graces, how long a drain's Writes may take nothing
// while the path recovers from loss (Group.stall).
const lossStall = 5

// stall returns the *CutError for a drain whose Writes have taken nothing,
// and nor have the group's other streams, since stalled, the last Write
// for a whole grace from when the connection's counts were path: a
// subscriber that stopped reading is too far behind. Over a path
// recovering from loss (transport.Recovering: the peer heard from and
// this end retransmitting during that Write), quic-go's backoff holds
// streams the same way, and the drain waits on, up to lossStall graces in
// all; a peer gone silent, such as a killed one, is cut at once.
func (g *Group) stall(path transport.PathCounts, stalled time.Time) error {
	if transport.Recovering(path, g.sess.pathCounts()) && time.Since(stalled) < lossStall*g.grace {
		return nil
	}
	return &CutError{Err: ErrTooFarBehind, Reason: fmt.Sprintf("no data taken for %v", time.Since(stalled).Round(100*time.Millisecond))}
}

// drained wakes the Writer, which may be waiting for a stream to catch up
// (Await).
func (q *Queue) drained() {
	q.w.wake()
	q.owner.Drained()
}
