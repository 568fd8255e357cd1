package moqt

// The receiving side of a subscription: what the session hands it (subgroup
// streams, datagrams and fill fetch streams, session_data.go and
// fetch_route.go), the filters that decide what belongs to it, and the end
// of its data plane (the linger after PUBLISH_DONE, a Malformed Track).

import (
	"bufio"
	"fmt"
	"sync"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// subData is the data-plane state of a Subscription: the streams and
// datagrams routed to it, its copy of the filters (to tell which of several
// subscriptions sharing an alias an object belongs to, §3.1), and how long
// it keeps receiving after PUBLISH_DONE (§9.9).
type subData struct {
	incoming  chan *SubgroupReader // streams not yet taken by AcceptSubgroup
	datagrams datagramRing         // datagrams not yet taken by ReadDatagram
	// dataDone is closed when the subscription stops receiving objects and
	// its alias is released.
	dataDone    chan struct{}
	releaseOnce sync.Once

	// Guarded by Subscription.mu.
	readers     map[*SubgroupReader]struct{} // delivered streams not yet ended
	filter      *filter.Filter
	superseded  []supersededFilter // filters updates replaced, newest last
	streamsSeen uint64
	// doneShort, set once by lingerExpired, is the PUBLISH_DONE's error
	// with DoneError.Missing counting the streams that never came: what
	// Err returns from then on.
	doneShort *DoneError
	linger    *time.Timer // ends the data plane after PUBLISH_DONE
	// dataAt is when a stream of the subscription last arrived or ended
	// (mono.Now): with its open streams' reads, what says data still
	// comes (lastData).
	dataAt int64
	expiry *time.Timer // cancels when the EXPIRES this end granted passes
	// stopCode, when set, is the STOP_SENDING code on the data streams
	// instead of CANCELLED: MALFORMED_TRACK when a Malformed Track
	// cancelled the subscription, EXCESSIVE_LOAD when it fell behind
	// (subscription_stall.go). INTERNAL_ERROR, the zero value, is never used
	// here.
	stopCode wire.ResetCode
	// stallTimer runs the stall watchdog while streams are open
	// (subscription_stall.go).
	stallTimer *time.Timer
	// stall is the stall watchdog's clock, and when the application last
	// took or read one of the subscription's streams (subscription_stall.go).
	stall stallClock

	// checks is what the subscription has seen of its track, to detect a
	// Malformed Track (malformed.go). It has its own lock.
	checks trackCheck
	// arrival reads the objects for Subscription.ReadObject
	// (subscription_arrival.go). It has its own lock.
	arrival arrival
}

// errExpired ends a subscription whose granted EXPIRES passed.
var errExpired = fmt.Errorf("%w: EXPIRES passed", ErrCancelled)

// Queue sizes: streams wait unread beyond this (flow control pushes back);
// datagrams beyond it drop the oldest, counted.
const (
	incomingStreamQueue = 32
	datagramQueue       = 256
)

func (sub *Subscription) initData() {
	sub.updates = newUpdateQueue(sub.rs, &sub.mu, sub.done, sub.Err)
	sub.incoming = make(chan *SubgroupReader, incomingStreamQueue)
	sub.datagrams.init()
	sub.dataDone = make(chan struct{})
}

// dataEnded reports whether the subscription has stopped receiving
// streams and datagrams.
func (sub *Subscription) dataEnded() bool {
	select {
	case <-sub.dataDone:
		return true
	default:
		return false
	}
}

// deliverStream hands a subgroup stream to the subscription's reader,
// waiting while its queue is full: the stream stays unread meanwhile, so
// QUIC flow control pushes back on the publisher. It reports false, with
// the stream untouched, when the subscription stopped receiving first.
func (sub *Subscription) deliverStream(r *SubgroupReader) bool {
	if r.err == nil {
		sub.trackReader(r)
	}
	// A free slot is always taken first: a stream is counted for
	// PUBLISH_DONE only once delivered, so the data plane cannot end while
	// a counted stream waits for a slot. Once the data plane has ended,
	// nothing is queued any more.
	select {
	case <-sub.dataDone:
		// Not taken: the caller routes it elsewhere or stops it.
		sub.forgetReader(r)
		return false
	default:
	}
	select {
	case sub.incoming <- r:
	default:
		select {
		case sub.incoming <- r:
			select {
			case <-sub.dataDone:
				// Both were ready: stopped like the rest below.
			default:
			}
		case <-sub.dataDone:
			sub.forgetReader(r)
			return false
		case <-sub.sess.ctx.Done():
			return true
		}
	}
	sub.mu.Lock()
	sub.streamsSeen++
	sub.dataAt = mono.Now()
	finished := sub.finished != nil
	sub.mu.Unlock()
	select {
	case <-sub.dataDone:
		if !finished {
			// Cancelled here as the stream went in: endData may have
			// drained the queue before it, and nobody would stop it.
			sub.stopReaders()
		}
	default:
	}
	sub.noteStream()
	return true
}

// deliverDatagram queues a datagram for ReadDatagram. When the queue is
// full the oldest datagram is dropped and counted: datagrams are unreliable
// by design (§11.2), but never dropped without a trace.
//
// A datagram that reveals a Malformed Track is dropped (C023) and the
// subscription cancelled (§12.1, C022).
func (sub *Subscription) deliverDatagram(d wire.ObjectDatagram) {
	if e := sub.checks.datagram(&d); e != nil {
		sub.malformedTrack(e)
		return
	}
	obj := Object{
		Location:   wire.Location{Group: d.GroupID, Object: d.ObjectID},
		Priority:   wire.Some(d.Priority),
		Status:     d.Status,
		Properties: d.Properties,
		Payload:    d.Payload,
		Datagram:   true,
		EndOfGroup: d.EndOfGroup,
		arrived:    mono.Now(),
	}
	if d.DefaultPriority {
		obj.Priority.Value = sub.publisherPriority()
	}
	if !sub.accepts(filter.Object{Location: obj.Location, Datagram: true, PublisherPriority: obj.Priority.Value, Properties: obj.Properties}) {
		return // held before its alias was known, and not this subscription's
	}
	sub.datagrams.push(obj)
}

// askFillLocked registers a fill asked for by the message with Request ID
// id, before it is sent, and after a REQUEST_UPDATE is queued in
// sub.updates. sub.mu is held.
func (sub *Subscription) askFillLocked(id uint64, p *wire.Params) *fillSlot {
	if sub.fill.slots == nil {
		sub.fill.slots = map[uint64]*fillSlot{}
	}
	slot := &fillSlot{id: id, params: p, base: sub.params}
	for _, u := range sub.updates.pending {
		mergeParams(&slot.base, u.params)
	}
	sub.fill.slots[id] = slot
	sub.sess.fetches.add(id, sub)
	return slot
}

// takeFetchStream is the route of the subscription's fill streams.
func (sub *Subscription) takeFetchStream(r *fetchStream) bool {
	sub.mu.Lock()
	slot := sub.fill.slots[r.id]
	// Checked under sub.mu: endData closes dataDone before stopFills
	// takes the lock, so a stream queued here is always stopped with the
	// rest.
	if slot == nil || slot.arrived || sub.dataEnded() {
		sub.mu.Unlock()
		return false
	}
	slot.arrived = true
	if !sub.fill.joinID.Set || sub.fill.joinID.Value != r.id {
		// A fill stream is one of the subscription's data streams, which
		// PUBLISH_DONE's Stream Count includes (§9.9); a Joining FETCH's
		// answers a request of its own (18 §10.12).
		sub.streamsSeen++
		sub.dataAt = mono.Now()
		defer sub.noteStream()
	}
	if !sub.fill.started && !sub.byPublish {
		// Before SUBSCRIBE_OK: held, within Config.MaxPendingStreams.
		// Beyond it the stream is stopped, and still queued, ended, so
		// that the fill's reader learns of its end at once rather than
		// waiting for it.
		if r.hold = reserveHold(sub.sess); r.hold == nil {
			r.err = errHeldStreams
			defer r.stop(wire.ResetExcessiveLoad) // after sub.mu is released
		}
	}
	defer sub.mu.Unlock()
	sub.queueFillLocked(slot, r)
	return true
}

// queueFillLocked queues the fill stream r of slot for AcceptFill or
// ReadObject. sub.mu is held.
func (sub *Subscription) queueFillLocked(slot *fillSlot, r *fetchStream) {
	f := &Fetch{sess: sub.sess}
	f.data.init()
	f.data.r, f.data.answered = r, true
	close(f.data.ready)
	f.data.window, f.data.desc = slot.window, slot.desc
	if slot.id != sub.fill.initialID(sub.rs.id) {
		f.data.window, f.data.desc = fillWindowLocked(sub, slot, false)
	}
	f.data.malformed = sub.malformedTrack
	f.data.track = &sub.checks
	r.watch.clock = &sub.stall
	r.watch.touched.Store(sub.stall.now())
	r.onEnd = func() { sub.fillEnded(r) }
	if sub.fill.open == nil {
		sub.fill.open = map[*fetchStream]bool{}
	}
	sub.fill.open[r] = true
	sub.watchStallsLocked()
	sub.fill.queue = append(sub.fill.queue, f)
	if sub.fill.signal != nil {
		close(sub.fill.signal)
		sub.fill.signal = nil
	}
}

// startFill applies SUBSCRIBE_OK to the initial fill: whether one comes
// (Forward 1 and a fill range that is not empty, §3.4, §3.4.1), its range,
// and how long ReadObject waits for it; held streams are released.
func (sub *Subscription) startFill() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.fill.started = true
	slot := sub.fill.slots[sub.fill.initialID(sub.rs.id)]
	if slot == nil || sub.byPublish {
		return
	}
	w, desc := fillWindowLocked(sub, slot, true)
	slot.desc = desc
	if forwardOf(&sub.params) && !w.Empty() && sub.largest.Set {
		slot.window = w
		slot.deadline = time.Now().Add(sub.sess.cfg.FillWait)
		sub.fill.initial = slot
		if slot.joinErr != nil && !slot.arrived {
			sub.failFillLocked(slot, slot.joinErr) // its Joining FETCH failed
		}
	}
	for _, f := range sub.fill.queue {
		f.data.mu.Lock()
		if f.data.r.id == slot.id {
			f.data.window, f.data.desc = slot.window, slot.desc
		}
		f.data.r.hold.release()
		f.data.mu.Unlock()
	}
}

