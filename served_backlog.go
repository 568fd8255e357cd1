package moqt

import (
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/sendq"
)

// Backlogs: no subscriber holds up the publisher, or any other subscriber,
// beyond a bounded grace (DESIGN.md, "Concurrency model"). The algorithm
// is internal/sendq's: a SubgroupWriter's sendq.Writer appends each object
// to its subscriptions' streams, each a sendq.Queue whose drain goroutine
// writes what accumulated in one Write (group commit), and what a stream
// does not take in time is a backlog; this file is what only the session
// knows.
//
// A write whose stream then holds more than sendq.Window (16 KiB) waits for
// room: for one of several streams sendq.WriteGrace (5 ms); for one,
// Config.SubscriberGrace after the call began (or the writer's
// SetWriteDeadline). After a write whose every subscription is behind,
// the writer waits until one of them has caught up, up to the same grace
// (settle), so that a publisher faster than all its subscribers goes at
// the pace of the fastest, rather than queuing until they are all cut off.
//
// A subscription (a sendq.Group) is too far behind, and ends with
// PUBLISH_DONE TOO_FAR_BEHIND, its streams reset with TOO_FAR_BEHIND first
// (C081, §12.5), when queuing more would pass Config.MaxSubscriberBacklog
// (bytes across its streams), or when one of its backlogs has had no byte
// taken for a whole Config.SubscriberGrace while none of its other streams
// took any either. Backlogs also count against their session's budgets:
// Config.MaxSessionBacklog across the session's subscriptions and, shared
// with other sessions, Config.SharedBacklog (backlog_budget.go). A
// subscription whose write would pass one ends with PUBLISH_DONE
// EXCESSIVE_LOAD, its streams reset with EXCESSIVE_LOAD first. Nothing is
// dropped without the subscriber being told.
//
// Objects of this end's PUBLISH past Config.MaxEarlyObjects wait for
// PUBLISH_OK in their streams' backlogs (§3.1), within the same bound; the
// writer does not wait for them.
//
// Delivery timeouts cover bytes in a backlog (§5.2): an object's timeout
// runs until its last byte has been passed to the transport, the stream's
// object timer following the oldest object queued, so a late stream is
// reset with DELIVERY_TIMEOUT, which ends the drain and drops the backlog.

// defaultSubscriberGrace is Config.SubscriberGrace's default.
const defaultSubscriberGrace = 2 * time.Second

// errTooFarBehind reports a write refused because the subscription is too
// far behind.
var errTooFarBehind = sendq.ErrTooFarBehind

// errExcessiveLoad reports bytes refused by a session's backlog budget or
// by the BacklogBudget it shares.
var errExcessiveLoad = sendq.ErrExcessiveLoad

// servedWritePath is a ServedSubscription's share of the write path.
type servedWritePath struct {
	// joined is the Largest Object when the subscription started being
	// served: objects up to it were published before it saw any. Guarded
	// by the subscription's mu; the data path reads its servedView copy.
	joined filter.LargestObject
	// group counts the bytes waiting in its data streams' backlogs.
	group sendq.Group
	// timers are its streams' running SUBGROUP_DELIVERY_TIMEOUTs.
	timers subgroupTimers
}

// subgroupOut is the Owner of its sendq.Queue: the methods below are
// what its drain and the sendq.Writer ask of the session.
