package sendq

import (
	"sync"
	"sync/atomic"
)

// Shared payloads. An object fanned out to many subscribers is the same
// payload bytes on every stream, after a header of each stream's own; a
// Queue holds the header bytes it was not able to write as its own, and
// the payload bytes as a reference to one copy shared by every queue that
// needs them, made when the first one does. A publisher ahead of many
// slow subscribers (a relay whose upstream is not held back by its
// downstream) would otherwise hold a copy of each object per subscriber.
//
// What a queue holds counts in full against its Group and its Session,
// which bound how far behind one subscriber, and one peer, may be. The
// Shared budget, which bounds the memory of every session on it, counts a
// queue's own bytes, and a shared copy once: charged to the Shared budget
// of the first session whose queue takes it, while any queue holds it.

// Payload is the payload bytes at the end of what a Writer sends to
// several streams, as one object (or one piece of a streamed object). The
// zero value, or one Reset to no bytes, is no payload: every byte is the
// queue's own.
type Payload struct {
	src []byte       // the caller's, valid until the next Reset
	c   *payloadCopy // the copy queues share, once one needed it
}

// Reset makes src the payload of the Sends that follow, up to the next
// Reset: each sends bytes that end with src. The copy made for the
// previous payload, if any, stays with the queues holding it.
func (p *Payload) Reset(src []byte) { p.src, p.c = src, nil }

// payloadCopy is one payload's bytes, shared by the queues that hold
// them. refs counts the segments referring to it, which the publisher
// adds and drains drop: while there are any, len(b) is charged to budget.
type payloadCopy struct {
	b      []byte
	refs   atomic.Int64
	budget *Shared // charged to; nil for none
}

// shared returns the copy of p's payload for a queue of sess, making it at
// the first call.
func (p *Payload) shared(sess *Session) *payloadCopy {
	if p.c == nil {
		p.c = &payloadCopy{b: append([]byte(nil), p.src...)}
		if sess != nil {
			p.c.budget = sess.shared
		}
	}
	return p.c
}

// ref counts one more segment referring to c, charging c's bytes to its
// budget if none did, for a session holding held bytes. It fails with a
// *CutError if the budget refuses them.
func (c *payloadCopy) ref(held int64) error {
	if c.refs.Add(1) > 1 || c.budget == nil {
		return nil
	}
	if !c.budget.admit(int64(len(c.b)), held) {
		c.refs.Add(-1)
		return excessiveShared(c.budget)
	}
	return nil
}

// unref drops a segment's reference to c; the last one uncharges it.
func (c *payloadCopy) unref() {
	if c.refs.Add(-1) == 0 && c.budget != nil {
		c.budget.used.Add(-int64(len(c.b)))
	}
}

// seg is a piece of a queue: its own bytes, or (p not nil) bytes of a
// shared payload copy.
type seg struct {
	b []byte
	p *payloadCopy
}

// gatherPool holds the buffers a drain gathers a queue's pieces into, so
// that one Write takes several objects, as from one buffer.
var gatherPool = sync.Pool{New: func() any { b := make([]byte, gatherSize); return &b }}

// gatherSize bounds the bytes a drain passes in one Write: a few QUIC
// packets, so that a drain blocked in a Write holds little.
const gatherSize = 16 << 10

// minShared is the smallest payload queues share: a reference costs a
// segment (32 bytes) and the copy its bookkeeping (48), which would cost
// a small payload more than its bytes; those are copied as the queue's
// own, so that what a queue holds stays within about twice what it counts.
const minShared = 256

// arenaSize is the storage a queue's own bytes (headers, mostly) are
// appended to, at least.
const arenaSize = 512

// arenaPool holds arenas of arenaSize whose bytes were all written: a
// queue whose drain is always busy (never empty, so never resetStorage)
// takes one every few small objects, and would otherwise allocate it.
var arenaPool = sync.Pool{New: func() any { return new([arenaSize]byte) }}

// usedArena is an arena filled before the queue's current one, with
// bytes not all written yet.
type usedArena struct {
	a    *[arenaSize]byte // nil for a larger one, not pooled
	left int              // its bytes still queued
}

// put appends b to the queue, the last payload bytes of it (if pl has any)
// as a reference to pl's shared copy, and charges them once the queue is
// behind (charge). b ends with the last len(b) bytes of pl's payload, or
// with all of it. q.mu is held.
func (q *Queue) put(b []byte, pl *Payload) error {
	shared := 0
	if pl != nil && len(pl.src) >= minShared {
		shared = min(len(b), len(pl.src))
	}
	own := b[:len(b)-shared]
	if err := q.charge(len(b), len(own)); err != nil {
		return err
	}
	if shared > 0 {
		sess := q.group.sess
		c := pl.shared(sess)
		var held int64
		if sess != nil {
			held = sess.used.Load()
		}
		if err := c.ref(held); err != nil {
			q.uncharge(len(b), len(own))
			return err
		}
		q.appendOwn(own)
		q.segs = append(q.segs, seg{b: c.b[len(c.b)-shared:], p: c})
		q.ownLast = false
	} else {
		q.appendOwn(own)
	}
	q.queued += len(b)
	q.own += len(own)
	return nil
}

// charge counts n more bytes, of which own are the queue's own, against
// the group and its session once the queue is behind; before, they are in
// flight, uncounted (Window). q.mu is held.
func (q *Queue) charge(n, own int) error {
	if !q.behind.Load() {
		return nil
	}
	return q.group.charge(n, own, q.whole)
}

// uncharge undoes charge, for bytes refused after all. q.mu is held.
func (q *Queue) uncharge(n, own int) {
	if q.behind.Load() {
		q.group.release(n, own)
	}
}

