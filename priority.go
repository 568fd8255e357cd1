package moqt

import (
	"cmp"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Priorities (§5.1) on raw QUIC.
//
// quic-go schedules a connection's streams by urgency, 0 to 7, lower first;
// within one urgency, incremental streams share bandwidth round-robin and
// non-incremental ones are sent one at a time, lowest stream ID first. The
// control stream has urgency 0 and request streams 1 (§5.1.2: control,
// then requests, then objects; see transport.UrgencyControl), which leaves
// six levels, 2 to 7, for data streams.
//
// Six fixed buckets cannot hold 256 × 256 (subscriber, publisher) priority
// pairs, but a session rarely has more than a handful of distinct pairs in
// flight at once. So the levels are handed out by rank among the data
// streams open in the session at the time, each stream keyed by
//
//	(subscriber priority, publisher priority, behind)
//
// compared in that order (§5.1.2 rules 1 and 2). behind is 0 for the
// stream that goes first among those of its subscription with the same
// publisher priority, by the subscription's group order and then the lowest
// Subgroup ID (rules 3 and 4), and 1 for the others. The distinct keys, in
// order, take urgencies 2, 3, 4, …; the sixth and later share 7. So the
// order is exact while at most six keys are live, and beyond that only the
// least important streams share a level. Leading streams are incremental,
// so subscriptions that tie share bandwidth (§5.1.2 expects every
// subscription to send some data); the streams behind are not, so quic-go
// sends them one at a time by stream ID, which for a publisher writing
// groups in order is ascending group order. A subscription in descending
// order thus sends its newest group first, and its older groups after it
// oldest first.
//
// Levels are recomputed when a data stream opens or closes and when a
// subscriber priority changes (read on each object, so a REQUEST_UPDATE
// applies from the next object on every stream of the subscription, §5.1.1);
// only streams whose level changed are touched. Nothing is done per object
// unless the subscriber priority changed.
//
// On WebTransport none of this applies: webtransport-go exposes no stream
// priorities, so every stream of a session (control, requests and data)
// shares quic-go's default level round-robin, and the library does not
// reorder data itself. Publisher Priority still travels in subgroup headers
// and datagrams for relays further on.

// prioTable ranks the data streams of one session onto quic-go urgencies.
// The zero value is ready. Its lock is a leaf: nothing else is locked, and
// no user code runs, while it is held.
type prioTable struct {
	mu      sync.Mutex
	streams map[transport.SendStream]*prioEntry // data streams open, by stream
	scratch []*prioEntry                        // reused by rank
}

// prioEntry is one data stream's place in the ranking. Its fields are
// guarded by prioTable.mu.
type prioEntry struct {
	str   transport.SendStream
	owner uint64 // Request ID of the subscription (or fetch) it serves
	sub   uint8  // subscriber priority
	pub   uint8  // publisher priority
	// order places the stream in its subscription's group order: the Group
	// ID, complemented for Descending, then the Subgroup ID.
	order, subgroup uint64

	behind      bool
	urgency     int8 // as last set; -1 before
	incremental bool
}

// priorities returns the session's data stream priorities, or nil on
// WebTransport, where streams have none.
func (s *Session) priorities() *prioTable {
	if s.conn.WebTransport() {
		return nil
	}
	return &s.prio
}

// streamPriority describes a data stream for the ranking.
type streamPriority struct {
	owner           uint64 // Request ID of the subscription
	subscriber      uint8
	publisher       uint8
	order           wire.GroupOrder
	group, subgroup uint64
}

// add ranks a new data stream, before anything is written to it.
func (t *prioTable) add(str transport.SendStream, p streamPriority) {
	if t == nil {
		return
	}
	e := &prioEntry{str: str, owner: p.owner, sub: p.subscriber, pub: p.publisher,
		order: p.group, subgroup: p.subgroup, urgency: -1}
	if p.order == wire.GroupOrderDescending {
		e.order = ^p.group
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.streams == nil {
		t.streams = map[transport.SendStream]*prioEntry{}
	}
	t.streams[str] = e
	t.rank()
}

// remove forgets a data stream that ended; the others may move up. It may
// be called more than once.
func (t *prioTable) remove(str transport.SendStream) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.streams[str]; !ok {
		return
	}
	delete(t.streams, str)
	t.rank()
}

// setSubscriber applies a new subscriber priority to every stream of
// the subscription owner (§5.1.1: best effort for objects not yet sent).
func (t *prioTable) setSubscriber(owner uint64, prio uint8) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for _, e := range t.streams {
		if e.owner == owner && e.sub != prio {
			e.sub = prio
			changed = true
		}
	}
	if changed {
		t.rank()
	}
}

