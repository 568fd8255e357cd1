// Package priority ranks a session's data streams onto quic-go urgencies,
// following the rules of §5.1.
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
// On WebTransport the same urgencies apply, placed among the HTTP/3
// connection's own streams (transport's wtUrgency). Publisher Priority also
// travels in subgroup headers and datagrams for relays further on.
//
// It knows nothing of sessions or subscriptions: a stream is anything
// whose urgency can be set, and its owner a Request ID.
package priority

import (
	"cmp"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Stream is a data stream as the ranking sees it: transport.SendStream is
// one. It is a map key, so it must be comparable.
type Stream interface {
	SetPriority(urgency int8, incremental bool)
}

// Table ranks the data streams of one session onto quic-go urgencies.
// The zero value is ready; a nil *Table, a session on WebTransport, does
// nothing. Its lock is a leaf: nothing else is locked, and no user code
// runs, while it is held.
type Table struct {
	mu      sync.Mutex
	streams map[Stream]*entry // data streams open, by stream
	scratch []*entry          // reused by rank
}

// entry is one data stream's place in the ranking. Its fields are
// guarded by Table.mu.
type entry struct {
	str   Stream
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

// Params describes a data stream for the ranking.
type Params struct {
	Owner      uint64 // Request ID of the subscription (or fetch) it serves
	Subscriber uint8  // subscriber priority (§5.1.1)
	Publisher  uint8  // publisher priority (§5.1.2)
	// Order is the subscription's group order; Group and Subgroup place
	// the stream in it.
	Order           wire.GroupOrder
	Group, Subgroup uint64
}

// Add ranks a new data stream, before anything is written to it.
func (t *Table) Add(str Stream, p Params) {
	if t == nil {
		return
	}
	e := &entry{str: str, owner: p.Owner, sub: p.Subscriber, pub: p.Publisher,
		order: p.Group, subgroup: p.Subgroup, urgency: -1}
	if p.Order == wire.GroupOrderDescending {
		e.order = ^p.Group
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.streams == nil {
		t.streams = map[Stream]*entry{}
	}
	t.streams[str] = e
	t.rank()
}

// Remove forgets a data stream that ended; the others may move up. It may
// be called more than once.
func (t *Table) Remove(str Stream) {
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

// SetSubscriber applies a new subscriber priority to every stream of
// the subscription owner (§5.1.1: best effort for objects not yet sent).
func (t *Table) SetSubscriber(owner uint64, prio uint8) {
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
func (t *Table) rank() {
	s := t.scratch[:0]
	for _, e := range t.streams {
		s = append(s, e)
	}
	// Rules 3 and 4 within each subscription and publisher priority.
	slices.SortFunc(s, func(a, b *entry) int {
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
func compareRank(a, b *entry) int {
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

// Levels reports each stream's urgency and incremental flag (1 for
// incremental), as last set: what tests look at.
func (t *Table) Levels() map[Stream][2]int8 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[Stream][2]int8, len(t.streams))
	for str, e := range t.streams {
		inc := int8(0)
		if e.incremental {
			inc = 1
		}
		out[str] = [2]int8{e.urgency, inc}
	}
	return out
}