// fillEnded forgets a fill stream that ended.
func (sub *Subscription) fillEnded(r *fetchStream) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	delete(sub.fill.open, r)
}

// accepts reports whether a received object belongs to the subscription:
// it passes the subscription's filters (§3.3.3), those an outstanding
// REQUEST_UPDATE asks for, or those an update lately replaced (see
// passesLocked). Every received object is checked, whether or not the
// alias is shared: a publisher sends nothing outside the filters (§3.3.1),
// so what fails them all is a late object of an ended subscription that
// had the same alias (§3.1.2), or one sent under a filter replaced long
// ago, and neither belongs to this one.
//
// The exception is a Location filter that is the publisher's: it may widen
// it with PUBLISH_STATE_NOTIFY, and objects sent under the wider filter
// can arrive, on new streams, before the notify does. Those belong to the
// subscription (§9.20.10: the notify reports the filter "now in effect at
// the publisher"), so only the range filters, which are this end's, are
// checked then.
func (sub *Subscription) accepts(meta filter.Object) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.publisherLocationLocked() {
		return sub.passesLocked(func(f *filter.Filter) bool { return f.MatchesRanges(meta) })
	}
	return sub.passesLocked(func(f *filter.Filter) bool { return f.Covers(meta) })
}

// publisherLocationLocked reports whether the subscription's Location
// filter is the publisher's to change. sub.mu is held.
func (sub *Subscription) publisherLocationLocked() bool {
	return sub.byPublish && !sub.ownLocation
}

