// Package sendq is the send side of a publisher's data streams: what no
// subscriber may make the publisher, or any other subscriber, wait for
// beyond a bounded grace.
//
// A Writer passes each object to the streams of its subscribers in turn,
// from the publisher's goroutine, straight to the transport. A QUIC
// stream's Write blocks while the stream or the connection is out of
// flow-control credit (quic-go takes at most about one packet beyond what
// it can send), so every Write has a bound (Writer.Send): WriteGrace when
// the object goes to more than one stream, so that one subscriber that
// does not read costs the others almost nothing; the caller's when it
// goes to one (no one else waits, so the publisher is held back, as by
// any flow control, but no longer than that).
//
// Neither is the stream's deadline (quic-go would take a lock and wake its
// sender for each one set, and allocate a timer for each Write that
// blocks): the Writer's Watchdog, a timer that runs while writes go on,
// sets a past deadline on a Write still blocked when its wait is over.
//
// A stream that has not taken all of its bytes by then keeps what it took,
// and the rest goes to the stream's Queue, followed by everything later
// written to that stream: one goroutine per queued stream (its drain)
// writes the queue in order and ends once it is empty, after which the
// publisher writes to the stream itself again. While a Group (one
// subscriber's streams) has anything queued, its other streams queue too,
// new ones included, when the object is shared: it is behind, and the
// publisher does not spend a WriteGrace per stream to find that out again.
// Only one of them writes to a stream at a time, so its bytes keep their
// order. The fast path costs a read of the clock per shared stream write
// and a few atomics. Queues hold an object's payload once, however many
// of them hold the object (payload.go).
//
// A Write that passes its deadline returns how many bytes it took, and the
// stream stays usable: quic-go drops its reference to the rest of the
// buffer before returning, and webtransport-go does not treat a timeout
// as the stream's end (see transport.SendStream.SetWriteDeadline).
//
// A Group is too far behind (a *CutError wrapping ErrTooFarBehind) when
// queuing more would pass its limit, or when one of its drains has had no
// byte taken for a whole grace while none of its other streams took any
// either: a subscriber that stopped reading, or was killed, is cut off
// after about one grace, not QUIC's idle timeout. Queues also count
// against their Session's budgets (budget.go), refused with
// ErrExcessiveLoad. The owner of the streams (an Owner) tells the peer.
//
// Delivery timeouts cover bytes in a queue: an object's timeout runs until
// its last byte has been passed to the transport. While a stream is queued
// the objects with a timeout are listed with the stream offset where they
// end (Queue.Mark); the drain moves the owner's object timer to the oldest
// of them.
package sendq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// Stream is the transport stream a Queue writes to.
type Stream interface {
	Write(b []byte) (int, error)
	SetWriteDeadline(t time.Time) error
	// Context is done, with the cause, once the stream is reset.
	Context() context.Context
}

// Owner is what only the owner of a Queue's stream knows: its delivery
// timeouts, its subscription's state and how the peer is told.
type Owner interface {
	// Late reports whether the current object's delivery timeout has
	// passed, resetting the stream if so.
	Late() bool
	// CurrentObject is the stream offset past the current object's last
	// byte and its delivery deadline (0 for none) if its timer is armed.
	CurrentObject() (end uint64, deadline int64)
	// ArmObject moves the stream's object timer to deadline; DisarmObject
	// stops it. While the stream is queued they are called under the
	// queue's lock.
	ArmObject(deadline int64)
	DisarmObject()
	// GraceExpired is told that a Write's wait was over with bytes left,
	// which go to the queue.
	GraceExpired()
	// Ready returns once the drain may write (objects may wait for the
	// subscription to be accepted), or why it never will.
	Ready() error
	// Failed is told that the drain ended without writing everything:
	// err, a *CutError when the subscriber is too far behind, or nil
	// when the queue was discarded. The stream is to be reset.
	Failed(err error)
	// Finish is told that the queue was written after FinishAfter asked
	// for the stream's end: a FIN, or a reset with code.
	Finish(reset bool, code wire.ResetCode)
	// Drained is told that the drain's goroutine ends, after the above.
	Drained()
}

