package moqt

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// aliasRoutes is the data plane's routing state of one session: the
// Track Alias table, both ends, and the streams, bytes and datagrams that
// wait for an alias to be bound (Config.MaxPendingStreams,
// MaxPendingBytes, MaxPendingDatagrams, AliasWait).
type aliasRoutes struct {
	cfg *Config

	mu      sync.Mutex // guards the fields below; a leaf, never held while calling out
	aliases aliasTable
	// aliasBound is closed and replaced whenever an alias is bound, waking
	// the data streams that wait for theirs.
	aliasBound     chan struct{}
	pendingStreams int // data streams waiting for their alias
	// awaiting counts this end's SUBSCRIBEs not answered yet. A data
	// stream may overtake its SUBSCRIBE_OK, by more than AliasWait on a
	// lossy path, so one whose alias is unknown waits for as long as any
	// SUBSCRIBE is outstanding: refusing it would lose objects the
	// subscription is then promised, with nobody told.
	awaiting         int
	pendingBytes     int               // bytes read ahead from them
	pendingDatagrams []pendingDatagram // datagrams waiting for their alias
	droppedDatagrams uint64            // datagrams dropped while waiting
}

func newAliasRoutes(cfg *Config) aliasRoutes {
	return aliasRoutes{cfg: cfg, aliasBound: make(chan struct{})}
}

// aliasTable holds both ends' Track Alias state for one session (§3.1.2).
// It lives under aliasRoutes.mu.
//
// As a publisher, the session gives each subscription an alias of its
// own, so objects of a subscription that is ending never pass for those of
// a new one, and no two streams open at once with the same header (§3.1.2,
// §11.3). Numbers are never handed out twice, so an alias never names
// another track while objects for its old track may still be in flight
// (C034). With Config.SharedTrackAliases, concurrent subscriptions to one
// track share its alias instead, as §3.1 allows.
//
// As a subscriber, it maps each alias to the Established subscriptions that
// use it, which is how objects find their subscriptions and how a second
// track claiming a live alias is caught (C035). A peer may share an alias
// between subscriptions to one track (§3.1), so several can be bound.
type aliasTable struct {
	next uint64
	// byTrack holds the shared aliases, with Config.SharedTrackAliases.
	byTrack map[wire.TrackKey]*publishedAlias
	// subs is copy-on-write: routing reads a slice without the lock.
	subs map[uint64][]*Subscription
	// ended remembers aliases whose last subscription just ended, so late
	// objects for them are discarded at once rather than held as unknown
	// (§3.1.2). It is bounded by maxEndedAliases.
	ended map[uint64]time.Time
	// claims tracks which subscriptions sharing an alias took a copy of
	// an object (see routeCopy).
	claims map[uint64]*copyClaims
}

// maxEndedAliases bounds aliasTable.ended.
const maxEndedAliases = 1024

// recentlyEnded reports whether alias belonged to a subscription that ended
// within the alias wait. aliasRoutes.mu is held.
func (t *aliasTable) recentlyEnded(alias uint64) bool {
	_, ok := t.ended[alias]
	return ok
}

// markEnded records that alias has no subscription left, dropping the
// oldest records beyond the bound. aliasRoutes.mu is held.
func (t *aliasTable) markEnded(alias uint64, now time.Time, keep time.Duration) {
	if t.ended == nil {
		t.ended = map[uint64]time.Time{}
	}
	for a, when := range t.ended {
		if now.Sub(when) > keep || len(t.ended) >= maxEndedAliases {
			delete(t.ended, a)
		}
	}
	t.ended[alias] = now
}

type publishedAlias struct {
	alias uint64
	users int
}

// publisherAlias returns the alias of a new subscription this end serves
// to track: a fresh one, or with Config.SharedTrackAliases the one the
// track's live subscriptions use.
func (r *aliasRoutes) publisherAlias(track wire.FullTrackName) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := &r.aliases
	if !r.cfg.SharedTrackAliases {
		a := t.next
		t.next++
		return a
	}
	if t.byTrack == nil {
		t.byTrack = map[wire.TrackKey]*publishedAlias{}
	}
	key := track.Key()
	a := t.byTrack[key]
	if a == nil {
		a = &publishedAlias{alias: t.next}
		t.next++
		t.byTrack[key] = a
	}
	a.users++
	return a.alias
}