// acceptsGroup reports whether a subgroup stream of group that carries no
// object belongs to the subscription: some object of group can pass its
// filters or those of an outstanding update.
func (sub *Subscription) acceptsGroup(group uint64) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.publisherLocationLocked() {
		return true
	}
	return sub.passesLocked(func(f *filter.Filter) bool {
		w := f.Window()
		return !w.Empty() && w.Start.Group <= group && (!w.Bounded || group <= w.End.Group)
	})
}

// passesLocked reports whether pass holds for the subscription's filter,
// for the one an outstanding REQUEST_UPDATE would make, or for one an
// update replaced within Config.AliasWait: objects the publisher sent
// before it processed the update may still be arriving (§9.5.1). sub.mu is
// held.
func (sub *Subscription) passesLocked(pass func(*filter.Filter) bool) bool {
	if sub.filter == nil || pass(sub.filter) {
		return true
	}
	for _, u := range sub.updates.pending {
		if u.filter != nil && pass(u.filter) {
			return true
		}
	}
	now := time.Now()
	for _, old := range sub.superseded {
		if now.Before(old.until) && pass(old.f) {
			return true
		}
	}
	return false
}

// supersededFilter is a filter an update replaced, still honoured until
// the objects sent under it have had time to arrive.
type supersededFilter struct {
	f     *filter.Filter
	until time.Time
}

