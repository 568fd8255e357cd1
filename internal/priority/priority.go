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
// Levels follow a data stream's opening and closing and a subscriber
// priority's change (read on each object, so a REQUEST_UPDATE applies from
// the next object on every stream of the subscription, §5.1.1); only
// streams whose level changed are touched. Nothing is done per object
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
//
// The ranking is kept as streams come and go rather than recomputed: a
// stream's change touches its subscription's leader and, when a key comes
// or goes, the streams of the keys up to the sixth, whose levels shift. A
// session with many streams open (a subscriber of many tracks) used to sort
// them all twice for each stream opened or closed.
type Table struct {
	mu      sync.Mutex
	streams map[Stream]*entry // data streams open, by stream
	// groups holds each subscription's streams of one publisher priority,
	// by group order then Subgroup ID: the first leads, the others are
	// behind (rules 3 and 4).
	groups map[groupKey][]*entry
	keys   []rankKey                       // the live keys, in rank order
	byKey  map[rankKey]map[*entry]struct{} // the streams of each live key
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

// groupKey names the streams among which one leads.
type groupKey struct {
	owner uint64
	pub   uint8
}

// rankKey is what picks a stream's level (rules 1 and 2, then leaders
// before the streams behind them).
type rankKey struct {
	sub, pub uint8
	behind   bool
}

func (e *entry) key() rankKey       { return rankKey{e.sub, e.pub, e.behind} }
func (e *entry) groupKey() groupKey { return groupKey{e.owner, e.pub} }
func compareOrder(a, b *entry) int {
	return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.subgroup, b.subgroup))
}
func compareKeys(a, b rankKey) int {
	return cmp.Or(cmp.Compare(a.sub, b.sub), cmp.Compare(a.pub, b.pub), compareBool(a.behind, b.behind))
}
func levelAt(i int) int8 {
	return int8(min(int(transport.UrgencyDataMin)+i, int(transport.UrgencyDataMax)))
}
func (t *Table) keyIndex(k rankKey) int {
	i, _ := slices.BinarySearchFunc(t.keys, k, compareKeys)
	return i
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
		t.groups = map[groupKey][]*entry{}
		t.byKey = map[rankKey]map[*entry]struct{}{}
	}
	if old, ok := t.streams[str]; ok {
		t.remove(old)
	}
	t.streams[str] = e
	gk := e.groupKey()
	g := t.groups[gk]
	i, _ := slices.BinarySearchFunc(g, e, compareOrder)
	g = slices.Insert(g, i, e)
	t.groups[gk] = g
	e.behind = i > 0
	t.addKey(e)
	t.apply(e)
	if i == 0 && len(g) > 1 {
		t.setBehind(g[1], true)
	}
}

// Remove forgets a data stream that ended; the others may move up. It may
// be called more than once.
func (t *Table) Remove(str Stream) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.streams[str]; ok {
		t.remove(e)
	}
}

// remove takes e out of the ranking; t.mu is held.
func (t *Table) remove(e *entry) {
	delete(t.streams, e.str)
	gk := e.groupKey()
	g := t.groups[gk]
	i := slices.Index(g, e)
	g = slices.Delete(g, i, i+1)
	if len(g) == 0 {
		delete(t.groups, gk)
	} else {
		t.groups[gk] = g
	}
	t.dropKey(e)
	if i == 0 && len(g) > 0 {
		t.setBehind(g[0], false)
	}
}

// SetSubscriber applies a new subscriber priority to every stream of
// the subscription owner (§5.1.1: best effort for objects not yet sent).
func (t *Table) SetSubscriber(owner uint64, prio uint8) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.streams {
		if e.owner == owner && e.sub != prio {
			t.dropKey(e)
			e.sub = prio
			t.addKey(e)
			t.apply(e)
		}
	}
}

// setBehind moves e, which leads its group or no longer does; t.mu is
// held.
func (t *Table) setBehind(e *entry, behind bool) {
	if e.behind == behind {
		return
	}
	t.dropKey(e)
	e.behind = behind
	t.addKey(e)
	t.apply(e)
}

// addKey files e under its key; a key new to the table shifts the levels
// of the keys after it. t.mu is held.
func (t *Table) addKey(e *entry) {
	k := e.key()
	set := t.byKey[k]
	if set == nil {
		set = map[*entry]struct{}{}
		t.byKey[k] = set
		i := t.keyIndex(k)
		t.keys = slices.Insert(t.keys, i, k)
		t.shifted(i + 1)
	}
	set[e] = struct{}{}
}

// dropKey takes e from its key; a key left with no stream goes, which
// shifts the levels of the keys after it. t.mu is held.
func (t *Table) dropKey(e *entry) {
	k := e.key()
	set := t.byKey[k]
	delete(set, e)
	if len(set) > 0 {
		return
	}
	delete(t.byKey, k)
	i := t.keyIndex(k)
	t.keys = slices.Delete(t.keys, i, i+1)
	t.shifted(i)
}

// shifted applies the levels of the keys from index from on, which moved
// by one: past the sixth they all share the last level, so only those
// before it can have changed. t.mu is held.
func (t *Table) shifted(from int) {
	last := int(transport.UrgencyDataMax - transport.UrgencyDataMin)
	for i := from; i < len(t.keys) && i <= last; i++ {
		for e := range t.byKey[t.keys[i]] {
			t.apply(e)
		}
	}
}

// apply sets e's urgency and incremental flag if they changed. t.mu is
// held.
func (t *Table) apply(e *entry) {
	level, incremental := levelAt(t.keyIndex(e.key())), !e.behind
	if e.urgency != level || e.incremental != incremental {
		e.urgency, e.incremental = level, incremental
		e.str.SetPriority(level, incremental)
	}
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
