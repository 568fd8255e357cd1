package relay

// Ended tracks kept for FETCH and TRACK_STATUS (Config.KeepEnded).

import (
	"container/list"
	"math"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// maxEndedTracks bounds the ended tracks a relay keeps at once: past it
// the oldest is released, so that many short tracks cannot pile up
// entries (their caches' bytes are within Config.Cache.Budget anyway). A
// variable for tests.
var maxEndedTracks = 1024

// endedTrack is a track whose publishers all ended it, kept for a while so
// that FETCH and TRACK_STATUS are still answered from its LocalTrack: its
// cache, its final Largest Object and End of Track, its Track Properties.
// It has no upstream and no downstream subscription. Owned by the
// registry, under registry.mu.
type endedTrack struct {
	key   wire.TrackKey
	name  wire.FullTrackName
	track *moqt.LocalTrack
	timer *time.Timer   // releases it when its time is up
	elem  *list.Element // in registry.endedOrder, oldest first
}

// keptEnd reports whether a track that ended with code keeps its cache: not
// a Malformed Track, whose cache serves nothing more (§12.1), nor one
// whose publisher withdrew the relay's authorization.
func keptEnd(code wire.PublishDoneCode) bool {
	return code != wire.DoneMalformedTrack && code != wire.DoneUnauthorized
}

// keepFor is how long the ended track with Track Properties props is kept:
// Config.KeepEnded, capped by its MAX_CACHE_DURATION (§10.3), past which
// nothing of it could be served; 0 for not at all.
func (reg *registry) keepFor(props wire.KVList) time.Duration {
	d := reg.cfg.KeepEnded
	if kv, ok := props.Lookup(wire.PropMaxCacheDuration); ok && kv.Value < uint64(math.MaxInt64/time.Millisecond) {
		d = min(d, time.Duration(kv.Value)*time.Millisecond)
	}
	return d
}

// keepEndedLocked keeps e's track, which ended, among the ended tracks in
// place of any kept under its name, and returns the tracks whose caches to
// drop once reg.mu is released: those it displaced, or e's own when it is
// not to be kept (the relay closed, or no time to keep it). reg.mu is held.
func (reg *registry) keepEndedLocked(e *trackEntry) []*moqt.LocalTrack {
	drop := reg.removeEndedLocked(e.key)
	d := reg.keepFor(e.props)
	if reg.closed || d <= 0 {
		return append(drop, e.track)
	}
	k := &endedTrack{key: e.key, name: e.name, track: e.track}
	k.elem = reg.endedOrder.PushBack(k)
	reg.ended[e.key] = k
	k.timer = time.AfterFunc(d, func() { reg.endedExpired(k) })
	for len(reg.ended) > maxEndedTracks {
		oldest := reg.endedOrder.Front().Value.(*endedTrack)
		drop = append(drop, reg.removeEndedLocked(oldest.key)...)
	}
	return drop
}

// removeEndedLocked takes the ended track kept under key out of the table
// and returns its LocalTrack, whose cache to drop, if there was one.
// reg.mu is held.
func (reg *registry) removeEndedLocked(key wire.TrackKey) []*moqt.LocalTrack {
	k := reg.ended[key]
	if k == nil {
		return nil
	}
	delete(reg.ended, key)
	reg.endedOrder.Remove(k.elem)
	k.timer.Stop()
	return []*moqt.LocalTrack{k.track}
}

// endedExpired releases k once its time is up, unless it went before.
func (reg *registry) endedExpired(k *endedTrack) {
	reg.mu.Lock()
	var drop []*moqt.LocalTrack
	if reg.ended[k.key] == k {
		drop = reg.removeEndedLocked(k.key)
	}
	reg.mu.Unlock()
	dropCaches(drop)
}

// endedTrack returns the LocalTrack of name kept after its end, or nil.
func (reg *registry) endedTrack(name wire.FullTrackName) *moqt.LocalTrack {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if k := reg.ended[name.Key()]; k != nil {
		return k.track
	}
	return nil
}

// releaseEnded drops the kept cache of name: a new publisher of the track
// came, whose objects replace it (it may number its groups anew).
func (reg *registry) releaseEnded(name wire.FullTrackName) {
	reg.mu.Lock()
	drop := reg.removeEndedLocked(name.Key())
	reg.mu.Unlock()
	dropCaches(drop)
}

// releaseEndedUnder drops the kept caches of the tracks under prefix: a
// publisher of the namespace came, which may publish them again, and is
// asked for them from now on as for any track the relay does not carry.
func (reg *registry) releaseEndedUnder(prefix wire.Namespace) {
	reg.mu.Lock()
	drop := reg.releaseEndedUnderLocked(prefix)
	reg.mu.Unlock()
	dropCaches(drop)
}

// releaseEndedUnderLocked is releaseEndedUnder with reg.mu held; it returns
// the caches to drop once it is released.
func (reg *registry) releaseEndedUnderLocked(prefix wire.Namespace) []*moqt.LocalTrack {
	var drop []*moqt.LocalTrack
	for key, k := range reg.ended {
		if k.name.Namespace.HasPrefix(prefix) {
			drop = append(drop, reg.removeEndedLocked(key)...)
		}
	}
	return drop
}

// releaseAllEndedLocked empties the table, for Relay.Close, and returns
// the caches to drop. reg.mu is held.
func (reg *registry) releaseAllEndedLocked() []*moqt.LocalTrack {
	var drop []*moqt.LocalTrack
	for key := range reg.ended {
		drop = append(drop, reg.removeEndedLocked(key)...)
	}
	return drop
}

// dropCaches takes the caches of tracks out of the relay's cache budget;
// a fetch still reading one goes on over what it holds.
func dropCaches(tracks []*moqt.LocalTrack) {
	for _, t := range tracks {
		t.SetCache(moqt.CacheLimits{})
	}
}