// caughtUp ends the queue's backlog once it holds no more than Window
// again and the drain's last Write took all it was given: what is left is
// in flight, uncounted, and a publisher waiting for it may go on. q.mu is
// held.
func (q *Queue) caughtUp() {
	if !q.behind.Load() || q.queued > Window {
		return
	}
	q.group.release(q.queued, q.own)
	q.behind.Store(false)
	q.w.wake()
}

// appendOwn appends b, the queue's own bytes, to its arena, extending the
// last segment when it is the arena's last bytes. q.mu is held.
func (q *Queue) appendOwn(b []byte) {
	if len(b) == 0 {
		return
	}
	if cap(q.arena)-len(q.arena) < len(b) {
		q.retireArena()
		if len(b) <= arenaSize {
			a := arenaPool.Get().(*[arenaSize]byte)
			q.arena, q.pooled = a[:0], a
		} else {
			q.arena, q.pooled = make([]byte, 0, len(b)), nil
		}
		q.ownLast = false
	}
	start := len(q.arena)
	q.arena = append(q.arena, b...)
	q.arenaLeft += len(b)
	if last := len(q.segs) - 1; q.ownLast && last >= 0 {
		// The last segment ends where b begins, in the same storage.
		q.segs[last].b = q.segs[last].b[:len(q.segs[last].b)+len(b)]
		return
	}
	q.segs = append(q.segs, seg{b: q.arena[start:]})
	q.ownLast = true
}

// retireArena leaves the current arena for a new one: back to the pool
// if written, or else among the used ones until it is. q.mu is held.
func (q *Queue) retireArena() {
	switch {
	case q.arenaLeft > 0:
		if q.used == nil {
			// Room for a Window's worth of arenas: one allocation, not
			// append's doublings, for a stream that falls behind.
			q.used = make([]usedArena, 0, Window/arenaSize)
		}
		q.used = append(q.used, usedArena{a: q.pooled, left: q.arenaLeft})
	case q.pooled != nil:
		arenaPool.Put(q.pooled)
	}
	q.arena, q.pooled, q.arenaLeft = nil, nil, 0
}

// ownWritten counts n more of the queue's own bytes written or dropped,
// the oldest first: the used arenas they empty go back to the pool. q.mu
// is held.
func (q *Queue) ownWritten(n int) {
	for n > 0 && q.usedHead < len(q.used) {
		u := &q.used[q.usedHead]
		k := min(n, u.left)
		u.left -= k
		n -= k
		if u.left > 0 {
			return
		}
		if u.a != nil {
			arenaPool.Put(u.a)
		}
		*u = usedArena{}
		q.usedHead++
		if q.usedHead > len(q.used)/2 {
			// Reclaim the head: the list stays as long as what is used.
			k := copy(q.used, q.used[q.usedHead:])
			clear(q.used[k:])
			q.used, q.usedHead = q.used[:k], 0
		}
	}
	q.arenaLeft -= n
}

// next returns the bytes the drain writes next, at most limit: the first
// segment's, or several gathered into a pooled buffer (gathered then
// true, the buffer to give back). q.mu is held.
func (q *Queue) next(limit int) (chunk []byte, gathered *[]byte) {
	first := q.segs[0].b
	if len(first) >= limit || len(q.segs) == 1 {
		return first[:min(len(first), limit)], nil
	}
	gathered = gatherPool.Get().(*[]byte)
	chunk = (*gathered)[:0]
	limit = min(limit, gatherSize)
	for _, s := range q.segs {
		if len(chunk) == limit {
			break
		}
		chunk = append(chunk, s.b[:min(len(s.b), limit-len(chunk))]...)
	}
	return chunk, gathered
}

// advance drops the first n bytes of the queue, written, and uncounts
// them. q.mu is held.
func (q *Queue) advance(n int) {
	total, own := n, 0
	for n > 0 {
		s := &q.segs[0]
		k := min(n, len(s.b))
		if s.p == nil {
			own += k
		}
		s.b = s.b[k:]
		n -= k
		q.queued -= k
		if len(s.b) == 0 {
			q.popSeg()
		}
	}
	q.own -= own
	q.ownWritten(own)
	if q.behind.Load() {
		q.group.release(total, own)
	}
	q.roomMade()
}

// dropAll drops everything queued, unwritten, and uncounts it. q.mu is
// held.
func (q *Queue) dropAll() {
	total, own := q.queued, q.own
	for len(q.segs) > 0 {
		q.popSeg()
	}
	q.ownWritten(own)
	q.queued, q.own = 0, 0
	if q.behind.Load() {
		q.group.release(total, own)
		q.behind.Store(false)
	}
}

// resetStorage forgets the queue's storage once nothing is left in it,
// but for a small arena, kept for the next backlog. q.mu is held.
func (q *Queue) resetStorage() {
	q.segArr = [4]seg{}
	q.segs = q.segArr[:0]
	if q.pooled == nil {
		q.arena = nil // none, or a larger one: not kept
	}
	q.arena, q.arenaLeft = q.arena[:0], 0
	clear(q.used) // none, as nothing is queued
	q.used, q.usedHead = q.used[:0], 0
	q.ownLast = false
}

// popSeg drops the first segment, and its reference to a shared copy.
// q.mu is held.
func (q *Queue) popSeg() {
	if c := q.segs[0].p; c != nil {
		c.unref()
	}
	q.segs[0] = seg{} // for the collector: the storage is reused
	q.segs = q.segs[1:]
	if len(q.segs) == 0 {
		q.ownLast = false
	}
}
