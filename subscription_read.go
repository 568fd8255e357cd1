package moqt

import (
	"context"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// The application's side of a subscription: the four ways to read it,
// which exclude each other at run time. ReadObject merges every stream,
// datagram and fill into objects (subscription_arrival.go); AcceptSubgroup
// hands over the subgroup streams themselves, ReadDatagram the datagrams,
// and AcceptFill the fill fetch streams. Here too are what the stall
// watchdog (subscription_stall.go) needs of them, and how the streams the
// application holds are finished or stopped.

// ReadObject returns the subscription's next object, from whichever of its
// subgroup streams or datagrams it arrived on: each subgroup's objects in
// order, and across subgroups and datagrams in the order they were read
// off the network. The returned Payload and Properties are valid until the
// next call of ReadObject: copy them to keep them longer. Objects whose
// payload exceeds Config.MaxObjectSize are not read into memory: the
// stream is stopped and reported as a stream error (see below).
//
// ReadObject returns an error only when the subscription has ended (after
// every stream has been read: *DoneError for the publisher's PUBLISH_DONE)
// or ctx is done. What may leave objects missing while it goes on is told
// in band, by an entry whose Object.Incomplete is set, as Fetch.ReadObject
// tells a fetch's gaps: a subgroup stream that ended before its FIN (the
// publisher reset it, such as at the end of a subgroup this subscription
// joined mid-way when its filter covers the objects before, §11.3.2, or
// for a delivery timeout; or one of its objects was larger than
// Config.MaxObjectSize, and this end stopped it). The objects it carried
// before were returned. After PUBLISH_DONE, data streams its Stream Count
// promised that have not arrived when the subscription stops waiting for
// them (Config.DoneLinger, §9.9) are told by one such entry too, just
// before the end: its Incomplete wraps ErrStreamsMissing and says how
// many, every other field zero, and the *DoneError that follows has
// Missing set. So the loop a subscriber writes is:
//
//	for {
//		obj, err := sub.ReadObject(ctx)
//		if err != nil {
//			return err // the subscription is over
//		}
//		if obj.Incomplete != nil {
//			continue // group obj.Location.Group may lack objects
//		}
//		use(obj)
//	}
//
// With FILL_PARAMETERS, ReadObject also yields the fill fetch streams'
// entries (§3.4), gap markers (Object.EndOfRange) included, unless
// AcceptFill was called first. The fill SUBSCRIBE_OK promised comes first:
// its entries, in the fill's order, then the subscription's own objects,
// which wait meanwhile (never dropped, and pushed back on the publisher
// past the bounds below); an object the ended fill already delivered, or
// reported as not existing, is not returned again (one in a range it
// reported unknown or timed out is). With the Next Object filter and
// an open-ended fill (§3.4) that is every object once, in order. A fill
// that is reset, does not open within Config.FillWait, or then gives no
// entry for as long while objects wait, is an entry whose Incomplete
// wraps ErrFillFailed and the cause (a *StreamError for a reset), every
// other field zero; the subscription goes on. Fills asked for later by
// Update are yielded as they arrive.
//
// Use ReadObject or AcceptSubgroup and ReadDatagram, not both: the first
// call of ReadObject takes every stream of the subscription, and returns
// datagrams too. It buffers at most 64 objects and 1 MiB (or one larger
// object, or, while no whole object is held, objects still arriving on
// several streams, together up to Config.MaxObjectSize), plus one object
// per open stream while it waits for room; beyond that streams are left
// unread, so QUIC flow control holds back the publisher, and nothing is
// dropped (datagrams queue as ReadDatagram says).
// A subscription whose objects wait for ReadObject longer than
// Config.ReadStallTimeout, while it is not called, is cancelled
// (ErrFellBehind), as one whose streams wait for AcceptSubgroup.
//
// After the subscription ends, and every stream has been read to its end
// (or reset), ReadObject returns the subscription's error, such as
// *DoneError after PUBLISH_DONE. Once this end cancels the subscription
// (Close, or ErrFellBehind, or a Malformed Track), ReadObject returns its
// error at once, and what was queued is discarded. ReadObject returns
// ctx's error if ctx ends first. It is not safe for concurrent use.
func (sub *Subscription) ReadObject(ctx context.Context) (Object, error) {
	a := &sub.arrival
	a.startOnce.Do(func() { a.start(sub) })
	a.recycle()
	it, err := a.next(ctx, sub)
	if err == nil && a.isAborted() {
		err = sub.endErr(ctx) // what was queued is discarded
	}
	if err != nil {
		return Object{}, err
	}
	a.took(sub)
	if it.err != nil {
		// A subgroup or fill that ended short: news, in band.
		it.obj.Incomplete = it.err
		return it.obj, nil
	}
	a.mu.Lock()
	a.held = it
	a.mu.Unlock()
	return it.obj, nil
}

// endErr is the subscription's error, once it has one, never nil: after
// the session ended, or once the data plane ended (AcceptSubgroup,
// AcceptFill, ReadDatagram), the subscription may take a moment to record
// why.
func (sub *Subscription) endErr(ctx context.Context) error {
	select {
	case <-sub.done:
		return sub.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// readFills decides, at ReadObject's start, whether it reads the fills: it
// does unless AcceptFill took them first.
func (sub *Subscription) readFills() bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.fill.mode == fillUndecided {
		sub.fill.mode = fillByRead
	}
	return sub.fill.mode == fillByRead
}

// pendingInitialFill returns the initial fill while ReadObject must wait
// for it.
func (sub *Subscription) pendingInitialFill() *fillSlot {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if s := sub.fill.initial; s != nil && sub.fill.mode == fillByRead && !s.ended {
		return s
	}
	return nil
}

// seam applies the order across fill and subscription to an item taken
// off the queues, and reports whether ReadObject returns it.
func (sub *Subscription) seam(a *arrival, it arrivalItem) (arrivalItem, bool) {
	if s := it.slot; s != nil {
		if it.fillEnd {
			sub.mu.Lock()
			if !s.ended {
				s.ended, s.fin = true, it.err == nil
			}
			sub.mu.Unlock()
			return arrivalItem{obj: Object{}, err: it.err}, it.err != nil
		}
		if e := it.obj.EndOfRange; (e == wire.EndOfUnknownRange || e == wire.EndOfTimedOutRange) && len(s.gaps) < maxFillGaps {
			s.gaps = append(s.gaps, fillGap{after: s.last, hasAfter: s.hasLast, end: it.obj.Location})
		}
		s.hasLast, s.last = true, it.obj.Location
		return it, true
	}
	if it.err != nil {
		return it, true
	}
	sub.mu.Lock()
	s := sub.fill.initial
	covered := s != nil && s.ended && s.covers(it.obj.Location)
	sub.mu.Unlock()
	if covered {
		a.release(it.size, 0, it.buf)
		return arrivalItem{}, false
	}
	return it, true
}

// AcceptSubgroup returns the next subgroup stream of the subscription.
// After the subscription ends it keeps returning the streams that arrive
// late, until every stream PUBLISH_DONE counted has arrived or
// Config.DoneLinger passes; then it returns the subscription's error: a
// *DoneError whose Missing counts the streams that never came, if any
// (it then wraps ErrStreamsMissing). A
// subscription whose streams wait here, or taken but unread, for longer
// than Config.ReadStallTimeout is cancelled (ErrFellBehind).
func (sub *Subscription) AcceptSubgroup(ctx context.Context) (*SubgroupReader, error) {
	for {
		var r *SubgroupReader
		select {
		case r = <-sub.incoming:
		default:
			select {
			case r = <-sub.incoming:
			case <-sub.dataDone:
				select {
				case r = <-sub.incoming:
				default:
					return nil, sub.endErr(ctx)
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r = sub.take(r); r != nil {
			return r, nil
		}
	}
}

// take hands r to the application, unless this end cancelled the
// subscription for falling behind or a Malformed Track: its queued streams
// are being stopped, and one taken now would be stopped too.
func (sub *Subscription) take(r *SubgroupReader) *SubgroupReader {
	sub.mu.Lock()
	code := sub.stopCode
	sub.mu.Unlock()
	if code != 0 {
		r.stopWith(code)
		sub.forgetReader(r)
		return nil
	}
	r.watch.take()
	return r
}

// ReadDatagram returns the next object the subscription received as a
// datagram (§11.2). The Object's Payload and Properties alias the
// datagram as the transport delivered it, a buffer of its own: they are the
// caller's to keep. Datagrams not taken are queued, up to 256; beyond that
// the oldest are dropped and counted by DroppedDatagrams. Use either
// ReadDatagram or Subscription.ReadObject, which returns datagrams too.
func (sub *Subscription) ReadDatagram(ctx context.Context) (Object, error) {
	for {
		if d, ok := sub.datagrams.pop(); ok {
			return d, nil
		}
		select {
		case <-sub.datagrams.ready:
		case <-sub.dataDone:
			if d, ok := sub.datagrams.pop(); ok {
				return d, nil
			}
			return Object{}, sub.endErr(ctx)
		case <-ctx.Done():
			return Object{}, ctx.Err()
		}
	}
}

// DroppedDatagrams counts datagrams dropped because ReadDatagram did not
// keep up.
func (sub *Subscription) DroppedDatagrams() uint64 {
	return sub.datagrams.droppedCount()
}

// AcceptFill returns the subscription's next fill fetch stream (§3.4), as a
// Fetch whose ReadObject and Close work as a FETCH's; its FETCH_OK fields
// are unset, and it has no Update. A fill the publisher could not serve
// arrives reset (§3.4.1): its ReadObject returns the *StreamError; one
// that came before SUBSCRIBE_OK with Config.MaxPendingStreams streams
// already held was stopped, and its ReadObject says so. Closing
// one stops only that stream; the subscription goes on. After the
// subscription's data plane ends, AcceptFill returns the subscription's
// error. Use AcceptFill or ReadObject, not both: once ReadObject has
// started it takes the fills, and AcceptFill fails; once AcceptFill has
// been called, ReadObject yields no fill objects.
func (sub *Subscription) AcceptFill(ctx context.Context) (*Fetch, error) {
	for {
		sub.mu.Lock()
		if sub.fill.mode == fillByRead {
			sub.mu.Unlock()
			return nil, errFillsTaken
		}
		sub.fill.mode = fillByAccept
		f, sig := sub.nextFillLocked()
		sub.mu.Unlock()
		if f != nil {
			return f, nil
		}
		select {
		case <-sig:
		case <-sub.dataDone:
			sub.mu.Lock()
			f, _ = sub.nextFillLocked()
			sub.mu.Unlock()
			if f != nil {
				return f, nil
			}
			return nil, sub.endErr(ctx)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// nextFillLocked takes the oldest queued fill, or returns the channel that
// signals the next. sub.mu is held.
func (sub *Subscription) nextFillLocked() (*Fetch, <-chan struct{}) {
	if len(sub.fill.queue) > 0 {
		f := sub.fill.queue[0]
		sub.fill.queue = sub.fill.queue[1:]
		f.data.r.watch.take()
		return f, nil
	}
	if sub.fill.signal == nil {
		sub.fill.signal = make(chan struct{})
	}
	return nil, sub.fill.signal
}

// fillsStalledLocked counts the fill streams left waiting with data since
// before cutoff, as checkStalls counts subgroup streams. sub.mu is held.
func (sub *Subscription) fillsStalledLocked(cutoff int64) int {
	n := 0
	for r := range sub.fill.open {
		if r.watch.stalled(cutoff) {
			n++
		}
	}
	return n
}

// watchStallsLocked starts the subscription's stall watchdog if it is not
// running; it runs while the subscription has open streams and the session
// lasts. sub.mu is held.
func (sub *Subscription) watchStallsLocked() {
	d := sub.sess.cfg.ReadStallTimeout
	if d < 0 || sub.stallTimer != nil {
		return
	}
	sub.stallTimer = time.AfterFunc(stallTick(d), sub.checkStalls)
}

// checkStalls cancels the subscription if one of its streams has waited
// unread for longer than Config.ReadStallTimeout.
func (sub *Subscription) checkStalls() {
	d := sub.sess.cfg.ReadStallTimeout
	cutoff := sub.stall.ticks.Add(1) - stallTicks(d) + 1 // touched before it: stalled
	sub.mu.Lock()
	stalled := 0
	for r := range sub.readers {
		if r.watch.stalled(cutoff) {
			stalled++
		}
	}
	if sub.arrival.stalled(cutoff) {
		stalled++
	}
	stalled += sub.fillsStalledLocked(cutoff)
	if sub.stall.progress.Load() >= cutoff || sub.arrival.waiting.Load() {
		// The application took or read one of the subscription's
		// streams lately: it reads, one stream after another perhaps,
		// and the others wait their turn. Or it waits in ReadObject,
		// which holds objects back for the initial fill (§3.4).
		stalled = 0
	}
	switch {
	case stalled > 0:
		sub.stallTimer = nil
	case len(sub.readers) == 0 && len(sub.fill.open) == 0 || sub.sess.ctx.Err() != nil:
		sub.stallTimer = nil // restarted by the next stream
	default:
		sub.stallTimer.Reset(stallTick(d))
	}
	sub.mu.Unlock()
	if stalled > 0 {
		sub.fellBehind(fmt.Errorf("%w: %d data stream(s) unread for %v: %w", ErrFellBehind, stalled, d, ErrCancelled))
	}
}

// fellBehind cancels the subscription from this end: STOP_SENDING with
// EXCESSIVE_LOAD (§12.5: this endpoint cannot take more) on its data
// streams, taken or not, and on its request stream, whose reset carries
// the same code.
func (sub *Subscription) fellBehind(err error) {
	sub.mu.Lock()
	sub.stopCode = wire.ResetExcessiveLoad
	sub.mu.Unlock()
	sub.cancelWith(err, wire.ResetExcessiveLoad)
	sub.endData()
	sub.stopReaders()
}

// trackReader records a delivered stream until it ends.
func (sub *Subscription) trackReader(r *SubgroupReader) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.readers == nil {
		sub.readers = map[*SubgroupReader]struct{}{}
	}
	sub.readers[r] = struct{}{}
	r.watch.clock = &sub.stall
	r.watch.touched.Store(sub.stall.now())
	sub.watchStallsLocked()
}

// forgetReader drops a stream that ended.
func (sub *Subscription) forgetReader(r *SubgroupReader) {
	sub.mu.Lock()
	if _, ok := sub.readers[r]; ok {
		delete(sub.readers, r)
		sub.dataAt = mono.Now()
	}
	sub.mu.Unlock()
	sub.finIfRead()
}

// finWhenRead finishes this end's side of the request stream once the
// publisher has finished its own. After PUBLISH_DONE that waits until
// every stream it counted has arrived and been read to its end, or no
// data has come for the linger (whenQuiet): the publisher may wait for
// this FIN before it closes the session (Session.Close), so it must mean
// that nothing sent on the subscription's streams is still in flight.
func (sub *Subscription) finWhenRead() {
	sub.mu.Lock()
	if sub.finished == nil {
		sub.mu.Unlock()
		_ = sub.rs.fin()
		return
	}
	sub.finAfterRead = true
	sub.finTimer = sub.whenQuiet(func() bool { return !sub.finAfterRead }, sub.finNow)
	sub.mu.Unlock()
	sub.finIfRead()
}

// finIfRead finishes this end's side once finWhenRead waits for nothing.
func (sub *Subscription) finIfRead() {
	sub.mu.Lock()
	ready := sub.finAfterRead && len(sub.readers) == 0 && sub.dataEnded()
	sub.mu.Unlock()
	if ready {
		sub.finNow()
	}
}

// finNow finishes this end's side of the request stream, once.
func (sub *Subscription) finNow() {
	sub.mu.Lock()
	if !sub.finAfterRead {
		sub.mu.Unlock()
		return
	}
	sub.finAfterRead = false
	if sub.finTimer != nil {
		sub.finTimer.Stop()
	}
	sub.mu.Unlock()
	_ = sub.rs.fin()
}

// stopReaders sends STOP_SENDING on every stream of the subscription still
// open, whether or not the application has taken it.
func (sub *Subscription) stopReaders() {
	sub.arrival.abort()
	sub.mu.Lock()
	open := sub.readers
	sub.readers = nil
	code := wire.ResetCancelled
	if sub.stopCode != 0 {
		code = sub.stopCode
	}
	sub.mu.Unlock()
	for r := range open {
		r.stopWith(code)
	}
	sub.stopFills(code)
	for {
		select {
		case r := <-sub.incoming:
			r.stopWith(code)
		default:
			return
		}
	}
}

// forgetFills drops the fills' routes: streams for them that come later
// are stopped (fetch_route.go).
func (sub *Subscription) forgetFills() {
	sub.mu.Lock()
	ids := make([]uint64, 0, len(sub.fill.slots))
	for id := range sub.fill.slots {
		ids = append(ids, id)
	}
	sub.mu.Unlock()
	for _, id := range ids {
		sub.sess.fetches.remove(id)
	}
}

// stopFills stops the subscription's fill streams, taken or not, with
// code, and forgets its fills: the subscription no longer receives.
func (sub *Subscription) stopFills(code wire.ResetCode) {
	sub.mu.Lock()
	open := sub.fill.open
	sub.fill.open = nil
	queued := sub.fill.queue
	sub.fill.queue = nil
	sub.mu.Unlock()
	sub.forgetFills()
	for r := range open {
		r.stop(code)
	}
	for _, f := range queued {
		f.data.r.stop(code)
	}
}

// stopUntakenFills stops the fill streams still queued once the data
// plane has ended for good, unless ReadObject reads the fills: its reader
// takes every queued one at the end, and reports each.
func (sub *Subscription) stopUntakenFills() {
	sub.mu.Lock()
	var queued []*Fetch
	if sub.fill.mode != fillByRead {
		queued, sub.fill.queue = sub.fill.queue, nil
	}
	sub.mu.Unlock()
	for _, f := range queued {
		f.data.r.stop(wire.ResetCancelled)
	}
}

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
}

// lastData is when data of the subscription last came: a stream arrived
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