// releaseAlias drops one ended subscription's use of a shared alias.
func (r *aliasRoutes) releaseAlias(track wire.FullTrackName, alias uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := track.Key()
	if a := r.aliases.byTrack[key]; a != nil && a.alias == alias {
		if a.users--; a.users == 0 {
			delete(r.aliases.byTrack, key)
		}
	}
}

// bindAlias records an Established subscriber-side subscription under its
// alias. An alias already used by an Established subscription to another
// track closes the session with DUPLICATE_TRACK_ALIAS (C035).
func (r *aliasRoutes) bindAlias(sub *Subscription) error {
	alias := sub.TrackAlias()
	r.mu.Lock()
	if err := r.aliasConflict(alias, sub.track); err != nil {
		r.mu.Unlock()
		return err
	}
	t := &r.aliases
	if t.subs == nil {
		t.subs = map[uint64][]*Subscription{}
	}
	t.subs[alias] = append(t.subs[alias][:len(t.subs[alias]):len(t.subs[alias])], sub)
	if subs := t.subs[alias]; len(subs) > 1 {
		// A copy meant for one of them can reach another, so their
		// FINs no longer prove where a subgroup ends (malformed.go).
		for _, other := range subs {
			other.checks.partialFins.Store(true)
		}
	}
	delete(t.ended, alias)
	// Wake the streams waiting for an alias, and hand over the datagrams
	// held for this one, outside the lock: a malformed one cancels the
	// subscription, which unbinds it.
	close(r.aliasBound)
	r.aliasBound = make(chan struct{})
	held := r.releaseDatagramsLocked(alias)
	r.mu.Unlock()
	for _, d := range held {
		sub.deliverDatagram(d)
	}
	return nil
}

// checkAlias applies C035 to a PUBLISH as it arrives: alias must not name
// another track with an Established subscription.
func (r *aliasRoutes) checkAlias(alias uint64, track wire.FullTrackName) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.aliasConflict(alias, track)
}

// aliasConflict returns DUPLICATE_TRACK_ALIAS if alias is bound to a track
// other than track (C035). r.mu is held.
func (r *aliasRoutes) aliasConflict(alias uint64, track wire.FullTrackName) error {
	for _, other := range r.aliases.subs[alias] {
		if !other.track.Equal(track) {
			return &SessionError{Code: wire.DuplicateTrackAlias,
				Reason: fmt.Sprintf("track alias %d names %s and %s", alias, other.track, track)}
		}
	}
	return nil
}

// boundTo returns the subscriber-side subscriptions to track whose alias
// is bound, whatever the alias.
func (r *aliasRoutes) boundTo(track wire.FullTrackName) []*Subscription {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Subscription
	for _, subs := range r.aliases.subs {
		for _, sub := range subs {
			if sub.track.Equal(track) {
				out = append(out, sub)
			}
		}
	}
	return out
}

// unbindAlias forgets a subscriber-side subscription.
func (r *aliasRoutes) unbindAlias(sub *Subscription) {
	alias := sub.TrackAlias()
	r.mu.Lock()
	defer r.mu.Unlock()
	list := r.aliases.subs[alias]
	kept := make([]*Subscription, 0, len(list))
	for _, other := range list {
		if other != sub {
			kept = append(kept, other)
		}
	}
	if len(kept) == len(list) {
		return // not bound
	}
	if len(kept) <= 1 {
		delete(r.aliases.claims, alias)
	}
	if len(kept) == 0 {
		delete(r.aliases.subs, alias)
		r.aliases.markEnded(alias, time.Now(), r.cfg.AliasWait)
	} else {
		r.aliases.subs[alias] = kept
	}
}

