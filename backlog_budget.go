package moqt

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Budgets for what is queued for slow peers (backlog.go).
//
// A subscription's backlog is bounded by Config.MaxSubscriberBacklog, but
// a peer can hold as many subscriptions as it may open request streams,
// and a server has as many peers as connect. So the bytes queued for one
// peer are bounded too, across its subscriptions (Config.MaxSessionBacklog),
// and so are those of every session sharing a BacklogBudget
// (Config.SharedBacklog; Listen shares one among its sessions by default).
// What is refused is refused to the subscription whose write would pass
// the bound, of the session that holds too much: its subscription ends
// with PUBLISH_DONE EXCESSIVE_LOAD (its streams reset with EXCESSIVE_LOAD
// first); a namespace request's stream is reset with EXCESSIVE_LOAD.
//
// Counting is three atomic adds per byte range queued or written from a
// backlog: none on the path of a subscriber that keeps up.

// defaultSharedBacklog is the limit of the BacklogBudget Listen shares
// among its sessions, and of NewBacklogBudget(0).
const defaultSharedBacklog = 256 << 20

// errExcessiveLoad reports bytes refused by a session's backlog budget or
// by the BacklogBudget it shares.
var errExcessiveLoad = errors.New("moqt: backlog budget spent")

// BacklogBudget bounds the bytes queued for slow peers (see
// Config.MaxSubscriberBacklog) across every session whose
// Config.SharedBacklog points to it, so that a server's memory is bounded
// however many peers fall behind at once. Listen gives its sessions one of
// 256 MiB unless Config.SharedBacklog is set; share one between Servers to
// bound them together.
//
// Apart from one message per namespace request, which is always queued so
// that the request is answered, the budget never holds more than its
// limit. Half of it is a pool that
// any session may draw from while it has room; the other half is
// shared fairly: each session may hold up to limit / (2 × sessions) (its
// share) whatever the others hold. Once the pool is spent, only sessions
// holding more than their share are refused, so peers that fall behind
// and stay there cannot make a peer that merely has a burst in flight
// lose its subscription: the refusal goes to the session that holds too
// much. One session's MaxSessionBacklog should stay well under half the
// limit, so that one peer alone cannot spend the pool.
//
// The zero value is a budget of 256 MiB. A BacklogBudget is safe for
// concurrent use.
type BacklogBudget struct {
	limit    int64        // 0 for the default
	used     atomic.Int64 // bytes queued in its sessions' backlogs
	sessions atomic.Int64 // sessions drawing on it, to size the shares
}

// NewBacklogBudget returns a budget of limit bytes; limit <= 0 means the
// default, 256 MiB.
func NewBacklogBudget(limit int) *BacklogBudget {
	return &BacklogBudget{limit: int64(max(limit, 0))}
}

// bytes is the budget's limit.
func (b *BacklogBudget) bytes() int64 {
	if b.limit == 0 {
		return defaultSharedBacklog
	}
	return b.limit
}

// Queued returns the bytes its sessions have queued for their peers now,
// for metrics.
func (b *BacklogBudget) Queued() int { return int(b.used.Load()) }

// admit counts n more bytes for a session that would then hold held
// bytes, or refuses them (see BacklogBudget).
func (b *BacklogBudget) admit(n, held int64) bool {
	limit := b.bytes()
	if b.used.Add(n) <= limit/2 {
		return true
	}
	if held <= limit/(2*max(b.sessions.Load(), 1)) {
		return true
	}
	b.used.Add(-n)
	return false
}

// sessionBacklog counts the bytes a session holds queued for its peer:
// its served subscriptions' backlogs, their streams waiting for stream
// credit (pendingOpenCost each) and its namespace requests' message
// queues.
type sessionBacklog struct {
	used   atomic.Int64
	limit  int64          // Config.MaxSessionBacklog
	shared *BacklogBudget // Config.SharedBacklog; nil for none
}

// init sets the limits from cfg and draws on the shared budget, if any,
// until done is called (when the session has ended).
func (sb *sessionBacklog) init(cfg *Config) (done func()) {
	sb.limit, sb.shared = int64(cfg.MaxSessionBacklog), cfg.SharedBacklog
	if sb.shared == nil {
		return func() {}
	}
	sb.shared.sessions.Add(1)
	return func() { sb.shared.sessions.Add(-1) }
}

// charge counts n more bytes queued for the peer, or refuses them with an
// error wrapping errExcessiveLoad when they would pass the session's limit
// or the shared budget refuses them.
func (sb *sessionBacklog) charge(n int) error {
	held := sb.used.Add(int64(n))
	if held > sb.limit {
		sb.used.Add(-int64(n))
		return fmt.Errorf("%w: more than %d bytes queued for the peer's session", errExcessiveLoad, sb.limit)
	}
	if b := sb.shared; b != nil && !b.admit(int64(n), held) {
		sb.used.Add(-int64(n))
		return fmt.Errorf("%w: the shared budget of %d bytes is half spent and the session holds more than its share", errExcessiveLoad, b.bytes())
	}
	return nil
}

// force counts n bytes that are queued whatever the budgets say (one
// message into an empty queue, so that a request is always answered).
func (sb *sessionBacklog) force(n int) {
	sb.used.Add(int64(n))
	if b := sb.shared; b != nil {
		b.used.Add(int64(n))
	}
}

// release uncounts n bytes charged (or forced) before: written, or
// dropped.
func (sb *sessionBacklog) release(n int) {
	if n == 0 {
		return
	}
	sb.used.Add(-int64(n))
	if b := sb.shared; b != nil {
		b.used.Add(-int64(n))
	}
}
