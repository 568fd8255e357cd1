// Package sendq is the send side of a publisher's data streams: what no
// subscriber may make the publisher, or any other subscriber, wait for
// beyond a bounded grace.
//
// A Writer passes each object to the streams of its subscribers in turn,
// from the publisher's goroutine, by appending it to each stream's Queue;
// one goroutine per Queue with bytes in it (its drain) passes them to the
// transport and ends once the queue is empty. This is group commit: quic-go
// costs about as much per Write whatever its size (its stream lock, a
// wake-up of its send loop, and packets sent as soon as it wakes), so a
// drain that writes everything accumulated while its previous Write was in
// progress sends several small objects for the price of one, in fuller
// packets.
//
// What a queue holds up to Window is in flight, as the bytes quic-go
// buffers for a direct Write are: it counts against no budget. A Send that
// leaves more waits for the drain to make room, as a Write waits for flow
// control, and every wait has a bound (Writer.Send): WriteGrace when the
// object goes to more than one stream, so that one subscriber that does
// not read costs the others almost nothing; the caller's when it goes to
// one (no one else waits, so the publisher is held back, as by any flow
// control, but no longer than that). Past it the queue is behind: what it
// holds is a backlog, and everything later written to the stream is
// appended without a wait until it holds no more than Window again.
//
// A Group (one subscriber's streams) is too far behind (a *CutError
// wrapping ErrTooFarBehind) when its backlogs would pass its limit, or
// when one of its drains has had no byte taken for a whole grace while
// none of its other streams took any either: a subscriber that stopped
// reading, or was killed, is cut off after about one grace, not QUIC's
// idle timeout. Backlogs also count against their Session's budgets
// (budget.go), refused with ErrExcessiveLoad. The owner of the streams
// (an Owner) tells the peer. Queues hold an object's payload once, however
// many of them hold the object (payload.go).
//
// A drain's Write that passes its deadline returns how many bytes it took,
// and the stream stays usable: quic-go drops its reference to the rest of
// the buffer before returning, and webtransport-go does not treat a
// timeout as the stream's end (see transport.SendStream.SetWriteDeadline).
//
// Delivery timeouts cover bytes in a queue: an object's timeout runs until
// its last byte has been passed to the transport. While a stream is queued
// the objects with a timeout are listed with the stream offset where they
// end (Queue.Mark); the drain moves the owner's object timer to the oldest
// of them.
package sendq