// refuseAlias records that this end refused the track a PUBLISH or
// SUBSCRIBE_OK named alias for, or cancelled its subscription before it was
// Established: the objects the publisher sent meanwhile are a cancelled
// subscription's, discarded at once (§3.1.2), and a refused track's objects
// are not processed (§3.6). Streams waiting for the alias are stopped and
// its held datagrams dropped. An alias that an Established subscription to
// the same track shares (§3.1) stays theirs.
func (r *aliasRoutes) refuseAlias(alias uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.aliases.subs[alias]) > 0 {
		return
	}
	r.aliases.markEnded(alias, time.Now(), r.cfg.AliasWait)
	r.releaseDatagramsLocked(alias)
	// Wake the waiting streams: waitAlias finds the alias ended.
	close(r.aliasBound)
	r.aliasBound = make(chan struct{})
}

// lookupAlias returns the subscriptions bound to alias, and whether the
// alias belongs to a subscription that just ended.
func (r *aliasRoutes) lookupAlias(alias uint64) ([]*Subscription, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	subs := r.aliases.subs[alias]
	return subs, len(subs) == 0 && r.aliases.recentlyEnded(alias)
}

// reservePendingStream claims one of Config.MaxPendingStreams slots for a
// stream waiting for its alias.
func (r *aliasRoutes) reservePendingStream() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pendingStreams >= r.cfg.MaxPendingStreams {
		return false
	}
	r.pendingStreams++
	return true
}

func (r *aliasRoutes) releasePendingStream() {
	r.mu.Lock()
	r.pendingStreams--
	r.mu.Unlock()
}

// waitAlias waits up to Config.AliasWait for alias to be bound and returns
// its subscriptions. It reports false with a STOP_SENDING code when the
// wait ends otherwise: at once, CANCELLED, when the alias is refused.
func (r *aliasRoutes) waitAlias(ctx context.Context, alias uint64) ([]*Subscription, wire.ResetCode, bool) {
	timer := time.NewTimer(r.cfg.AliasWait)
	defer timer.Stop()
	for {
		r.mu.Lock()
		subs := r.aliases.subs[alias]
		refused := len(subs) == 0 && r.aliases.recentlyEnded(alias)
		bound := r.aliasBound
		r.mu.Unlock()
		if len(subs) > 0 {
			return subs, 0, true
		}
		if refused {
			return nil, wire.ResetCancelled, false // see refuseAlias
		}
		select {
		case <-bound:
		case <-timer.C:
			r.mu.Lock()
			awaiting := r.awaiting > 0
			r.mu.Unlock()
			if awaiting {
				timer.Reset(r.cfg.AliasWait)
				continue
			}
			return nil, wire.ResetCancelled, false
		case <-ctx.Done():
			return nil, wire.ResetSessionClosed, false
		}
	}
}

// expectAlias records a SUBSCRIBE about to be sent, whose SUBSCRIBE_OK
// will bind an alias; the returned func, called once it is answered or
// abandoned, forgets it.
func (r *aliasRoutes) expectAlias() (answered func()) {
	r.mu.Lock()
	r.awaiting++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.awaiting--
			r.mu.Unlock()
		})
	}
}

// liveAliasSubs returns the subscriptions bound to alias.
func (r *aliasRoutes) liveAliasSubs(alias uint64) []*Subscription {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.aliases.subs[alias]
}

// pendingDatagram is a datagram held until its alias is known.
type pendingDatagram struct {
	d    wire.ObjectDatagram
	when time.Time
}

// holdDatagram keeps a datagram with an unknown alias for up to
// Config.AliasWait, within Config.MaxPendingDatagrams; beyond that, or for
// an alias that just ended, it is dropped, as §11.2 allows.
func (r *aliasRoutes) holdDatagram(d wire.ObjectDatagram) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.aliases.recentlyEnded(d.TrackAlias) {
		return
	}
	now := time.Now()
	kept := r.pendingDatagrams[:0]
	for _, p := range r.pendingDatagrams {
		if now.Sub(p.when) < r.cfg.AliasWait {
			kept = append(kept, p)
		}
	}
	r.pendingDatagrams = kept
	if len(kept) >= r.cfg.MaxPendingDatagrams {
		r.droppedDatagrams++
		return
	}
	// The payload aliases the transport's buffer, which is the
	// datagram's own; it is kept as is.
	r.pendingDatagrams = append(r.pendingDatagrams, pendingDatagram{d: d, when: now})
}

