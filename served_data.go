package moqt

import (
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

// beyondWindow reports whether l is past the end of the subscription's
// Location filter.
func (ss *ServedSubscription) beyondWindow(l wire.Location) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.filter == nil {
		return false
	}
	w := ss.filter.Window()
	return w.Bounded && w.End.Less(l)
}

// openDataStream opens a unidirectional stream for this subscription and
// counts it for PUBLISH_DONE's Stream Count.
func (ss *ServedSubscription) openDataStream() (transport.SendStream, error) {
	str, err := ss.sess.conn.OpenUniStreamSync(ss.ctx)
	if err != nil {
		return nil, ss.sess.closeErr(err)
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

func (ss *ServedSubscription) forgetDataStream(str transport.SendStream) {
	ss.mu.Lock()
	delete(ss.dataStreams, str)
	ss.mu.Unlock()
}

// resetDataStreams resets every data stream still open: on cancellation
// (C003) and before PUBLISH_DONE, which must come after all the
// subscription's streams are closed (C078, C081).
func (ss *ServedSubscription) resetDataStreams(code wire.ResetCode) {
	ss.mu.Lock()
	open := ss.dataStreams
	ss.dataStreams = nil
	ss.mu.Unlock()
	for str := range open {
		str.CancelWrite(uint64(code))
	}
}

// largestOf converts a LARGEST_OBJECT value to a LargestObject.
func largestOf(l wire.Opt[wire.Location]) LargestObject {
	if l.Set {
		return LargestAt(l.Value)
	}
	return LargestObject{}
}
