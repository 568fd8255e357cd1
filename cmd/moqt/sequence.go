package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// sequencer puts a subscription's objects back in track order before they
// are written out. Subscription.ReadObject returns each subgroup's objects
// in order, but groups travel on streams of their own and arrive
// interleaved: a fast publisher's groups may all be in flight at once. So
// the objects of the group being written go straight out, and those of
// later groups wait until it ends: at its End of Group object (moqt pub and
// moqt clock write one), or when its stream ended short (its other objects
// will not come). Groups are expected one after the other (G, G+1, ...);
// the next group waiting is taken instead, giving up on the one being
// written, when nothing of it, or of the group after it, has arrived for
// stall (a publisher that writes no End of Group, or skipped group IDs, as
// a restarted clock does), or when what waits passes its bounds. Once the
// publisher is seen to end its groups (an End of Group came), a group not
// ended yet is waited for past stall, until it ends or what waits passes
// its bounds: over a slow path one large object can take longer than
// stall, and giving up on its group wrote its late objects out of order.
// A start not known (beginAtLowest) waits the same way for the lowest group.
type sequencer struct {
	emit func(moqt.Object) error // writes an object out
	// late, if set, is told of objects that arrived after later ones were
	// written: they are written anyway, out of order.
	late func(moqt.Object)
	// skip, if set, is told when a group that had not ended is given up.
	skip func(group uint64)

	started bool // cur is set: by begin, or by the first object
	// lowest: the start is the lowest group to arrive, not known yet;
	// every object waits until group 0 comes, stall has passed since
	// beginAtLowest (lastCur), or what waits passes its bounds. cur is
	// unset meanwhile.
	lowest bool
	cur    uint64 // the group being written
	ended  bool   // cur has ended
	// endsGroups: an End of Group came, so the publisher ends its groups
	// and the one being written will end too.
	endsGroups bool
	lastCur    time.Time // when cur last had news: began, an object, its end (see add for a later group's first wait)
	// endsBefore, when set, is a group known to have ended with the
	// Largest Object the subscription started after (its End of Group):
	// once an object of the group after it comes, it has ended, though
	// objects of it delivered by a fill may come first.
	endsBefore    uint64
	endsBeforeSet bool
	// doneBelow: every object of the groups below it has come (through).
	doneBelow uint64

	ahead      map[uint64][]moqt.Object // later groups' objects, waiting
	aheadBytes int
	aheadN     int
	endedAhead map[uint64]bool // waiting groups whose stream ended short
}

// Bounds of what waits for an earlier group.
const (
	sequenceStall     = 2 * time.Second
	reorderWait       = 200 * time.Millisecond // the least a later group waits for the one before it
	maxAheadBytes     = 64 << 20
	maxAheadObjects   = 1 << 20
	objectBookkeeping = 64 // bytes counted per waiting object besides its payload
)

func newSequencer(emit func(moqt.Object) error) *sequencer {
	return &sequencer{emit: emit, ahead: map[uint64][]moqt.Object{}, endedAhead: map[uint64]bool{}}
}

// begin sets the group to start from, before any object came: the first
// group of a track that had none published yet (by default its group 0), or
// the group after the Largest Object the subscription started after. Without
// begin, the first object's group is the first.
func (s *sequencer) begin(group uint64, now time.Time) {
	s.started, s.cur, s.ended, s.lastCur = true, group, false, now
}

// beginAtLowest starts, before any object came, at the lowest group to
// arrive: a track that had none published yet, whose first group is not
// known. Objects wait until group 0, the lowest there can be, arrives, or
// for stall from now at most (a live track's objects keep coming), or
// until what waits passes its bounds.
func (s *sequencer) beginAtLowest(now time.Time) {
	s.started, s.lowest, s.ended, s.lastCur = true, true, false, now
}

// endedWith tells that group g ended before the subscription began: its
// End of Group was the Largest Object.
func (s *sequencer) endedWith(g uint64) {
	s.endsBefore, s.endsBeforeSet = g, true
}

// through tells that every object of the groups below g has come: a
// fill delivers in order (§3.4), so its first entry in group g ends the
// groups before it, though their End of Group, which a fetch does not
// carry, never comes.
func (s *sequencer) through(g uint64, now time.Time) error {
	if g <= s.doneBelow {
		return nil
	}
	s.doneBelow = g
	return s.settle(now)
}

