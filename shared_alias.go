package moqt

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
