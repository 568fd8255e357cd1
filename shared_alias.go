package moqt

import "slices"

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

// routeCopy picks the subscription a copy belongs to among subs, those
// bound to alias in order of binding: one whose filters the copy passes
// (accepts), and of several such, one that has not taken this copy yet.
// It returns nil when the copy passes no subscription's filters: it is not
// theirs (see Subscription.accepts).
func (s *Session) routeCopy(alias uint64, subs []*Subscription, key copyKey, accepts func(*Subscription) bool) *Subscription {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.aliases.claims[alias]
	if c == nil {
		if s.aliases.claims == nil {
			s.aliases.claims = map[uint64]*copyClaims{}
		}
		c = &copyClaims{taken: map[copyKey][]*Subscription{}}
		s.aliases.claims[alias] = c
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
