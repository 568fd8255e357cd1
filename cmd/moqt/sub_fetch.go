package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// The FETCHes moqt sub makes around its subscription: the start of a track
// it waited for, and what a FETCH can tell of where groups start and end.

// fetchStart writes the track's objects from its start through largest,
// with a FETCH: they are in order on its stream. It returns the last
// object's Location, and how many ranges the server did not get in time;
// took is told of each object written.
func fetchStart(ctx context.Context, n *narrator, sess *moqt.Session, name wire.FullTrackName, largest wire.Location, w *objectWriter, took func(moqt.Object), verbose bool) (last wire.Location, timedOut int, err error) {
	// A relay may report a Largest Object whose objects are still on their
	// way to it, and refuse the FETCH while its publisher cannot answer
	// for them either (one that left at once): they come in a moment.
	var f *moqt.Fetch
	for attempt, pause := 1, 250*time.Millisecond; ; attempt, pause = attempt+1, 2*pause {
		f, err = sess.Fetch(ctx, name, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(wire.Location{}, largest))})
		var re *moqt.RequestError
		if err == nil || ctx.Err() != nil || !errors.As(err, &re) || attempt == 4 {
			break
		}
		if verbose {
			n.warn("the FETCH of the objects through %s was refused (%v): asking again in %s", loc(largest), err, pause)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return last, timedOut, nil
		}
		return last, timedOut, fmt.Errorf("fetching the objects through %s: %w", loc(largest), explainRequestError(err))
	}
	defer f.Close()
	for {
		obj, err := f.ReadObject(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return last, timedOut, nil
		case err != nil:
			if ctx.Err() != nil {
				return last, timedOut, nil
			}
			return last, timedOut, fmt.Errorf("fetching the objects through %s: %w", loc(largest), err)
		case obj.EndOfRange == wire.EndOfNonExistentRange:
			if verbose {
				n.warn("no objects through %s (fetched): the server %s", loc(obj.Location), gapText(obj.EndOfRange))
			}
		case obj.EndOfRange != 0:
			if obj.EndOfRange == wire.EndOfTimedOutRange {
				timedOut++
			}
			n.warn("the objects through %s are missing: the server %s", loc(obj.Location), gapText(obj.EndOfRange))
		case obj.Status == wire.ObjectNormal:
			if verbose {
				n.warn("object %s (fetched): %d bytes", loc(obj.Location), len(obj.Payload))
			}
			if err := w.write(obj); err != nil {
				return last, timedOut, err
			}
			took(obj)
			last = obj.Location
		}
	}
}

// firstGroup returns the first group of a track that had nothing published
// when the subscription began, whose first object to arrive is in group g:
// groups in flight at once arrive in any order, so a FETCH of the groups
// before g tells whether any exist. known is false when the FETCH cannot
// tell: refused, cut, or answered with ranges the server does not know
// (or did not get in time) before any object. A relay need not cache
// (§7.1), and one whose publisher ended the track at once may have let the
// track go while its objects are still on their way: those come on the
// subscription all the same, only their place is not known yet.
func firstGroup(ctx context.Context, sess *moqt.Session, name wire.FullTrackName, g uint64) (first uint64, known bool) {
	if g == 0 {
		return 0, true
	}
	f, err := sess.Fetch(ctx, name, wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, g-1))})
	if err != nil {
		return g, false
	}
	defer f.Close()
	for {
		obj, err := f.ReadObject(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return g, true // the FIN: nothing before g exists (§9.11)
		case err != nil:
			return g, false
		case obj.EndOfRange == 0:
			return obj.Location.Group, true
		case obj.EndOfRange != wire.EndOfNonExistentRange:
			return g, false // earlier groups may exist, unseen
		}
	}
}

// probeEnded reports whether the Largest Object l ended its group: a
// FETCH of l alone returns no object when l was the group's End of Group,
// a status that fetches do not carry. When it cannot tell, the group is
// taken as going on, the safe guess: its next objects are waited for.
func probeEnded(ctx context.Context, sess *moqt.Session, name wire.FullTrackName, l wire.Location) bool {
	f, err := sess.Fetch(ctx, name, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(l, l))})
	if err != nil {
		return false
	}
	defer f.Close()
	for {
		obj, err := f.ReadObject(ctx)
		switch {
		case errors.Is(err, io.EOF):
			return true
		case err != nil:
			return false
		case obj.EndOfRange == wire.EndOfNonExistentRange:
		case obj.EndOfRange != 0:
			return false
		case obj.Location == l:
			return obj.Status != wire.ObjectNormal
		}
	}
}

// gapText says why a fetch does not carry a range.
func gapText(e wire.EndOfRange) string {
	switch e {
	case wire.EndOfNonExistentRange:
		return "says they do not exist"
	case wire.EndOfUnknownRange:
		return "does not know them (not kept, or never seen)"
	case wire.EndOfTimedOutRange:
		return "did not get them in time"
	}
	return "did not send them (" + e.String() + ")"
}
