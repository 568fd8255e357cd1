package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/moqt-go/moqt/internal/cache"
	"github.com/moqt-go/moqt/wire"
)

// missFunc holds a CacheLimits.Miss for an atomic.Pointer.
type missFunc struct {
	ask func(ctx context.Context, start, end wire.Location) (*Fetch, error)
}

// missCursor is the cursor of a track whose cache asks elsewhere for what
// it does not know (CacheLimits.Miss): a relay's track, whose unknown
// ranges a FETCH upstream confirms (§9.11, §7.1). It yields the cache's
// entries, and in place of each End of Unknown Range the entries an
// upstream fetch for that range yields, in the cursor's group order:
// delivery pauses while they are awaited. An ascending cursor asks for a
// range at once; a descending one asks one group at a time, highest
// first, so that no more than one entry is held whatever the range's
// size. Objects learnt go into the cache; upstream gaps are non-existent
// Locations there too.
//
// The waits share the fetch's budget (ctx, a waitBudget): once it is
// spent, unknown ranges are reported as timed out and nothing is asked
// (§9.20.6). A range whose ask fails, or whose upstream fetch fails or
// yields an entry outside the range asked or out of order, is reported
// unknown from there, and the cursor asks no more. An upstream object
// that contradicts the cached one, or an upstream Malformed Track, ends
// the cursor with *MalformedTrackError; an ask refused with
// UNSUPPORTED_EXTENSION ends it with that error.
type missCursor struct {
	inner      fetchCursor
	c          *cache.Cache
	ask        func(ctx context.Context, start, end wire.Location) (*Fetch, error)
	desc       bool
	start, end wire.Location // the window; end's Object ID may be 2^64−1
	// last is the Location of the inner cursor's last entry.
	last    wire.Location
	hasLast bool
	failed  bool // an ask failed: the rest is reported as the cache knows it
	r       *missRange
	// neEnd ends Locations after the last entry yielded that the
	// upstream said do not exist: told (End of Non-Existent Range) only
	// before an unknown or timed-out marker, as otherwise the gap says it
	// (§11.4.1.2).
	neEnd wire.Location
	hasNE bool
	out   []Object // entries ready to yield, from head on; at most three
	head  int
}

// missRange is an unknown range being filled: the part of it asked now,
// [a, b] in ascending order, is all of it or, descending, one group.
type missRange struct {
	end  wire.Location // the range's last Location in the cursor's order
	a, b wire.Location
	f    *Fetch // the upstream fetch for [a, b], nil before the ask
	// from is the first Location of [a, b] the upstream has not spoken
	// for yet.
	from wire.Location
}

func (m *missCursor) next(ctx context.Context) (Object, error) {
	for {
		if m.head < len(m.out) {
			o := m.out[m.head]
			m.out[m.head] = Object{} // no slice kept past its yield
			m.head++
			return o, nil
		}
		m.out, m.head = m.out[:0], 0
		if m.r != nil {
			if err := m.step(ctx); err != nil {
				return Object{}, err
			}
			continue
		}
		o, err := m.inner.next(ctx)
		if err != nil {
			// An End of Non-Existent Range before the end needs no
			// telling: the FIN says it.
			return Object{}, err
		}
		first := m.after()
		m.last, m.hasLast = o.Location, true
		switch {
		case o.EndOfRange == wire.EndOfNonExistentRange:
			// Told only if an unknown or timed-out marker still follows
			// once the unknown range after it is filled.
			m.neEnd, m.hasNE = o.Location, true
		case o.EndOfRange != wire.EndOfUnknownRange || m.failed:
			m.emit(o)
		default:
			m.r = &missRange{end: o.Location}
			m.part(first)
		}
	}
}

// after returns the first Location, in the cursor's order, past the
// inner cursor's last entry: where the range its next marker ends begins.
func (m *missCursor) after() wire.Location {
	switch {
	case !m.desc && !m.hasLast:
		return m.start
	case !m.desc:
		return nextLocation(m.last)
	case !m.hasLast:
		return wire.Location{Group: m.end.Group, Object: m.lo(m.end.Group)}
	case m.last.Object == m.hi(m.last.Group):
		return wire.Location{Group: m.last.Group - 1, Object: m.lo(m.last.Group - 1)}
	}
	return wire.Location{Group: m.last.Group, Object: m.last.Object + 1}
}

func (m *missCursor) lo(g uint64) uint64 {
	if g == m.start.Group {
		return m.start.Object
	}
	return 0
}

func (m *missCursor) hi(g uint64) uint64 {
	if g == m.end.Group {
		return m.end.Object
	}
	return ^uint64(0)
}