// rank recomputes every stream's level and applies the ones that changed.
// t.mu is held.
func (t *prioTable) rank() {
	s := t.scratch[:0]
	for _, e := range t.streams {
		s = append(s, e)
	}
	// Rules 3 and 4 within each subscription and publisher priority.
	slices.SortFunc(s, func(a, b *prioEntry) int {
		return cmp.Or(cmp.Compare(a.owner, b.owner), cmp.Compare(a.pub, b.pub),
			cmp.Compare(a.order, b.order), cmp.Compare(a.subgroup, b.subgroup))
	})
	for i, e := range s {
		e.behind = i > 0 && s[i-1].owner == e.owner && s[i-1].pub == e.pub
	}
	// Rules 1 and 2, then leaders before the streams behind them.
	slices.SortStableFunc(s, compareRank)
	level := transport.UrgencyDataMin
	for i, e := range s {
		if i > 0 && compareRank(s[i-1], e) != 0 && level < transport.UrgencyDataMax {
			level++
		}
		if incremental := !e.behind; e.urgency != level || e.incremental != incremental {
			e.urgency, e.incremental = level, incremental
			e.str.SetPriority(level, incremental)
		}
	}
	clear(s)
	t.scratch = s[:0]
}

// compareRank orders streams by the key that picks their level.
func compareRank(a, b *prioEntry) int {
	return cmp.Or(cmp.Compare(a.sub, b.sub), cmp.Compare(a.pub, b.pub), compareBool(a.behind, b.behind))
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// levels reports each stream's urgency and incremental flag, for tests.
func (t *prioTable) levels() map[transport.SendStream][2]int8 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[transport.SendStream][2]int8, len(t.streams))
	for str, e := range t.streams {
		inc := int8(0)
		if e.incremental {
			inc = 1
		}
		out[str] = [2]int8{e.urgency, inc}
	}
	return out
}

// subscriberPriority is the SUBSCRIBER_PRIORITY in force: 128 when the
// subscriber set none (§9.20.8).
func subscriberPriority(p *wire.Params) uint8 {
	if p.SubscriberPriority.Set {
		return p.SubscriberPriority.Value
	}
	return DefaultSubscriberPriority
}

// DefaultSubscriberPriority is the subscriber priority of a request that
// does not set SUBSCRIBER_PRIORITY (§9.20.8).
const DefaultSubscriberPriority = 128

// trackGroupOrder is the track's DEFAULT_PUBLISHER_GROUP_ORDER, Ascending
// when absent or invalid (§10.5).
func trackGroupOrder(props wire.KVList) wire.GroupOrder {
	if kv, ok := props.Get(wire.PropDefaultPublisherGroupOrder); ok && kv.Value == uint64(wire.GroupOrderDescending) {
		return wire.GroupOrderDescending
	}
	return wire.GroupOrderAscending
}

// refreshPriority re-reads the subscriber priority of ss and applies it to
// its open data streams. The data path does this on the next object
// anyway; calling it when a REQUEST_UPDATE changes SUBSCRIBER_PRIORITY
// applies the change to streams that are waiting for no new object.
func (ss *ServedSubscription) refreshPriority() {
	ss.mu.Lock()
	prio := subscriberPriority(&ss.params)
	ss.mu.Unlock()
	ss.sess.priorities().setSubscriber(ss.rs.id, prio)
}