// Queue is one stream's send side: the bytes queued for it and the
// publisher's state of the stream.
//
// While active, the stream belongs to the drain goroutine: it alone writes
// to the stream and arms the owner's object timer, the publisher only
// appends under mu. Otherwise both belong to the publisher (the caller of
// its Writer's methods). Only the publisher sets active; only the drain
// clears it, under mu.
type Queue struct {
	str   Stream
	owner Owner
	group *Group
	w     *Writer

	// The publisher's.
	off uint64    // stream offset past the last byte written or queued
	wdl time.Time // the deadline last set on str; a past one when unknown

	active    atomic.Bool
	broken    atomic.Bool // a write failed: the stream is reset or gone
	markFirst atomic.Bool // the next Write that takes bytes marks them (MarkFirstWrite)

	mu sync.Mutex // guards the fields below
	// segs are the bytes not yet passed to the transport, oldest first
	// (payload.go): the queue's own, in arena, or a shared payload's.
	segs    []seg
	queued  int // bytes in segs
	arena   []byte
	ownLast bool   // the last segment ends at the end of arena
	sent    uint64 // the stream offset of the first byte of segs
	marks   []mark
	fin     bool // the stream is over: FIN (or a reset) once segs are written
	reset   bool // end with a reset with code rather than a FIN
	code    wire.ResetCode
	dropped bool // the stream was reset: write nothing more
}

// mark is an object with a delivery timeout whose last byte has not been
// passed to the transport yet.
type mark struct {
	end      uint64 // the stream offset just past its last byte
	deadline int64
}

// Init sets the stream q writes to, its owner, the group it counts in and
// the Writer that writes to it.
func (q *Queue) Init(str Stream, owner Owner, g *Group, w *Writer) {
	q.str, q.owner, q.group, q.w = str, owner, g, w
}

// MarkFirstWrite makes the first write that takes bytes, by the publisher
// or the drain, keep its first bytes through a later reset of the stream
// (its WriteMarked, where the stream has one). The caller is the
// publisher, before any write.
func (q *Queue) MarkFirstWrite() { q.markFirst.Store(true) }

// markedStream is a Stream that can mark its first bytes reliable
// (transport.SendStream.WriteMarked).
type markedStream interface {
	WriteMarked(b []byte) (int, error)
}

// write passes b to the stream: with WriteMarked until bytes are taken,
// after MarkFirstWrite.
func (q *Queue) write(b []byte) (int, error) {
	if q.markFirst.Load() {
		if m, ok := q.str.(markedStream); ok {
			n, err := m.WriteMarked(b)
			if n > 0 {
				q.markFirst.Store(false)
			}
			return n, err
		}
	}
	return q.str.Write(b)
}

// Offset is the stream offset past the last byte written or queued. The
// caller is the publisher.
func (q *Queue) Offset() uint64 { return q.off }

// Active reports whether bytes are queued, or being written by the drain.
func (q *Queue) Active() bool { return q.active.Load() }

// Broken reports whether the drain failed: the stream is reset or gone.
func (q *Queue) Broken() bool { return q.broken.Load() }

// enqueue appends b, ending with pl's payload (nil for none), to the
// queue. It reports false if the queue has just been written and its
// drain is gone.
func (q *Queue) enqueue(b []byte, pl *Payload) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active.Load() {
		return false, nil
	}
	if err := q.put(b, pl); err != nil {
		return true, err
	}
	q.off += uint64(len(b))
	return true, nil
}

// spill starts the queue with rest, what a Write did not take in time
// (ending with pl's payload, nil for none), and the drain that writes it.
// The current object's timeout, if armed, now covers it there.
func (q *Queue) spill(rest []byte, pl *Payload) error {
	q.mu.Lock()
	if err := q.put(rest, pl); err != nil {
		q.mu.Unlock()
		return err
	}
	q.sent = q.off
	q.off += uint64(len(rest))
	q.marks = q.marks[:0]
	if end, d := q.owner.CurrentObject(); d != 0 {
		q.marks = append(q.marks, mark{end: end, deadline: d})
	}
	q.active.Store(true)
	q.mu.Unlock()
	q.wdl = time.Unix(1, 0) // unknown: the drain sets its own
	go q.drain()
	return nil
}

// Mark starts the delivery timeout of an object whose last byte will be
// at stream offset end, on a queued stream: it waits its turn behind the
// others. It reports false, and does nothing, when the stream is not
// queued: the publisher arms the timer itself.
func (q *Queue) Mark(end uint64, deadline int64) bool {
	if !q.active.Load() {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active.Load() {
		return false
	}
	q.marks = append(q.marks, mark{end: end, deadline: deadline})
	if len(q.marks) == 1 {
		q.owner.ArmObject(deadline)
	}
	return true
}

// FinishAfter asks the drain to end the stream once the queue is written:
// with a FIN, or with a reset with code when reset is set. It reports
// false when nothing is queued: the publisher ends the stream itself.
func (q *Queue) FinishAfter(reset bool, code wire.ResetCode) bool {
	if !q.active.Load() {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.active.Load() {
		return false
	}
	q.fin, q.reset, q.code = true, reset, code
	return true
}

// Discard drops the queue and stops the object timer, once the stream has
// been reset. A drain ends without writing more.
func (q *Queue) Discard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dropped = true
	q.owner.DisarmObject()
}