// add takes the next object ReadObject returned, at time now; its payload
// is copied if it has to wait.
func (s *sequencer) add(obj moqt.Object, now time.Time) error {
	g := obj.Location.Group
	if !s.started {
		s.started, s.cur, s.lastCur = true, g, now
	}
	if s.lowest {
		s.hold(obj)
		return s.settle(now)
	}
	if s.endsBeforeSet && s.cur == s.endsBefore && g == s.cur+1 {
		s.ended, s.endsBeforeSet = true, false
	}
	switch {
	case g == s.cur && !s.ended:
		s.lastCur = now
		if err := s.out(obj); err != nil {
			return err
		}
		if obj.Status == wire.ObjectEndOfGroup {
			s.ended, s.endsGroups = true, true
		}
	case g > s.cur:
		if len(s.ahead) == 0 {
			// After an idle spell longer than the stall, cur+1 is waited
			// for reorderWait at least: the next two groups' streams,
			// written back to back, arrive in either order.
			s.lastCur = later(s.lastCur, now.Add(reorderWait-sequenceStall))
		}
		s.hold(obj)
	default:
		if s.late != nil {
			s.late(obj)
		}
		if err := s.out(obj); err != nil {
			return err
		}
	}
	return s.settle(now)
}

// incomplete takes news that group g's stream ended short: its other
// objects will not come.
func (s *sequencer) incomplete(g uint64, now time.Time) error {
	switch {
	case !s.started:
	case s.lowest:
		s.endedAhead[g] = true
	case g == s.cur:
		s.ended, s.lastCur = true, now
	case g > s.cur:
		s.endedAhead[g] = true
	}
	return s.settle(now)
}

// wake is how long from now the sequencer needs to be asked again (tick),
// if nothing arrives meanwhile; 0 for never.
func (s *sequencer) wake(now time.Time) time.Duration {
	if len(s.ahead) == 0 {
		return 0
	}
	return max(s.lastCur.Add(sequenceStall).Sub(now), time.Millisecond)
}

// tick lets time pass.
func (s *sequencer) tick(now time.Time) error { return s.settle(now) }