// maxSupersededFilters bounds subData.superseded: updates in quicker
// succession than Config.AliasWait keep only the newest ones.
const maxSupersededFilters = 4

// supersedeLocked keeps a copy of the filter an update is about to
// change. sub.mu is held.
func (sub *Subscription) supersedeLocked() {
	now := time.Now()
	kept := sub.superseded[:0]
	for _, old := range sub.superseded {
		if now.Before(old.until) {
			kept = append(kept, old)
		}
	}
	if len(kept) == maxSupersededFilters {
		kept = append(kept[:0], kept[1:]...)
	}
	f := *sub.filter // Update replaces, never mutates, what a copy shares
	sub.superseded = append(kept, supersededFilter{f: &f, until: now.Add(sub.sess.cfg.AliasWait)})
}

// updatedFilterLocked returns the filter the subscription will have once
// the REQUEST_UPDATE carrying p is accepted, resolved against the Largest
// Object known now. sub.mu is held.
func (sub *Subscription) updatedFilterLocked(p *wire.Params) *filter.Filter {
	if sub.filter == nil {
		return nil
	}
	f := *sub.filter // Update replaces, never mutates, what a copy shares
	_ = f.Update(p, largestOf(sub.largest), ^uint64(0))
	return &f
}

// updateFilterLocked applies changed parameters to the routing filter.
// sub.mu is held.
func (sub *Subscription) updateFilterLocked(p *wire.Params) {
	if sub.filter != nil {
		sub.supersedeLocked()
		sub.notePartialFinsLocked()
		_ = sub.filter.Update(p, largestOf(sub.largest), ^uint64(0))
		sub.notePartialFinsLocked()
	}
}

// notePartialFinsLocked records, for good, that the filter lets the
// publisher end a subgroup's stream with a FIN before its last object
// (Filter.CutsSubgroups): such FINs are not final objects (malformed.go).
// sub.mu is held.
func (sub *Subscription) notePartialFinsLocked() {
	if sub.filter.CutsSubgroups() {
		sub.checks.partialFins.Store(true)
	}
}

