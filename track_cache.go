package moqt

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/cache"
	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// CacheLimits bound the objects a LocalTrack keeps to answer FETCH and
// fill fetch streams from (SetCache). A zero field sets no limit of its
// kind, but Objects and Bytes both zero mean no cache at all, so a cache's
// memory is always bounded: by Bytes (payload and properties, plus about
// 160 bytes of bookkeeping per object), or by Objects times the largest
// object the track carries. Budget bounds many tracks' caches together.
type CacheLimits struct {
	// Objects is the most objects kept; status objects (End of Group,
	// End of Track) count as one each.
	Objects int
	// Bytes is the most bytes kept, each object counting its payload,
	// its properties and a fixed bookkeeping share of 160 bytes.
	Bytes int64
	// Duration is how long after its publication began an object may
	// still be served (§10.3). The track's MAX_CACHE_DURATION property,
	// when set, caps it.
	Duration time.Duration
	// Budget, when set, bounds this cache's bytes (counted as for Bytes)
	// together with those of every other cache pointing to it: where
	// many tracks are open (a relay's), what their caches hold stays
	// within one figure however many there are. See CacheBudget for who
	// loses what when it is spent.
	Budget *CacheBudget
	// Miss, when set, is asked for a range of the track that a FETCH or
	// fill reaches and the cache does not know (evicted, or never seen
	// below the Largest Object), from start to end in ascending order:
	// typically a FETCH upstream, Session.Fetch with LOCATION_FILTER
	// wire.RangeFilterToObject(start, end). The fetch's delivery pauses
	// until the entries of the Fetch it returns arrive (§9.11); they are
	// served in place of the unknown range, and its objects kept in the
	// cache. Entries outside the range or out of order are refused, the
	// rest of the range then reported unknown; a Malformed Track upstream
	// resets the fetch stream with MALFORMED_TRACK, and a Miss failing with
	// a *RequestError of UNSUPPORTED_EXTENSION (a Mandatory Track Property
	// not understood, §3.6) resets it too. The library closes the
	// Fetch. The wait counts against the fetch's FILL_TIMEOUT (§9.20.6):
	// with none left, or FILL_TIMEOUT 0, Miss is not asked and the range
	// is reported timed out. Should Miss fail, the range is reported
	// unknown and that fetch asks no more. A descending fetch asks one
	// group at a time. Miss runs on the fetch's goroutine and must return
	// when ctx ends.
	//
	// A track with Miss is taken for a relay's, its objects received from
	// elsewhere: a gap between the objects it carried says nothing of the
	// objects skipped (§2.1), which may not have arrived yet, so the cache
	// takes a Location it was not given for unknown, and asks Miss for it,
	// unless End of Group or End of Track, a FIN on a subgroup with
	// EndOfGroup, or what Miss answered before, says it does not exist.
	// Without Miss the track is the original publisher's: a Location
	// below the Largest Object it did not publish does not exist, unless
	// a subgroup still open may yet carry it (then a fetch waits for it)
	// or a reset one might have (unknown).
	Miss func(ctx context.Context, start, end wire.Location) (*Fetch, error)
}

// CacheBudget bounds the bytes of every LocalTrack cache whose
// CacheLimits.Budget points to it, as CacheLimits.Bytes bounds one. Past
// its limit it takes back from the caches holding the most: each is cut to
// one level, the highest at which the total fits, so a cache holding no
// more than its fair share (15/16 of the limit over the number of caches)
// loses nothing, and a track that publishes fast cannot flush the other
// tracks' recent objects. A cache that is cut loses its oldest Locations,
// as its own limits evict them: they are reported to fetches as unknown, or
// asked of CacheLimits.Miss. Reclaims bring the total down to 15/16 of the
// limit at once, so the objects of a full budget pay two atomic adds each
// and a reclaim now and then, whose cost grows with the number of caches.
// What has expired (CacheLimits.Duration) goes first, in every cache, the
// idle ones included.
//
// A cache leaves its budget when SetCache replaces or removes it, or once
// its track is garbage. The total passes the limit only by the objects
// being added at that moment, one per goroutine publishing. The zero value
// is a budget of 256 MiB. A CacheBudget is safe for concurrent use.
type CacheBudget struct{ b cache.Budget }

// NewCacheBudget returns a budget of limit bytes; limit <= 0 means the
// default, 256 MiB.
func NewCacheBudget(limit int64) *CacheBudget {
	b := &CacheBudget{}
	b.b.SetLimit(limit)
	return b
}

// Limit returns the budget's limit in bytes.
func (b *CacheBudget) Limit() int64 { return b.b.Limit() }

// Held returns the bytes its caches hold now, for metrics.
func (b *CacheBudget) Held() int64 { return b.b.Held() }