import (
	"context"
	"errors"
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
	// GraceExpired is told that the queue fell behind: a Send's wait
	// for room was over, and what the queue holds is a backlog.
	GraceExpired()
	// Ready returns once the drain may write held bytes (objects may
	// wait for the subscription to be accepted), or why it never will.
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
// appends under mu. Otherwise the publisher (the caller of its Writer's
// methods) arms the timer and ends the stream. Only the publisher sets
// active; only the drain clears it, under mu.
type Queue struct {
	str   Stream
	owner Owner
	group *Group
	w     *Writer

	// The publisher's.
	off uint64 // stream offset past the last byte queued

	active    atomic.Bool
	behind    atomic.Bool // past Window: what it holds is charged as a backlog
	broken    atomic.Bool // a write failed: the stream is reset or gone
	markFirst atomic.Bool // the next Write that takes bytes marks them (MarkFirstWrite)
	// reserveLast: the stream will likely end in a reset that keeps what
	// was written (ReserveLast).
	reserveLast atomic.Bool

	mu sync.Mutex // guards the fields below
	// segs are the bytes not yet passed to the transport, oldest first
	// (payload.go): the queue's own, in arena, or a shared payload's.
	segs   []seg
	segArr [4]seg // segs' storage while it fits: a queue that drains each object allocates none
	queued int    // bytes in segs
	own    int    // of which the queue's own (not a shared payload's)
	arena  []byte
	// pooled is arena's storage when from arenaPool; arenaLeft counts its
	// bytes still queued. used are the arenas filled before it, oldest
	// first from usedHead, with bytes still queued (payload.go).
	pooled    *[arenaSize]byte
	arenaLeft int
	used      []usedArena
	usedHead  int
	ownLast   bool   // the last segment ends at the end of arena
	sent      uint64 // the stream offset of the first byte of segs
	marks     []mark
	fin       bool // the stream is over: FIN (or a reset) once segs are written
	reset     bool // end with a reset with code rather than a FIN
	code      wire.ResetCode
	dropped   bool // the stream was reset: write nothing more
	holding   bool // the drain waits for the owner's Ready at holdAt
	holdAt    uint64
	fanout    bool          // the last Send's bytes went to other streams too
	whole     int           // the last Send's Writer.Object, for the drain's charges
	waiter    bool          // a publisher waits for room (send)
	room      chan struct{} // signalled by roomMade
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
	q.room = make(chan struct{}, 1)
	q.segs = q.segArr[:0]
}

// MarkFirstWrite makes the first write that takes bytes, by the publisher
// or the drain, keep its first bytes through a later reset of the stream
// (its WriteMarked, where the stream has one). The caller is the
// publisher, before any write.
func (q *Queue) MarkFirstWrite() { q.markFirst.Store(true) }

// ReserveLast makes each write that empties the queue end reserved
// against flow control (transport.SendStream.WriteReserved), at the cost
// of a second call into the transport: for a stream that will end in a
// reset that keeps what was written (one that joined its subgroup
// mid-way). A stream that ends so unforeseen (FinishAfter with a reset)
// has its last write reserved once that is known; one whose queue was
// already empty may not be, and its owner's reset lingers instead. The
// caller is the publisher, before any write.
func (q *Queue) ReserveLast() { q.reserveLast.Store(true) }

// markedStream is a Stream that can mark its first bytes reliable
// (transport.SendStream.WriteMarked).
type markedStream interface {
	WriteMarked(b []byte) (int, error)
}

// write passes b to the stream: with WriteMarked until bytes are taken,
// after MarkFirstWrite; with WriteReserved when reserve is set
// (ReserveLast).
func (q *Queue) write(b []byte, reserve bool) (int, error) {
	if q.markFirst.Load() {
		if m, ok := q.str.(markedStream); ok {
			n, err := m.WriteMarked(b)
			if n > 0 {
				q.markFirst.Store(false)
			}
			return n, err
		}
	}
	if reserve {
		if r, ok := q.str.(reservedStream); ok {
			return r.WriteReserved(b)
		}
	}
	return q.str.Write(b)
}

// reservedStream is a Stream whose writes can end reserved against flow
// control (transport.SendStream.WriteReserved).
type reservedStream interface {
	WriteReserved(b []byte) (int, error)
}

// Offset is the stream offset past the last byte queued. The caller is
// the publisher.
func (q *Queue) Offset() uint64 { return q.off }

// Active reports whether bytes are queued, or being written by the drain.
func (q *Queue) Active() bool { return q.active.Load() }

// Behind reports whether the queue holds more than Window: a backlog,
// which the subscriber has not taken as fast as the publisher wrote.
func (q *Queue) Behind() bool { return q.behind.Load() }

// Broken reports whether the drain failed: the stream is reset or gone.
func (q *Queue) Broken() bool { return q.broken.Load() }

// send appends b, ending with pl's payload (nil for none), to the queue,
// starting its drain if it has none. With hold the drain writes nothing
// from b on until the owner is Ready, and the queue is behind at once if
// it holds more than Window. It reports over when the queue, not behind,
// now holds more than Window: the publisher is to wait for room
// (Writer.Send), then put it behind (fallBehind). The caller is the
// publisher.
func (q *Queue) send(b []byte, pl *Payload, hold, fanout bool) (over bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dropped || q.broken.Load() {
		// Reset, or failed: the stream takes nothing more.
		return false, errDiscarded
	}
	q.fanout, q.whole = fanout, q.w.whole
	if fanout && !q.behind.Load() && q.group.queued.Load() > 0 {
		// The subscriber is behind on another stream: this one's bytes
		// are a backlog too, rather than cost the publisher a wait each
		// to find that out again.
		if _, err := q.fallBehindLocked(true); err != nil {
			return false, err
		}
	}
	start := !q.active.Load()
	if start {
		q.sent = q.off
		q.marks = q.marks[:0]
		if end, d := q.owner.CurrentObject(); d != 0 {
			// The current object's timer, armed by the publisher,
			// now follows the drain.
			q.marks = append(q.marks, mark{end: end, deadline: d})
		}
	}
	if err := q.put(b, pl); err != nil {
		if start {
			q.marks = q.marks[:0]
		}
		return false, err
	}
	if hold && !q.holding {
		q.holding, q.holdAt = true, q.off
	}
	q.off += uint64(len(b))
	if start {
		q.active.Store(true)
		go q.drain()
	}
	if q.behind.Load() || q.queued <= Window {
		return false, nil
	}
	if hold {
		fell, err := q.fallBehindLocked(false)
		if fell {
			defer q.owner.GraceExpired() // after the unlock
		}
		return false, err
	}
	q.waiter = true
	return true, nil
}

// stillOver reports whether the queue, not behind, still holds more than
// Window, registering the publisher to be woken (roomMade) if so.
func (q *Queue) stillOver() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.behind.Load() || q.queued <= Window || !q.active.Load() || q.dropped {
		q.waiter = false
		return false
	}
	q.waiter = true
	return true
}

// fallBehind makes the queue a backlog: it has held more than Window for
// longer than the publisher waits. What it holds is charged, or refused
// with a *CutError. The caller is the publisher.
func (q *Queue) fallBehind() error {
	q.mu.Lock()
	fell, err := q.fallBehindLocked(false)
	q.mu.Unlock()
	if fell {
		q.owner.GraceExpired()
	}
	return err
}

// fallBehindLocked is fallBehind with q.mu held, or, with always, makes
// the queue a backlog whatever it holds; it reports whether the queue fell
// behind now.
func (q *Queue) fallBehindLocked(always bool) (bool, error) {
	q.waiter = false
	if q.behind.Load() || q.queued <= Window && !always || q.dropped {
		return false, nil
	}
	if err := q.group.charge(q.queued, q.own, q.whole); err != nil {
		return false, err
	}
	q.behind.Store(true)
	return true, nil
}

// roomMade wakes a publisher waiting for room in the queue (send) once
// it holds no more than Window, or its drain has ended. q.mu is held.
func (q *Queue) roomMade() {
	if !q.waiter || q.queued > Window && q.active.Load() && !q.dropped {
		return
	}
	q.waiter = false
	select {
	case q.room <- struct{}{}:
	default:
	}
}

// errDiscarded reports bytes for a stream that was reset, or whose drain
// failed.
var errDiscarded = errors.New("sendq: stream reset")

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
	q.roomMade()
}