// part sets the part of the range to ask for next, from a: the rest of
// the range ascending, the rest of a's group descending.
func (m *missCursor) part(a wire.Location) {
	r := m.r
	r.a, r.b, r.f = a, r.end, nil
	if m.desc && a.Group != r.end.Group {
		r.b = wire.Location{Group: a.Group, Object: m.hi(a.Group)}
	}
}

// step moves the range being filled on by one upstream entry, or ends it.
func (m *missCursor) step(ctx context.Context) error {
	r := m.r
	if r.f == nil {
		if ctx.Err() != nil {
			// No budget left: unavailable objects are timed out, and no
			// upstream is waited for (§9.20.6).
			m.giveUp(ctx)
			return nil
		}
		f, err := m.ask(ctx, r.a, r.b)
		var re *RequestError
		if errors.As(err, &re) && re.Code == wire.ReqUnsupportedExtension {
			// The upstream's track has a Mandatory Track Property this end
			// does not understand: it is not to be forwarded, and what was
			// is cut off (§3.6).
			m.r = nil
			return err
		}
		if err != nil || f == nil {
			m.giveUp(ctx)
			return nil
		}
		r.f, r.from = f, r.a
	}
	o, err := r.f.ReadObject(ctx)
	var mt *MalformedTrackError
	switch {
	case errors.Is(err, io.EOF):
		// The upstream's FIN: nothing else exists up to its End (§9.11),
		// nor past it if that is the End of Track.
		end := r.f.End
		if r.f.EndOfTrack || r.b.Less(end) {
			end = r.b
		}
		_ = r.f.Close()
		r.f = nil
		if !end.Less(r.from) {
			_ = m.c.Learn(r.from, Object{Location: end, EndOfRange: wire.EndOfNonExistentRange}.cacheObject())
			m.neEnd, m.hasNE = end, true
		}
		if end.Less(r.b) {
			// The upstream knows less than this end's Largest Object.
			m.emit(Object{Location: r.b, EndOfRange: wire.EndOfUnknownRange})
		}
		if r.b == r.end {
			m.r = nil
			return nil
		}
		m.part(wire.Location{Group: r.b.Group - 1, Object: m.lo(r.b.Group - 1)})
	case errors.As(err, &mt):
		m.r = nil
		_ = r.f.Close()
		return mt
	case err != nil:
		m.giveUp(ctx)
	case o.Location.Less(r.from) || r.b.Less(o.Location):
		// Not what was asked for: refused, and that fetch cancelled.
		m.giveUp(ctx)
	default:
		if err := m.c.Learn(r.from, o.cacheObject()); errors.Is(err, cache.ErrConflict) {
			m.r = nil
			_ = r.f.Close()
			return &MalformedTrackError{Reason: fmt.Sprintf("the upstream's object %v differs from the cached one", o.Location)}
		}
		r.from = nextLocation(o.Location)
		if o.EndOfRange == wire.EndOfNonExistentRange {
			m.neEnd, m.hasNE = o.Location, true
		} else {
			m.emit(o)
		}
	}
	return nil
}

// close cancels the upstream fetch being read, if any: the fetch this
// cursor serves is over.
func (m *missCursor) close() {
	if m.r != nil && m.r.f != nil {
		_ = m.r.f.Close()
	}
	m.r = nil
}

// giveUp ends the range being filled: the rest of it is timed out if the
// budget is spent, and otherwise unknown, and then nothing more is asked.
func (m *missCursor) giveUp(ctx context.Context) {
	r := m.r
	if r.f != nil {
		_ = r.f.Close()
	}
	k := wire.EndOfTimedOutRange
	if ctx.Err() == nil {
		k = wire.EndOfUnknownRange
		m.failed = true
	}
	m.emit(Object{Location: r.end, EndOfRange: k})
	m.r = nil
}

// emit queues o, after the non-existent Locations before it when o is an
// unknown or timed-out marker, which would otherwise cover them.
func (m *missCursor) emit(o Object) {
	if m.hasNE && o.EndOfRange != 0 && o.EndOfRange != wire.EndOfNonExistentRange {
		m.out = append(m.out, Object{Location: m.neEnd, EndOfRange: wire.EndOfNonExistentRange})
	}
	m.hasNE = false
	m.out = append(m.out, o)
}

// cacheObject is o as the cache keeps it.
func (o Object) cacheObject() cache.Object {
	return cache.Object{Location: o.Location, SubgroupID: o.SubgroupID, Priority: o.Priority.Value,
		Datagram: o.Datagram, EndOfGroup: o.EndOfGroup, Status: o.Status, Properties: o.Properties,
		Payload: o.Payload, EndOfRange: o.EndOfRange}
}

// nextLocation is the Location after l in Location order.
func nextLocation(l wire.Location) wire.Location {
	if l.Object == ^uint64(0) {
		return wire.Location{Group: l.Group + 1}
	}
	return wire.Location{Group: l.Group, Object: l.Object + 1}
}
