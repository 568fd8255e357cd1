package cache

import (
	"context"
	"io"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// runKind is the state of a run of Locations a Cursor does not serve.
type runKind uint8

const (
	runNonExistent runKind = iota + 1
	runUnknown
	runTimedOut
	runPending // an open subgroup may still carry it: waited for
)

const maxID = ^uint64(0)

// maxSteps bounds the runs one fill looks at under the lock.
const maxSteps = 256

// cursorBatch is how many entries a fill prepares under one lock, so that
// a Cursor over cached objects takes the lock once per few entries, not
// per entry. A step adds at most three, so out holds fewer than
// cursorBatch+3.
const cursorBatch = 8

// Cursor walks a window of the Cache in fetch order (§9.11): groups
// ascending or descending, objects by Object ID within each group. It
// yields the objects the Cache serves and End of Range markers
// (§11.4.1.2) for what it does not: unknown ranges (evicted, expired,
// abandoned, never seen) always, and a non-existent range only where it
// must be told apart from an unknown or timed-out one that follows;
// other non-existent Locations are the implicit gaps between entries.
// Pending Locations (an object begun, or a subgroup still open that may
// carry it) are waited for, never skipped.
//
// A marker covers the Locations after the previous entry, in the
// cursor's order, up to and including its own Location: in descending
// order, the rest of the higher group and the start of the lower one.
//
// The Cursor holds a position, not a copy: when it has nothing ready, Next
// looks the Cache up from there under its lock, preparing up to
// cursorBatch entries, and returns with the lock released. It moves only
// forward, so no Location is yielded twice or out of order; a Location
// evicted or expired before the Cursor reaches it is reported unknown
// (one already prepared is served). A Cursor is not for concurrent use.
type Cursor struct {
	c          *Cache
	desc       bool
	start, end wire.Location
	// g and o are the next Location to consider; fin is set past the
	// window, eof once everything is yielded.
	g, o     uint64
	fin, eof bool
	// The runs not reported yet: an unknown one, then a non-existent one.
	uEnd, neEnd wire.Location
	hasU, hasNE bool
	// timedOut is set once a wait for a pending object ended with its
	// context: no later object is waited for.
	timedOut bool
	out      []Object // entries ready to yield, from head on
	head     int
}

// Cursor returns a Cursor over [start, end], in descending group order if
// desc. end's Object ID may be 2^64−1 for a whole group: a vi64 carries
// it, so markers need no clamping.
func (c *Cache) Cursor(start, end wire.Location, desc bool) *Cursor {
	cu := &Cursor{c: c, desc: desc, start: start, end: end, out: make([]Object, 0, cursorBatch+2)}
	cu.g, cu.o = start.Group, start.Object
	if desc {
		cu.g, cu.o = end.Group, cu.lo(end.Group)
	}
	cu.eof = end.Less(start)
	return cu
}

func (cu *Cursor) lo(g uint64) uint64 {
	if g == cu.start.Group {
		return cu.start.Object
	}
	return 0
}

func (cu *Cursor) hi(g uint64) uint64 {
	if g == cu.end.Group {
		return cu.end.Object
	}
	return maxID
}

// Next returns the next entry, or io.EOF after the last. It waits for a
// pending object until it completes or is abandoned, and at a Location an
// open subgroup may still carry until an object is begun there or the
// subgroup moves past it or ends; if ctx ends first, what it waited for is
// reported as an End of Timed-Out Range, and nothing later is waited for.
func (cu *Cursor) Next(ctx context.Context) (Object, error) {
	for {
		if cu.head < len(cu.out) {
			o := cu.out[cu.head]
			cu.out[cu.head] = Object{} // the Cursor keeps no slices it yielded
			cu.head++
			return o, nil
		}
		cu.out, cu.head = cu.out[:0], 0
		if cu.eof {
			return Object{}, io.EOF
		}
		wait, expires := cu.fill()
		if wait == nil {
			continue
		}
		if !await(ctx, wait, expires) {
			cu.timedOut = true
		}
	}
}

// await waits for a pending object to settle or expire, and reports false
// if ctx ended first.
func await(ctx context.Context, settled <-chan struct{}, expires time.Time) bool {
	var expiry <-chan time.Time
	if !expires.IsZero() {
		// Past its age an object may not be served (§10.3): no point
		// waiting for it longer.
		t := time.NewTimer(time.Until(expires))
		defer t.Stop()
		expiry = t.C
	}
	select {
	case <-settled:
	case <-expiry:
	case <-ctx.Done():
		select {
		case <-settled: // settled meanwhile: serve what it became
		default:
			return false
		}
	}
	return true
}

// fill prepares the next entries, or returns the channel of the pending
// object the Cursor must wait for, and when that object expires (zero for
// never).
func (cu *Cursor) fill() (<-chan struct{}, time.Time) {
	c := cu.c
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now() // only an age limit reads it (expired)
	for steps := 0; len(cu.out) < cursorBatch; steps++ {
		if steps == maxSteps {
			return nil, time.Time{} // the lock goes to others between calls
		}
		if cu.fin {
			cu.flushUnknown()
			cu.eof = true
			return nil, time.Time{}
		}
		g, o := cu.g, cu.o
		gs, _ := c.group(g)
		if gs == nil && o == 0 && !cu.boundary(g) {
			// A stretch of groups the Cache holds nothing of and knows
			// the same of throughout: one run.
			k, _ := c.state(g, 0, nil)
			last := cu.lastOfStretch(g)
			cu.run(k, wire.Location{Group: last, Object: maxID})
			cu.g = last
			cu.nextGroup()
			continue
		}
		hi := cu.hi(g)
		var e *entry
		if gs != nil {
			if i := gs.find(o); i < len(gs.objs) && gs.objs[i].id <= hi {
				e = &gs.objs[i]
			}
		}
		if e != nil && e.id == o {
			l := wire.Location{Group: g, Object: o}
			switch {
			case e.kind == kindObject && !c.expired(e, now):
				cu.object(g, e)
			case e.kind == kindPending && !c.expired(e, now):
				if !cu.timedOut && len(cu.out) > 0 {
					// What is ready goes first; the next fill waits.
					return nil, time.Time{}
				}
				if !cu.timedOut {
					var expires time.Time
					if c.limits.Duration > 0 {
						left := e.received + int64(c.limits.Duration) - now
						expires = time.Now().Add(time.Duration(left))
					}
					return c.wait(l, e), expires
				}
				cu.run(runTimedOut, l)
			case e.kind == kindEndOfGroup || e.kind == kindEndOfTrack:
				cu.run(runNonExistent, l)
			default: // abandoned or expired
				cu.run(runUnknown, l)
			}
			cu.advance(o)
			continue
		}
		limit := hi
		if e != nil {
			limit = e.id - 1
		}
		k, until := c.state(g, o, gs)
		until = min(until, limit)
		if k == runPending {
			if !cu.timedOut {
				if len(cu.out) > 0 {
					return nil, time.Time{} // what is ready goes first
				}
				return c.waitOpen(), time.Time{}
			}
			k = runTimedOut
		}
		cu.run(k, wire.Location{Group: g, Object: until})
		cu.advance(until)
	}
	return nil, time.Time{}
}

// advance moves past Object ID x of the current group.
func (cu *Cursor) advance(x uint64) {
	if x >= cu.hi(cu.g) {
		cu.nextGroup()
		return
	}
	cu.o = x + 1
}

// nextGroup moves to the start of the next group in the Cursor's order.
func (cu *Cursor) nextGroup() {
	switch {
	case !cu.desc && cu.g < cu.end.Group:
		cu.g++
	case cu.desc && cu.g > cu.start.Group:
		cu.g--
	default:
		cu.fin = true
		return
	}
	cu.o = cu.lo(cu.g)
}

// boundary reports whether what the Cache knows may change inside group
// g or between it and its neighbours: a window edge, the floor's, the
// top's or the End of Track's group, an unknown or known range's end, or
// a group with an open subgroup. (Groups with entries are checked by the
// caller.)
func (cu *Cursor) boundary(g uint64) bool {
	c := cu.c
	if g == cu.start.Group || g == cu.end.Group ||
		(c.hasFloor && g == c.floor.Group) || (c.hasTop && g == c.top.Group) || (c.hasEOT && g == c.eot.Group) {
		return true
	}
	for _, s := range c.unknown {
		if g == s.from.Group || g == s.to.Group {
			return true
		}
	}
	for _, s := range c.absent {
		if g == s.from.Group || g == s.to.Group {
			return true
		}
	}
	return c.hasOpen(g)
}

// lastOfStretch returns the last group, in the Cursor's order from g,
// before the next that holds entries or is a boundary. The window's last
// group is a boundary, so there is one.
func (cu *Cursor) lastOfStretch(g uint64) uint64 {
	c := cu.c
	if !cu.desc {
		next := cu.end.Group
		if _, i := c.group(g); i < len(c.groups) {
			next = min(next, c.groups[i].id)
		}
		for _, b := range c.boundaries() {
			if b > g {
				next = min(next, b)
			}
		}
		return next - 1
	}
	prev := cu.start.Group
	if _, i := c.group(g); i > 0 {
		prev = max(prev, c.groups[i-1].id)
	}
	for _, b := range c.boundaries() {
		if b < g {
			prev = max(prev, b)
		}
	}
	return prev + 1
}

// boundaries lists the groups where the floor, the top, the End of Track
// and the unknown and known ranges start or end, and those with an open
// subgroup. The caller holds mu.
func (c *Cache) boundaries() []uint64 {
	var b []uint64
	if c.hasFloor {
		b = append(b, c.floor.Group)
	}
	if c.hasTop {
		b = append(b, c.top.Group)
	}
	if c.hasEOT {
		b = append(b, c.eot.Group)
	}
	for _, s := range c.unknown {
		b = append(b, s.from.Group, s.to.Group)
	}
	for _, s := range c.absent {
		b = append(b, s.from.Group, s.to.Group)
	}
	for _, s := range c.open {
		b = append(b, s.group)
	}
	return b
}

// state returns what the Cache knows of Location {g, o}, which holds no
// entry, and the largest Object ID of group g up to which that holds
// unchanged (entries aside). gs is group g, nil if none. The first rule
// that applies decides: at or past End of Track, or past an End of
// Group, nothing exists; at or below the floor or past the top, the state
// is unknown; from where an open subgroup of the group may carry objects,
// it is pending; from where a reset one might have, or in an unknown
// range, unknown; in a range learnt, nothing exists. Anything else was
// never published, or, in a relayed cache, was not received: unknown.
func (c *Cache) state(g, o uint64, gs *group) (runKind, uint64) {
	var k runKind
	until := maxID
	rule := func(s span, ok bool, kind runKind) {
		if !ok || g < s.from.Group || g > s.to.Group {
			return
		}
		from, to := uint64(0), maxID
		if g == s.from.Group {
			from = s.from.Object
		}
		if g == s.to.Group {
			to = s.to.Object
		}
		switch {
		case from <= o && o <= to:
			if k == 0 {
				k = kind
			}
			until = min(until, to)
		case from > o:
			until = min(until, from-1)
		}
	}
	last := wire.Location{Group: maxID, Object: maxID}
	rule(span{c.eot, last}, c.hasEOT, runNonExistent)
	if gs != nil {
		rule(span{wire.Location{Group: g, Object: gs.eog}, wire.Location{Group: g, Object: maxID}}, gs.hasEOG, runNonExistent)
	}
	rule(span{wire.Location{}, c.floor}, c.hasFloor, runUnknown)
	if !c.hasTop {
		rule(span{wire.Location{}, last}, true, runUnknown)
	} else if c.top != last {
		rule(span{next(c.top), last}, true, runUnknown)
	}
	groupFrom := func(id uint64) span {
		return span{wire.Location{Group: g, Object: id}, wire.Location{Group: g, Object: maxID}}
	}
	from, open := c.openFrom(g)
	rule(groupFrom(from), open, runPending)
	if gs != nil {
		rule(groupFrom(gs.unk), gs.hasUnk, runUnknown)
	}
	for _, s := range c.unknown {
		rule(s, true, runUnknown)
	}
	for _, s := range c.absent {
		rule(s, true, runNonExistent)
	}
	if k == 0 {
		k = runNonExistent
		if c.limits.Relayed {
			k = runUnknown
		}
	}
	return k, until
}

// run notes a run of Locations ending at end that the Cursor does not
// serve. Runs of one kind merge; a non-existent run is told only when an
// unknown or timed-out one follows it (§11.4.1.2), as otherwise the gap
// says it.
func (cu *Cursor) run(k runKind, end wire.Location) {
	switch k {
	case runNonExistent:
		cu.neEnd, cu.hasNE = end, true
	case runUnknown:
		if cu.hasNE {
			cu.flush()
		}
		cu.uEnd, cu.hasU = end, true
	case runTimedOut:
		cu.flush()
		cu.mark(wire.EndOfTimedOutRange, end)
	}
}

// flush reports the runs noted.
func (cu *Cursor) flush() {
	if cu.hasU {
		cu.mark(wire.EndOfUnknownRange, cu.uEnd)
		cu.hasU = false
	}
	if cu.hasNE {
		cu.mark(wire.EndOfNonExistentRange, cu.neEnd)
		cu.hasNE = false
	}
}

// flushUnknown reports the unknown run noted, and drops a non-existent
// one after it: the gap before the next entry, or the stream's end, says
// that one.
func (cu *Cursor) flushUnknown() {
	if cu.hasU {
		cu.mark(wire.EndOfUnknownRange, cu.uEnd)
		cu.hasU = false
	}
	cu.hasNE = false
}

func (cu *Cursor) mark(k wire.EndOfRange, l wire.Location) {
	cu.out = append(cu.out, Object{Location: l, EndOfRange: k})
}

// object yields e, after the unknown run before it.
func (cu *Cursor) object(g uint64, e *entry) {
	cu.flushUnknown()
	props, payload := cu.c.lend(e)
	cu.out = append(cu.out, Object{Location: wire.Location{Group: g, Object: e.id}, SubgroupID: e.subgroup,
		Priority: e.priority, Datagram: e.datagram, Properties: props, Payload: payload})
}
