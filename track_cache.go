package moqt

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/cache"
	"github.com/moqt-go/moqt/wire"
)

// CacheLimits bound the objects a LocalTrack keeps to answer FETCH and
// fill fetch streams from (SetCache). A zero field sets no limit of its
// kind, but Objects and Bytes both zero mean no cache at all, so a cache's
// memory is always bounded: by Bytes (payload and properties, plus about
// 160 bytes of bookkeeping per object), or by Objects times the largest
// object the track carries.
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
	Miss func(ctx context.Context, start, end wire.Location) (*Fetch, error)
}

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
// Bytes remove it. The cache is independent of OnObject. While a cache is
// set, a streamed object's payload is gathered in memory until complete,
// as for OnObject.
func (t *LocalTrack) SetCache(l CacheLimits) {
	var c *cache.Cache
	t.mu.Lock()
	if l.Objects > 0 || l.Bytes > 0 {
		lim := cache.Limits{Objects: max(l.Objects, 0), Bytes: max(l.Bytes, 0), Duration: max(l.Duration, 0)}
		if kv, ok := t.props.Get(wire.PropMaxCacheDuration); ok && kv.Value <= math.MaxInt64/uint64(time.Millisecond) {
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

// keeps reports whether a streamed object must be gathered whole, for
// OnObject's function or the cache.
func (t *LocalTrack) keeps() bool { return t.store.Load() != nil || t.cache.c.Load() != nil }

// begun tells the cache that an object at l starts being published; the
// caller (noteObject) holds mu, so that a FETCH's Largest Object never
// includes a Location the cache has not heard of.
func (t *LocalTrack) begun(l wire.Location) {
	if c := t.cache.c.Load(); c != nil {
		c.Begin(l)
	}
}

// published hands a complete object to OnObject's function and the cache,
// and notes an End of Track. o's Priority is set, and Datagram for a
// datagram.
func (t *LocalTrack) published(o Object) {
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
	if c := t.cache.c.Load(); c != nil {
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
