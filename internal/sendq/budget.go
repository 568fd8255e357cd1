package sendq

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
)

// Budgets for what is queued for slow peers.
//
// A Group's queues (one subscription's streams) are bounded by its limit,
// but a peer can hold as many subscriptions as it may open request
// streams, and a server has as many peers as connect. So the bytes queued
// for one peer are bounded too, across its groups and whatever else its
// session queues (Session), and so are those of every session sharing a
// Shared budget. What is refused is refused to the group whose write would
// pass the bound, of the session that holds too much: the caller ends it
// (a *CutError says why).
//
// Counting is three atomic adds per byte range queued or written from a
// queue: none on the path of a subscriber that keeps up.

// DefaultShared is the limit of a Shared budget whose Limit is 0.
const DefaultShared = 256 << 20

// ErrTooFarBehind reports bytes refused because a group's subscriber is
// too far behind: past its limit, or taking nothing for a whole grace.
var ErrTooFarBehind = errors.New("moqt: subscriber too far behind")

// ErrExcessiveLoad reports bytes refused by a session's budget or by the
// Shared budget it draws on.
var ErrExcessiveLoad = errors.New("moqt: backlog budget spent")

// CutError is a refusal that ends the subscriber's group: Err is
// ErrTooFarBehind or ErrExcessiveLoad, Reason says why.
type CutError struct {
	Err    error
	Reason string
}

// Error is Err's message and the reason: what the peer is told for
// ErrExcessiveLoad.
func (e *CutError) Error() string { return e.Err.Error() + ": " + e.Reason }

// Unwrap returns Err.
func (e *CutError) Unwrap() error { return e.Err }

// Shared bounds the bytes queued across every Session drawing on it.
//
// Half of it is a pool that any session may draw from while it has room;
// the other half is shared fairly: each session may hold up to
// limit / (2 × sessions) (its share) whatever the others hold. Once the
// pool is spent, only sessions holding more than their share are refused,
// so peers that fall behind and stay there cannot make a peer that merely
// has a burst in flight lose its subscription. Apart from what is forced
// (Session.Force), it never holds more than its limit.
//
// Limit is set before it is shared; the zero value is a budget of
// DefaultShared bytes. A Shared is safe for concurrent use.
type Shared struct {
	Limit    int64        // bytes; 0 for DefaultShared
	used     atomic.Int64 // bytes queued by its sessions
	sessions atomic.Int64 // sessions drawing on it, to size the shares
}

// Bytes is the budget's limit.
func (b *Shared) Bytes() int64 {
	if b.Limit <= 0 {
		return DefaultShared
	}
	return b.Limit
}

// Queued returns the bytes its sessions hold now.
func (b *Shared) Queued() int64 { return b.used.Load() }

// Sessions returns how many sessions draw on it.
func (b *Shared) Sessions() int64 { return b.sessions.Load() }

// admit counts n more bytes for a session that would then hold held
// bytes, or refuses them (see Shared).
func (b *Shared) admit(n, held int64) bool {
	limit := b.Bytes()
	if b.used.Add(n) <= limit/2 {
		return true
	}
	if held <= limit/(2*max(b.sessions.Load(), 1)) {
		return true
	}
	b.used.Add(-n)
	return false
}

// bound is what a Group or Session of limit bytes may hold once it was
// given a whole object of whole bytes (Writer.Object; the largest it was
// given, see widen): its limit, or twice that object when that is more. A
// subscriber of a publisher that goes at its fastest subscriber's pace is
// often an object behind the fastest, so an object larger than half the
// limit would otherwise cut every subscriber but the fastest, and one
// larger than the limit always. With it a queue takes such an object while
// it holds no more than another before it, and the small ones that follow
// (an End of Group) while it still holds both: more is too far behind. What
// is held then is at most two of the largest objects the publisher had
// whole in memory, whose payloads the queues share (payload.go). Streamed
// objects' pieces (whole 0) widen nothing: their copies are the queues'.
func bound(limit int64, whole int64) int64 { return max(limit, 2*whole) }

// widen records that a whole object of n bytes was queued in w, the largest
// of which widens its bound for good, and returns that largest. Several
// publishers' goroutines may queue at once.
func widen(w *atomic.Int64, n int) int64 {
	for {
		cur := w.Load()
		if int64(n) <= cur || w.CompareAndSwap(cur, int64(n)) {
			return max(cur, int64(n))
		}
	}
}

// Session counts the bytes one session holds queued for its peer, within
// its limit and its Shared budget, if any.
type Session struct {
	used   atomic.Int64
	whole  atomic.Int64 // the largest whole object queued (widen)
	limit  int64
	shared *Shared                     // nil for none
	path   func() transport.PathCounts // nil for none (SetPath)
}