// trackCache is what a LocalTrack keeps of its published objects beyond
// OnObject's function.
type trackCache struct {
	c atomic.Pointer[cache.Cache] // SetCache's, nil for none; swapped under the track's mu
	// miss is the cache's CacheLimits.Miss, nil for none; set with c.
	miss atomic.Pointer[missFunc]
	// eot is the End of Track Location, set when an END_OF_TRACK status
	// object is published (§11.1.2); guarded by the track's mu.
	eot    wire.Location
	hasEOT bool
}

// SetCache makes the track keep its recent objects, within l, and answer
// FETCH (Fetch) and fill fetch streams from them; the oldest Locations
// go first (lowest Group ID, then lowest Object ID), and what went is
// reported to fetches as unknown (§10.3, §2.1), unless l.Miss asks
// elsewhere for it. A cache set on a track
// that already published knows nothing of those objects: they are
// unknown too, as are the Locations up to a Largest Object learnt
// through SetLargest that the track never carried. SetCache replaces the
// cache set before, dropping what it kept; limits with zero Objects and
// Bytes remove it, and take it out of its CacheBudget. A subgroup still
// open may yet carry objects below the Largest Object (it lags behind a
// later group): a fetch reaching them waits, within its FILL_TIMEOUT, so
// close subgroups once written. The cache is
// independent of OnObject. While a cache is
// set, a streamed object's payload is gathered in memory until complete,
// as for OnObject, unless the cache could never hold it.
func (t *LocalTrack) SetCache(l CacheLimits) {
	var c *cache.Cache
	t.mu.Lock()
	if l.Objects > 0 || l.Bytes > 0 {
		lim := cache.Limits{Objects: max(l.Objects, 0), Bytes: max(l.Bytes, 0), Duration: max(l.Duration, 0),
			Relayed: l.Miss != nil}
		if l.Budget != nil {
			lim.Budget = &l.Budget.b
		}
		if kv, ok := t.props.Lookup(wire.PropMaxCacheDuration); ok && kv.Value <= math.MaxInt64/uint64(time.Millisecond) {
			// MAX_CACHE_DURATION 0 allows no serving at all: the
			// shortest Duration.
			d := max(time.Duration(kv.Value)*time.Millisecond, 1)
			if lim.Duration == 0 || d < lim.Duration {
				lim.Duration = d
			}
		}
		c = cache.New(lim, t.largest.Param())
	}
	// Under mu, which noteObject holds: each object begins in exactly
	// one of the two caches.
	var miss *missFunc
	if c != nil && l.Miss != nil {
		miss = &missFunc{ask: l.Miss}
	}
	t.cache.miss.Store(miss)
	old := t.cache.c.Swap(c)
	t.mu.Unlock()
	if old != nil {
		old.Close() // its Cursors wait for nothing more
	}
}

// cacheWindow is how long a relayed object may still start going out after
// its receipt: the track's MAX_CACHE_DURATION (§10.3), counted in whole
// milliseconds, so that 0 still lets an object through as it arrives; 0
// for none.
func cacheWindow(props wire.KVList) time.Duration {
	kv, ok := props.Lookup(wire.PropMaxCacheDuration)
	if !ok {
		return 0
	}
	return min(millis(kv.Value), math.MaxInt64-time.Millisecond) + time.Millisecond
}

// keeps reports whether a streamed object with a payload of length bytes
// must be gathered whole: for OnObject's function, or for the cache when it
// could hold it. One the cache could never hold is not gathered: a peer
// declaring an endless object to a relay would otherwise grow its memory
// without bound.
func (t *LocalTrack) keeps(length uint64) bool {
	if t.store.Load() != nil {
		return true
	}
	c := t.cache.c.Load()
	return c != nil && c.Fits(length)
}

// begun tells the cache that an object at l starts being published; the
// caller (noteObject) holds mu, so that a FETCH's Largest Object never
// includes a Location the cache has not heard of.
func (t *LocalTrack) begun(l wire.Location) {
	if c := t.cache.c.Load(); c != nil {
		c.Begin(l)
	}
}

// openCached tells the track's cache that w opens: until it ends, the
// Locations of its group it may still carry are pending, not absent, to
// a fetch (§2.2: a subgroup can lag behind later groups). first is the
// smallest Object ID it may carry.
func (t *LocalTrack) openCached(w *SubgroupWriter, first uint64) {
	if c := t.cache.c.Load(); c != nil {
		w.cached = c.OpenSubgroup(w.group, first)
	}
}

// noteSubgroupObject is noteObject for an object of w's: the cache also
// learns how far the subgroup got. whole, when not nil, is the object
// complete (WriteObject), begun at now: the cache takes it at once, in
// one step rather than a Begin now and an Add once it is sent, and
// published then leaves the cache out. A cache set since w opened follows
// it from this object on. The caller holds w's turn.
func (t *LocalTrack) noteSubgroupObject(w *SubgroupWriter, l wire.Location, whole *Object, now int64) {
	t.mu.Lock()
	prev, known := t.largest.Get()
	t.largest.Update(l)
	if c := t.cache.c.Load(); c != nil {
		if w.cached == nil || !w.cached.Of(c) {
			w.cached = c.OpenSubgroup(w.group, l.Object)
		}
		if whole != nil {
			w.cached.Put(whole.cacheObject(), now)
		} else {
			w.cached.Begin(l.Object)
		}
	}
	t.mu.Unlock()
	t.groupBegun(prev, known, l)
}