// partialFins reports whether a FIN on one of the subscription's streams
// may have come before the subgroup's last object (malformed.go).
func (sub *Subscription) partialFins() bool {
	if sub.checks.partialFins.Load() {
		return true
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.filter.CutsSubgroups()
}

// release ends the subscription's data plane once it has terminated. After
// PUBLISH_DONE the alias stays bound until every stream it counted has
// arrived or Config.DoneLinger has passed, so late streams are still
// delivered (§9.9); otherwise it ends at once.
func (sub *Subscription) release() {
	sub.mu.Lock()
	d := sub.finished
	lingering := d != nil && d.StreamCount != 0 && (d.StreamCount == ^uint64(0) || sub.streamsSeen < d.StreamCount)
	if lingering && sub.linger == nil {
		sub.linger = sub.whenQuiet(sub.dataEnded, sub.lingerExpired)
	}
	sub.mu.Unlock()
	if !lingering {
		sub.endData()
	}
}

// lingerExpired drops the subscription's state when not every stream
// PUBLISH_DONE counted arrived in time: streams still waiting to be taken,
// subgroup or fill, are stopped (STOP_SENDING, §9.9); streams the
// application holds stay its own. The streams that never came are
// recorded first (doneShort), so that whoever sees the data plane's end
// sees them.
func (sub *Subscription) lingerExpired() {
	sub.mu.Lock()
	if d := sub.finished; d != nil && d.StreamCount != unknownStreamCount && sub.streamsSeen < d.StreamCount && !sub.dataEnded() {
		short := *d // d was handed out already: a copy, never a change
		short.Missing = d.StreamCount - sub.streamsSeen
		sub.doneShort = &short
	}
	sub.mu.Unlock()
	sub.endData()
	sub.stopUntakenFills()
	for {
		select {
		case r := <-sub.incoming:
			r.stop()
			sub.forgetReader(r)
		default:
			return
		}
	}
}

// streamsMissing is the error of ReadObject's entry for the streams
// PUBLISH_DONE counted that never came, or nil when none is missing.
func (sub *Subscription) streamsMissing() error {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	d := sub.doneShort
	if d == nil {
		return nil
	}
	return fmt.Errorf("%w: %d of the %d data streams counted", ErrStreamsMissing, d.Missing, d.StreamCount)
}

// noteStream is called for each stream delivered; it ends the linger once
// the last stream PUBLISH_DONE counted has arrived.
func (sub *Subscription) noteStream() {
	sub.mu.Lock()
	d := sub.finished
	all := d != nil && d.StreamCount != ^uint64(0) && sub.streamsSeen >= d.StreamCount
	sub.mu.Unlock()
	if all {
		sub.endData()
	}
}

// endData releases the alias and wakes readers. Streams the application
// never took are stopped (STOP_SENDING, §9.9) when it cancelled the
// subscription itself.
func (sub *Subscription) endData() {
	sub.releaseOnce.Do(func() {
		sub.mu.Lock()
		for _, t := range []*time.Timer{sub.linger, sub.expiry, sub.stallTimer} {
			if t != nil {
				t.Stop()
			}
		}
		finished := sub.finished != nil
		sub.mu.Unlock()
		sub.sess.routes.unbindAlias(sub)
		sub.forgetFills()
		close(sub.dataDone)
		if finished {
			sub.finIfRead()
			return // late streams stay for AcceptSubgroup
		}
		sub.stopReaders()
	})
}

// expireAfter cancels the subscription when the EXPIRES this end granted
// in PUBLISH_OK has passed (§9.20.17).
func (sub *Subscription) expireAfter(d time.Duration) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.expiry = time.AfterFunc(d, func() {
		sub.cancel(errExpired)
	})
}

// malformedTrack cancels, on a Malformed Track, this subscription and
// every other one to the same track on the session, and its FETCHes
// (§12.1, C022).
func (sub *Subscription) malformedTrack(e *MalformedTrackError) {
	sub.cancelMalformed(e)
	sub.sess.malformedTrack(sub.track, e, sub, nil)
}

// cancelMalformed cancels the subscription for a Malformed Track:
// RESET_STREAM and STOP_SENDING on its request stream (§6.4.2.3) and
// STOP_SENDING on its data streams, taken or not, all with
// MALFORMED_TRACK; streams arriving later are refused, even after
// PUBLISH_DONE. §12.5 defines MALFORMED_TRACK for a relay publisher that
// detected a Malformed Track; no code names the subscriber that detects
// one, and this is the relevant code §12.5 asks for (SHOULD) where
// CANCELLED would hide why.
func (sub *Subscription) cancelMalformed(e *MalformedTrackError) {
	sub.mu.Lock()
	sub.stopCode = wire.ResetMalformedTrack
	sub.mu.Unlock()
	sub.cancelWith(e, wire.ResetMalformedTrack)
	sub.endData()
	sub.stopReaders()
}

// joinFailed applies the failure of the Joining FETCH id before its data
// stream came: a REQUEST_ERROR, or the end of its request stream. Before
// SUBSCRIBE_OK it is kept for startFill. A fill SUBSCRIBE_OK made the
// initial one fails as a reset fill does on 21; any other was empty, the
// publisher's INVALID_RANGE its way of saying so (18 §10.12.2), and is
// dropped.
func (sub *Subscription) joinFailed(id uint64, err error) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	slot := sub.fill.slots[id]
	switch {
	case slot == nil || slot.arrived:
		// A data stream that came ends as the publisher ends it.
	case !sub.fill.started:
		slot.joinErr = err
	case sub.fill.initial == slot:
		sub.failFillLocked(slot, err)
	}
}

// failFillLocked queues, for slot, a fill stream that ended with err
// before it opened, so that its reader reports the failure. sub.mu is
// held.
func (sub *Subscription) failFillLocked(slot *fillSlot, err error) {
	if sub.dataEnded() {
		return
	}
	slot.arrived = true
	r := &fetchStream{sess: sub.sess, str: endedStream{}, br: bufio.NewReaderSize(endedStream{}, 16), id: slot.id, err: err}
	sub.queueFillLocked(slot, r)
}
