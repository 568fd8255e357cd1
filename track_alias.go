package moqt

import (
	"fmt"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// aliasTable holds both ends' Track Alias state for one session (§3.1.2).
// It lives under Session.mu.
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
// within the alias wait. s.mu is held.
func (t *aliasTable) recentlyEnded(alias uint64) bool {
	_, ok := t.ended[alias]
	return ok
}

// markEnded records that alias has no subscription left, dropping the
// oldest records beyond the bound. s.mu is held.
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
func (s *Session) publisherAlias(track wire.FullTrackName) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.aliases
	if !s.cfg.SharedTrackAliases {
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
func (s *Session) releaseAlias(track wire.FullTrackName, alias uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := track.Key()
	if a := s.aliases.byTrack[key]; a != nil && a.alias == alias {
		if a.users--; a.users == 0 {
			delete(s.aliases.byTrack, key)
		}
	}
}

// bindAlias records an Established subscriber-side subscription under its
// alias. An alias already used by an Established subscription to another
// track closes the session with DUPLICATE_TRACK_ALIAS (C035).
func (s *Session) bindAlias(sub *Subscription) error {
	alias := sub.TrackAlias()
	s.mu.Lock()
	if err := s.aliasConflict(alias, sub.track); err != nil {
		s.mu.Unlock()
		return err
	}
	t := &s.aliases
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
	close(s.aliasBound)
	s.aliasBound = make(chan struct{})
	held := s.releaseDatagramsLocked(alias)
	s.mu.Unlock()
	for _, d := range held {
		sub.deliverDatagram(d)
	}
	return nil
}

// checkAlias applies C035 to a PUBLISH as it arrives: alias must not name
// another track with an Established subscription.
func (s *Session) checkAlias(alias uint64, track wire.FullTrackName) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aliasConflict(alias, track)
}

// aliasConflict returns DUPLICATE_TRACK_ALIAS if alias is bound to a track
// other than track (C035). s.mu is held.
func (s *Session) aliasConflict(alias uint64, track wire.FullTrackName) error {
	for _, other := range s.aliases.subs[alias] {
		if !other.track.Equal(track) {
			return &SessionError{Code: wire.DuplicateTrackAlias,
				Reason: fmt.Sprintf("track alias %d names %s and %s", alias, other.track, track)}
		}
	}
	return nil
}

// boundTo returns the subscriber-side subscriptions to track whose alias
// is bound, whatever the alias.
func (s *Session) boundTo(track wire.FullTrackName) []*Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Subscription
	for _, subs := range s.aliases.subs {
		for _, sub := range subs {
			if sub.track.Equal(track) {
				out = append(out, sub)
			}
		}
	}
	return out
}

// unbindAlias forgets a subscriber-side subscription.
func (s *Session) unbindAlias(sub *Subscription) {
	alias := sub.TrackAlias()
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.aliases.subs[alias]
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
		delete(s.aliases.claims, alias)
	}
	if len(kept) == 0 {
		delete(s.aliases.subs, alias)
		s.aliases.markEnded(alias, time.Now(), s.cfg.AliasWait)
	} else {
		s.aliases.subs[alias] = kept
	}
}