// published hands a complete object to OnObject's function and, unless
// cached (noteSubgroupObject took it whole), the cache, and notes an End
// of Track. o's Priority is set, and Datagram for a datagram.
func (t *LocalTrack) published(o Object, cached bool) {
	if store := t.store.Load(); store != nil {
		(*store)(o)
	}
	if o.Status == wire.ObjectEndOfTrack {
		t.mu.Lock()
		if !t.cache.hasEOT || o.Location.Less(t.cache.eot) {
			t.cache.eot, t.cache.hasEOT = o.Location, true
		}
		t.mu.Unlock()
	}
	if c := t.cache.c.Load(); c != nil && !cached {
		c.Add(o.cacheObject())
	}
}

// abandoned tells the cache that the object begun at l will not be
// complete (closed short, or its subgroup reset): its state stays unknown.
func (t *LocalTrack) abandoned(l wire.Location) {
	if c := t.cache.c.Load(); c != nil {
		c.Abandon(l)
	}
}

// endOfTrack returns the Location of the END_OF_TRACK status object
// published through the track, if any: FETCH_OK's End Of Track (§9.12).
func (t *LocalTrack) endOfTrack() (wire.Location, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cache.eot, t.cache.hasEOT
}

// Fetch answers a FETCH for this track from what the track keeps (§9.11):
// the range resolves against the track's Largest Object now
// (REQUEST_ERROR INVALID_RANGE when nothing was published or the start is
// past it), FETCH_OK reports its end, cut at the Largest Object, and
// End Of Track when the range reaches the track's end, and then the
// entries of the range go in the requested group order, those the FETCH's
// range filters refuse left out, ranges the track cannot serve as End of
// Range markers, then FIN. Objects still being published when reached, and
// those an open subgroup may still carry, are waited for within
// FILL_TIMEOUT in total (Config.FillTimeout without it, §9.20.6), then
// reported as timed out. Fetch returns once the fetch is
// over, or at the first error.
//
// A FETCH for another track is answered with REQUEST_ERROR DOES_NOT_EXIST
// and Fetch fails, as Accept does.
func (t *LocalTrack) Fetch(r *FetchRequest) error {
	if !r.Track.Equal(t.name) {
		_ = r.Reject(wire.ReqDoesNotExist, "no such track")
		return fmt.Errorf("moqt: FETCH for %v answered by the LocalTrack of %v", r.Track, t.name)
	}
	largest, known := t.Largest()
	f, err := filter.NewFetch(&r.Params, largestOf(wire.Opt[wire.Location]{Value: largest, Set: known}))
	if err != nil {
		e := asRequestError(filterError(err))
		_ = r.rejectWith(e)
		return e
	}
	w := f.Window()
	end, eot := w.End, false
	if l, ok := t.endOfTrack(); ok && !w.End.Less(l) && !l.Less(w.Start) {
		// The range reaches the End of Track. One starting past it (the
		// track published on after it, or learnt a larger Largest
		// Object) keeps its own end: an End Location before the Start
		// Location is one the subscriber must treat as a protocol
		// violation (§9.12).
		end, eot = l, true
	}
	r.w.defaultPriority = t.priority
	if err := r.Accept(eot, end, t.props); err != nil {
		return err
	}
	desc := r.Params.GroupOrder.Set && r.Params.GroupOrder.Value == wire.GroupOrderDescending
	budget := fillBudgetOf(&r.Params, r.sess.cfg.FillTimeout)
	// Ended as well by the track's end as Malformed (End), which resets
	// the stream with MALFORMED_TRACK.
	ctx, cancel := context.WithCancelCause(r.ctx)
	defer cancel(nil)
	defer t.fetches.add(cancel)()
	return pumpFetch(ctx, r.sess.serving.cursor(t, w, desc), f, r.w, budget)
}

// cursor returns the entries of window w in the order desc gives
// (GROUP_ORDER, §9.20.9), from the track's cache (SetCache). A track that
// keeps no objects knows none of them: the whole window is one unknown
// range (§11.4.1.2).
func (t *LocalTrack) cursor(w filter.Window, desc bool) fetchCursor {
	c := t.cache.c.Load()
	if c == nil {
		return &unknownCursor{end: w.End}
	}
	if w.Empty() {
		return &unknownCursor{done: true}
	}
	end := w.End
	if !w.Bounded {
		end = wire.Location{Group: wire.MaxVarint, Object: ^uint64(0)}
	}
	cur := cachedCursor{c.Cursor(w.Start, end, desc)}
	if m := t.cache.miss.Load(); m != nil {
		return &missCursor{inner: cur, c: c, ask: m.ask, desc: desc, start: w.Start, end: end}
	}
	return cur
}