// releaseDatagrams delivers the held datagrams of a newly bound alias.
// r.mu is held.
func (r *aliasRoutes) releaseDatagramsLocked(alias uint64) []wire.ObjectDatagram {
	var out []wire.ObjectDatagram
	kept := r.pendingDatagrams[:0]
	for _, p := range r.pendingDatagrams {
		if p.d.TrackAlias == alias {
			out = append(out, p.d)
		} else {
			kept = append(kept, p)
		}
	}
	r.pendingDatagrams = kept
	return out
}

// reservePendingBytes counts n bytes of a waiting stream against
// Config.MaxPendingBytes; it reports false if they do not fit.
func (r *aliasRoutes) reservePendingBytes(n int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pendingBytes+n > r.cfg.MaxPendingBytes {
		return false
	}
	r.pendingBytes += n
	return true
}

func (r *aliasRoutes) releasePendingBytes(n int) {
	r.mu.Lock()
	r.pendingBytes -= n
	r.mu.Unlock()
}

// A publisher may give concurrent subscriptions to one track the same
// Track Alias (§3.1.2; this library's publisher does only with
// Config.SharedTrackAliases), and an object passing several of their
// filters then arrives once per subscription (C033): as look-alike streams
// or datagrams. Routing gives
// each copy to a different subscription among those whose filter the
// object passes, so every subscription receives its own copy once.

// copyKey names what one copy carries: a subgroup of a group, or the
// datagram of one object.
type copyKey struct {
	group, id uint64 // id is the Subgroup ID, or the Object ID of a datagram
	datagram  bool
}

// copyClaims remembers, for one alias, which subscriptions already took a
// copy. It keeps the newest maxCopyClaims keys: a copy older than that
// arrives so late that its subscription has long moved on.
type copyClaims struct {
	taken map[copyKey][]*Subscription
	order []copyKey // oldest first
}

const maxCopyClaims = 4096

// claim records that sub took the copy named by key.
func (c *copyClaims) claim(key copyKey, sub *Subscription) {
	if _, ok := c.taken[key]; !ok {
		if len(c.order) == maxCopyClaims {
			delete(c.taken, c.order[0])
			c.order = c.order[1:]
		}
		c.order = append(c.order, key)
	}
	c.taken[key] = append(c.taken[key], sub)
}

// routeCopy picks the subscription a copy belongs to among subs, those
// bound to alias in order of binding: one whose filters the copy passes
// (accepts), and of several such, one that has not taken this copy yet.
// It returns nil when the copy passes no subscription's filters: it is not
// theirs (see Subscription.accepts).
func (r *aliasRoutes) routeCopy(alias uint64, subs []*Subscription, key copyKey, accepts func(*Subscription) bool) *Subscription {
	var buf [4]*Subscription
	cands := buf[:0]
	for _, sub := range subs {
		if accepts(sub) {
			cands = append(cands, sub)
		}
	}
	switch len(cands) {
	case 0:
		return nil
	case 1:
		return cands[0]
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.aliases.claims[alias]
	if c == nil {
		if r.aliases.claims == nil {
			r.aliases.claims = map[uint64]*copyClaims{}
		}
		c = &copyClaims{taken: map[copyKey][]*Subscription{}}
		r.aliases.claims[alias] = c
	}
	taken := c.taken[key]
	for _, sub := range cands {
		if !slices.Contains(taken, sub) {
			c.claim(key, sub)
			return sub
		}
	}
	// Every candidate has its copy: the publisher opened the subgroup
	// again (say after a reset); it is the first candidate's.
	return cands[0]
}
