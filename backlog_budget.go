package moqt

import "github.com/moqt-go/moqt/internal/sendq"

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
	b sendq.Shared // the algorithm (internal/sendq's budget.go)
}

// NewBacklogBudget returns a budget of limit bytes; limit <= 0 means the
// default, 256 MiB.
func NewBacklogBudget(limit int) *BacklogBudget {
	return &BacklogBudget{b: sendq.Shared{Limit: int64(max(limit, 0))}}
}

// Queued returns the bytes its sessions have queued for their peers now,
// for metrics.
func (b *BacklogBudget) Queued() int { return int(b.b.Queued()) }

// shared is the budget for sessions drawing on it: nil for none.
func (b *BacklogBudget) shared() *sendq.Shared {
	if b == nil {
		return nil
	}
	return &b.b
}
