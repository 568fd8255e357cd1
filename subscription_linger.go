package moqt

import (
	"time"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// After PUBLISH_DONE a subscription waits for the streams it counted to
// arrive (release, lingerExpired) and, before it finishes its side of the
// request stream, for those it has to be read (finWhenRead). Both waits
// last while data still comes, and end once none has for the linger: a
// fixed bound from PUBLISH_DONE ended them while a slow path (a lossy
// link, say) still carried the last objects, and a publisher that closes
// once this end finishes its side (Session.Close) then cut them off.
// PUBLISH_DONE comes once the publisher has passed its streams' data to
// QUIC, not once it arrived: over a lossy path a large object can take
// seconds more.

// lingerTime is how long to wait for late streams after PUBLISH_DONE: at
// least the larger delivery timeout of the subscription (§9.9), and at
// least Config.DoneLinger. sub.mu is held.
func (sub *Subscription) lingerTime() time.Duration {
	d := sub.sess.cfg.DoneLinger
	for _, t := range []wire.Opt[uint64]{sub.params.ObjectDeliveryTimeout, sub.params.SubgroupDeliveryTimeout} {
		if t.Set {
			d = max(d, msDuration(t.Value))
		}
	}
	return d
} // lastData is when data of the subscription last came: a stream arrived
// or ended, or one of its open streams was read from the transport. A
// stream the application took and has not read all that arrived of (no
// Read waits on it) counts as data coming now: its pace is its own, and
// Config.ReadStallTimeout bounds a stalled one. sub.mu is held.
func (sub *Subscription) lastData() int64 {
	t := sub.dataAt
	for r := range sub.readers {
		switch {
		case r.held == nil:
		case r.watch.taken.Load() && !r.held.waiting():
			return mono.Now()
		default:
			t = max(t, r.held.received())
		}
	}
	return t
}

// whenQuiet returns a timer that calls f once no data of the subscription
// has come for lingerTime (lastData), unless done, called with sub.mu
// held, reports the wait over by then. sub.mu is held.
func (sub *Subscription) whenQuiet(done func() bool, f func()) *time.Timer {
	d := sub.lingerTime()
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		sub.mu.Lock()
		if done() {
			sub.mu.Unlock()
			return
		}
		if wait := time.Duration(sub.lastData() + int64(d) - mono.Now()); wait > 0 {
			t.Reset(wait)
			sub.mu.Unlock()
			return
		}
		sub.mu.Unlock()
		f()
	})
	return t
}