// flush writes out everything waiting, in group order.
func (s *sequencer) flush() error {
	s.lowest = false
	for len(s.ahead) > 0 {
		if err := s.advance(s.lowestAhead(), time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

// settle moves on to the groups waiting, while it should.
func (s *sequencer) settle(now time.Time) error {
	if s.lowest && len(s.ahead) > 0 {
		if _, ok := s.ahead[0]; !ok && !s.overBounds() && now.Sub(s.lastCur) < sequenceStall {
			return nil
		}
		s.lowest = false
		if err := s.advance(s.lowestAhead(), now); err != nil {
			return err
		}
	}
	for len(s.ahead) > 0 {
		next := s.cur + 1
		_, ok := s.ahead[next]
		if s.cur < s.doneBelow {
			// The groups up to doneBelow came whole: those between that
			// did not come do not exist.
			s.ended = true
			if low := s.lowestAhead(); !ok && low <= s.doneBelow {
				next, ok = low, true
			}
		}
		if !ok || !s.ended {
			patient := !s.ended && s.endsGroups // its End of Group will come
			if !s.overBounds() && (patient || now.Sub(s.lastCur) < sequenceStall) {
				return nil
			}
			next = s.lowestAhead()
			if !s.ended && s.skip != nil {
				s.skip(s.cur)
			}
		}
		if err := s.advance(next, now); err != nil {
			return err
		}
	}
	return nil
}

// advance makes g, which waits, the group being written: its objects go
// out.
func (s *sequencer) advance(g uint64, now time.Time) error {
	s.cur, s.ended, s.lastCur = g, false, now
	objs := s.ahead[g]
	delete(s.ahead, g)
	for _, o := range objs {
		s.aheadBytes -= len(o.Payload) + objectBookkeeping
		s.aheadN--
		if err := s.out(o); err != nil {
			return err
		}
		if o.Status == wire.ObjectEndOfGroup {
			s.ended, s.endsGroups = true, true
		}
	}
	if s.endedAhead[g] {
		s.ended = true
		delete(s.endedAhead, g)
	}
	return nil
}

// overBounds reports whether what waits passed its bounds.
func (s *sequencer) overBounds() bool {
	return s.aheadBytes > maxAheadBytes || s.aheadN > maxAheadObjects
}

func (s *sequencer) hold(obj moqt.Object) {
	if obj.Status == wire.ObjectEndOfGroup {
		s.endsGroups = true
	}
	obj.Payload = slices.Clone(obj.Payload)
	obj.Properties = nil
	s.ahead[obj.Location.Group] = append(s.ahead[obj.Location.Group], obj)
	s.aheadBytes += len(obj.Payload) + objectBookkeeping
	s.aheadN++
}

func (s *sequencer) out(obj moqt.Object) error {
	if obj.Status != wire.ObjectNormal {
		return nil
	}
	return s.emit(obj)
}

func (s *sequencer) lowestAhead() uint64 {
	first := true
	var low uint64
	for g := range s.ahead {
		if first || g < low {
			low, first = g, false
		}
	}
	return low
}

// shortGroups keeps the groups a subgroup stream of which ended short
// (Object.Incomplete) before their End of Group came: objects of theirs
// may be missing, so a copy that had one is not the track's, however the
// track ended. A stream that joined its subgroup part way is reset at its
// end even when it carried every object after the join (§11.3.2): the End
// of Group it carried first says so, and so does the subscription's first
// group ended with CANCELLED, the code of such a reset, which the objects
// before the join were never going to reach anyway.
type shortGroups struct {
	first   uint64 // the subscription's first group, once started
	started bool
	// rejoined are the first groups of the subscriptions after moves
	// (GOAWAY), which join mid-subgroup as the first does; the last few.
	rejoined []uint64
	ended    map[uint64]bool // groups whose End of Group came, the last maxEndedGroups
	newest   uint64          // the highest group in ended
	short    []uint64        // the groups that ended short, the first maxShortNamed
	n        int             // how many ended short
}

const (
	maxEndedGroups = 1024
	maxShortNamed  = 8
)

func newShortGroups() *shortGroups { return &shortGroups{ended: map[uint64]bool{}} }

// start notes the subscription's first group.
func (s *shortGroups) start(g uint64) {
	if !s.started {
		s.first, s.started = g, true
	}
}

// object takes an object ReadObject returned.
func (s *shortGroups) object(obj moqt.Object) {
	g := obj.Location.Group
	s.start(g)
	if obj.Status != wire.ObjectEndOfGroup {
		return
	}
	s.ended[g] = true
	s.newest = max(s.newest, g)
	if len(s.ended) > 2*maxEndedGroups {
		for e := range s.ended {
			if e+maxEndedGroups < s.newest {
				delete(s.ended, e)
			}
		}
	}
}

// rejoin notes g as the first group of a subscription after a move.
func (s *shortGroups) rejoin(g uint64) {
	if len(s.rejoined) == maxShortNamed {
		s.rejoined = s.rejoined[1:]
	}
	s.rejoined = append(s.rejoined, g)
}

// incomplete takes news that a subgroup stream of group g ended short,
// reset with err.
func (s *shortGroups) incomplete(g uint64, err error) {
	s.start(g)
	var se *moqt.StreamError
	joined := g == s.first || slices.Contains(s.rejoined, g)
	if s.ended[g] || joined && errors.As(err, &se) && se.Code == wire.ResetCancelled {
		return
	}
	if s.n++; len(s.short) < maxShortNamed {
		s.short = append(s.short, g)
	}
}

// missing says which groups lack objects: ended short, and their End of
// Group did not come on another subgroup either; "" for none.
func (s *shortGroups) missing() string {
	var named []string
	n := s.n
	for _, g := range s.short {
		if s.ended[g] {
			n--
			continue
		}
		named = append(named, strconv.FormatUint(g, 10))
	}
	switch {
	case n <= 0:
		return ""
	case n > len(named):
		return fmt.Sprintf("%d groups (%s, …)", n, strings.Join(named, ", "))
	}
	return fmt.Sprintf("%d groups (%s)", n, strings.Join(named, ", "))
}