// SetPath gives the session its connection's packet counts, which tell a
// stall of a path recovering from loss from a subscriber that stopped
// reading (drain). Call it before any queue of the session drains.
func (sb *Session) SetPath(path func() transport.PathCounts) { sb.path = path }

// pathCounts reads the session's connection's counts, zero for none.
func (sb *Session) pathCounts() transport.PathCounts {
	if sb == nil || sb.path == nil {
		return transport.PathCounts{}
	}
	return sb.path()
}

// Init sets the session's limit and draws on shared, if not nil, until
// done is called (when the session has ended).
func (sb *Session) Init(limit int, shared *Shared) (done func()) {
	sb.limit, sb.shared = int64(limit), shared
	if shared == nil {
		return func() {}
	}
	shared.sessions.Add(1)
	return func() { shared.sessions.Add(-1) }
}

// Used returns the bytes the session holds now.
func (sb *Session) Used() int64 { return sb.used.Load() }

// Charge counts n more bytes queued for the peer, or refuses them with a
// *CutError wrapping ErrExcessiveLoad when they would pass the session's
// limit or the shared budget refuses them.
func (sb *Session) Charge(n int) error { return sb.charge(n, n, 0) }

// charge counts n more bytes queued for the peer, of which own are its
// own: the others are a shared payload's, which the shared budget counts
// once (payload.go). whole is the size of the whole object they are part
// of, 0 for none (bound).
func (sb *Session) charge(n, own, whole int) error {
	held := sb.used.Add(int64(n))
	if held > bound(sb.limit, widen(&sb.whole, whole)) {
		sb.used.Add(-int64(n))
		return &CutError{Err: ErrExcessiveLoad, Reason: fmt.Sprintf("more than %d bytes queued for the peer's session", sb.limit)}
	}
	if b := sb.shared; b != nil && own > 0 && !b.admit(int64(own), held) {
		sb.used.Add(-int64(n))
		return excessiveShared(b)
	}
	return nil
}

// excessiveShared is the refusal of the shared budget b.
func excessiveShared(b *Shared) error {
	return &CutError{Err: ErrExcessiveLoad, Reason: fmt.Sprintf("the shared budget of %d bytes is half spent and the session holds more than its share", b.Bytes())}
}

// Force counts n bytes that are queued whatever the budgets say (one
// message into an empty queue, so that a request is always answered).
func (sb *Session) Force(n int) {
	sb.used.Add(int64(n))
	if b := sb.shared; b != nil {
		b.used.Add(int64(n))
	}
}

// Release uncounts n bytes charged (or forced) before: written, or
// dropped.
func (sb *Session) Release(n int) { sb.release(n, n) }

// release uncounts n bytes charged before, of which own were its own.
func (sb *Session) release(n, own int) {
	if n == 0 {
		return
	}
	sb.used.Add(-int64(n))
	if b := sb.shared; b != nil && own > 0 {
		b.used.Add(-int64(own))
	}
}

// Group is what the queues of one subscriber's streams share: the bytes
// they hold, within a limit and their Session's budget, and the writes
// that took bytes while any of them held some, by which a drain that
// takes nothing tells a stalled subscriber from a stream waiting its turn
// behind the others.
type Group struct {
	queued atomic.Int64
	taken  atomic.Uint64
	whole  atomic.Int64 // the largest whole object queued (widen)
	limit  int64
	grace  time.Duration
	sess   *Session
}

// Init sets the group's limit in bytes, the grace a drain's Write may take
// nothing for, and the Session it is counted in (nil for none).
func (g *Group) Init(limit int, grace time.Duration, sess *Session) {
	g.limit, g.grace, g.sess = int64(limit), grace, sess
}

// Queued returns the bytes its queues hold now.
func (g *Group) Queued() int64 { return g.queued.Load() }

// Taken counts the drains' writes that took bytes: it moves while the
// subscriber takes data, and stands still while it stalls.
func (g *Group) Taken() uint64 { return g.taken.Load() }

// charge counts n more bytes queued, of which own are the queue's own
// (payload.go), against the group's limit and then its session's budgets;
// bytes that would pass one are refused with a *CutError. whole is the size
// of the whole object they are part of, 0 for none (bound).
func (g *Group) charge(n, own, whole int) error {
	if g.queued.Add(int64(n)) > bound(g.limit, widen(&g.whole, whole)) {
		g.queued.Add(-int64(n))
		return &CutError{Err: ErrTooFarBehind, Reason: fmt.Sprintf("more than %d bytes waiting for the subscriber", g.limit)}
	}
	if g.sess != nil {
		if err := g.sess.charge(n, own, whole); err != nil {
			g.queued.Add(-int64(n))
			return err
		}
	}
	return nil
}

// release uncounts n bytes, of which own were the queue's own: written to
// the transport, or dropped with their stream.
func (g *Group) release(n, own int) {
	g.queued.Add(-int64(n))
	if g.sess != nil {
		g.sess.release(n, own)
	}
}
