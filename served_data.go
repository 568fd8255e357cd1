package moqt

import (
	"errors"
	"fmt"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The data-plane side of ServedSubscription: its filter and the data
// streams opened for it, which PUBLISH_DONE counts (§9.9) and which a
// cancellation resets (C003).

// attachTrack starts serving objects of t: the subscription's filter
// resolves against largest, the Largest Object its answer reported.
func (ss *ServedSubscription) attachTrack(t *LocalTrack, largest LargestObject) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.filter = NewFilter(&ss.params, largest)
}

// passes reports whether an object goes to this subscription: it passes
// FORWARD, the Location filter and the range filters (C024, C027), and the
// subscription is Established, or is this end's PUBLISH awaiting its
// answer with early objects left (§3.1, Config.MaxEarlyObjects).
func (ss *ServedSubscription) passes(meta ObjectMeta) bool {
	switch ss.State() {
	case StateEstablished:
	case StatePendingPublisher:
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.filter == nil || ss.early >= ss.sess.cfg.MaxEarlyObjects || !ss.filter.Passes(meta) {
			return false
		}
		ss.early++
		return true
	default:
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.filter != nil && ss.filter.Passes(meta)
}

// skipAction says what an open subgroup stream does with an object at l
// that the subscription's filters refuse.
type skipAction int

const (
	skipReset  skipAction = iota // the stream would miss covered objects
	skipFinish                   // past the window: the stream is complete
	skipKeep                     // a range filter left it out; go on
)

func (ss *ServedSubscription) skipAction(l wire.Location) skipAction {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case ss.filter == nil || !ss.filter.Forward():
		return skipReset
	case ss.filter.Window().Bounded && ss.filter.Window().End.Less(l):
		return skipFinish
	case ss.filter.Window().Contains(l):
		return skipKeep
	}
	return skipReset
}

// openDataStream opens a unidirectional stream for this subscription and
// counts it for PUBLISH_DONE's Stream Count.
// Without stream credit at hand it returns a pendingStream, which opens
// in the background: a subscriber slow to grant credit must not hold up
// the publisher. Once the subscription's streams have been reset for its
// end, no new one opens, so the count PUBLISH_DONE reads is final.
func (ss *ServedSubscription) openDataStream() (transport.SendStream, error) {
	ss.openMu.RLock()
	defer ss.openMu.RUnlock()
	if ss.closing {
		return nil, errSubscriptionClosing
	}
	str, err := ss.sess.conn.OpenUniStream()
	if err != nil {
		if ss.sess.conn.Context().Err() != nil {
			return nil, ss.sess.closeErr(err)
		}
		if ss.pendingOpens.Load() >= maxPendingOpens {
			ss.fallBehind(fmt.Sprintf("%d data streams waiting for stream credit", maxPendingOpens))
			return nil, errTooFarBehind
		}
		str = ss.openLater()
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.dataStreams == nil {
		ss.dataStreams = map[transport.SendStream]struct{}{}
	}
	ss.dataStreams[str] = struct{}{}
	ss.streams++
	return str, nil
}

// finishDataStream ends a data stream with a FIN: every object it was to
// carry was written (§11.3.2).
func (ss *ServedSubscription) finishDataStream(str transport.SendStream) {
	_ = str.Close()
	ss.forgetDataStream(str)
}

// closeDataStream resets a data stream whose objects will not all be
// delivered (§11.3.2).
func (ss *ServedSubscription) closeDataStream(str transport.SendStream, code wire.ResetCode) {
	str.CancelWrite(uint64(code))
	ss.forgetDataStream(str)
}

// uncountDataStream forgets a stream that was abandoned before it opened:
// it never existed.
func (ss *ServedSubscription) uncountDataStream(str transport.SendStream) {
	ss.mu.Lock()
	ss.streams--
	delete(ss.dataStreams, str)
	ss.mu.Unlock()
	ss.sess.priorities().remove(str)
}

// maxPendingOpens bounds a subscription's streams waiting for stream
// credit. A subscriber that holds back credit for that many subgroups is
// too far behind.
const maxPendingOpens = 64

// errSubscriptionClosing refuses a data stream to a subscription that is
// ending.
var errSubscriptionClosing = errors.New("moqt: subscription is ending")

func (ss *ServedSubscription) forgetDataStream(str transport.SendStream) {
	ss.mu.Lock()
	delete(ss.dataStreams, str)
	ss.mu.Unlock()
	ss.sess.priorities().remove(str)
}

// resetDataStreams resets every data stream still open: on cancellation
// (C003) and before PUBLISH_DONE, which must come after all the
// subscription's streams are closed (C078, C081).
func (ss *ServedSubscription) resetDataStreams(code wire.ResetCode) {
	ss.openMu.Lock()
	ss.closing = true
	ss.openMu.Unlock()
	ss.mu.Lock()
	open := ss.dataStreams
	ss.dataStreams = nil
	ss.mu.Unlock()
	prio := ss.sess.priorities()
	for str := range open {
		str.CancelWrite(uint64(code))
		prio.remove(str)
	}
}

// largestOf converts a LARGEST_OBJECT value to a LargestObject.
func largestOf(l wire.Opt[wire.Location]) LargestObject {
	if l.Set {
		return LargestAt(l.Value)
	}
	return LargestObject{}
}
