package moqt

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// LocalTrack is a track this endpoint publishes (§2.4). It holds the
// track's Largest Object and Track Properties and serves every Established
// subscription to it, in any number of sessions: each object written
// through it goes once to every subscription whose filters it passes
// (§3.3.3), a copy for each even when they share a Track Alias.
//
// A subscription joins the track in one step with the Largest Object its
// answer reports, so it receives every object published after that
// Largest (that its filters pass), and leaves the track as soon as it is
// Terminated, so the track holds no ended subscription (nor, through it,
// its session).
type LocalTrack struct {
	name     wire.FullTrackName
	props    wire.KVList
	priority uint8 // DEFAULT_PUBLISHER_PRIORITY (§10.4)

	// mu guards largest and idle and serializes replacing subs (see the
	// lock order in session.go).
	mu      sync.Mutex
	largest filter.LargestObject
	// idle is closed while no subscription is served; a fresh one is made
	// when the first joins (Idle).
	idle chan struct{}
	// subs lists the subscriptions being served. It is replaced under mu
	// when one joins or ends, never modified in place, so that writers
	// load it without a lock and never visit an ended subscription twice.
	subs atomic.Pointer[[]*ServedSubscription]
	// store is OnObject's function, nil for none.
	store atomic.Pointer[func(Object)]
	// cache is SetCache's, and the End of Track (track_cache.go).
	cache trackCache
	// sent is what the track published, for the Malformed Track checks of
	// what it publishes (malformed.go).
	sent sentCheck
	// fetches are the FETCHes the track serves from its cache, which End
	// resets when it ends the track as Malformed (§12.1).
	fetches fetchAborts
}

// fetchAborts ends the FETCHes a track serves, at once, on its end as a
// Malformed Track: at once, since a cache that drops the track's objects
// right after would otherwise let them end with a FIN.
type fetchAborts struct {
	mu      sync.Mutex // a leaf
	err     error      // set once the track ended as Malformed
	cancels map[*context.CancelCauseFunc]struct{}
}

// add registers the cancel of a FETCH being served; it is called at once
// if the track has ended as Malformed. The returned func unregisters it.
func (a *fetchAborts) add(cancel context.CancelCauseFunc) (remove func()) {
	a.mu.Lock()
	if err := a.err; err != nil {
		a.mu.Unlock()
		cancel(err)
		return func() {}
	}
	if a.cancels == nil {
		a.cancels = map[*context.CancelCauseFunc]struct{}{}
	}
	a.cancels[&cancel] = struct{}{}
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		delete(a.cancels, &cancel)
		a.mu.Unlock()
	}
}

// abort cancels, with err, every FETCH registered and those to come.
func (a *fetchAborts) abort(err error) {
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		return
	}
	a.err = err
	cancels := a.cancels
	a.cancels = nil
	a.mu.Unlock()
	for c := range cancels {
		(*c)(err)
	}
}

// The lock order, the publisher's side included, is in session.go (// Lock order:).

// defaultPublisherPriority is the publisher priority of a track that does
// not set DEFAULT_PUBLISHER_PRIORITY (§10.4).
const defaultPublisherPriority = 128

// NewLocalTrack returns a track named name with Track Properties props,
// which it copies and orders by type, as the wire encodes them (§8.3).
// Properties no peer may accept are refused with an error: a value of the
// wrong form for its type, a malformed IMMUTABLE_PROPERTIES, and values
// out of their property's range (§10).
func NewLocalTrack(name wire.FullTrackName, props wire.KVList) (*LocalTrack, error) {
	if err := name.Namespace.Validate(len(name.Name)); err != nil {
		return nil, err
	}
	props, err := localTrackProperties(props)
	if err != nil {
		return nil, err
	}
	t := &LocalTrack{name: name, props: props, priority: defaultPublisherPriority}
	if kv, ok := props.Lookup(wire.PropDefaultPublisherPriority); ok {
		t.priority = uint8(kv.Value)
	}
	return t, nil
}

// Name is the track's Full Track Name.
func (t *LocalTrack) Name() wire.FullTrackName { return t.name }

// Largest returns the track's Largest Object (§3.1.3): the larger of the
// largest Location published through the track and what SetLargest
// reported.
func (t *LocalTrack) Largest() (wire.Location, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.largest.Get()
}

// SetLargest records l, the Largest Object learnt from upstream: a relay
// reports the upstream's Largest Object even for objects it has not
// forwarded (§9.7). The track's Largest Object is the larger of l and what
// it published; a smaller l changes nothing. It is what SUBSCRIBE_OK,
// PUBLISH and TRACK_STATUS then report and what a new subscription's
// Location filter resolves against, and that subscription receives the
// objects published after it.
func (t *LocalTrack) SetLargest(l wire.Location) {
	t.mu.Lock()
	t.largest.Update(l)
	if c := t.cache.c.Load(); c != nil {
		c.Unknown(l) // objects the track never carried
	}
	t.mu.Unlock()
}

// OnObject sets f to be called with every object published through the
// track: each written by its SubgroupWriters (status objects included)
// and each sent with WriteDatagram, whether or not any subscription takes
// it; a cache that serves FETCH stores them here. A streamed object
// (BeginObject) is passed once complete, one closed short not at all. f
// runs on the writer's goroutine, while the writer waits, and may be
// called from several writers at once: it must be quick and safe for
// concurrent use, and must not write to the same SubgroupWriter, which
// it holds up meanwhile. The Object's Payload and Properties are valid only
// during the call, since the writer reuses them: f copies what it keeps.
// While f is set, a streamed object's payload is gathered in memory to be
// passed whole, so objects streamed to a track with f cost their size.
// A nil f removes the function.
func (t *LocalTrack) OnObject(f func(Object)) {
	if f == nil {
		t.store.Store(nil)
		return
	}
	t.store.Store(&f)
}

// Idle returns a channel that is closed once no subscription to the track
// is being served: at once when none is now, or when the last one served
// now ends. A relay waits on it to cancel its upstream subscription. Once
// a subscription joins, Idle returns a fresh channel for the next time the
// track has none, so a track that goes idle again and again signals each
// time to callers of Idle after the subscription joined.
func (t *LocalTrack) Idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idle == nil {
		t.idle = make(chan struct{})
		if len(t.snapshot()) == 0 {
			close(t.idle)
		}
	}
	return t.idle
}

// Accept answers a SUBSCRIBE for this track with SUBSCRIBE_OK, reporting
// the Largest Object and the Track Properties, and starts serving the
// subscription. The subscription receives every object published after the
// Largest Object its SUBSCRIBE_OK reports; the first of them may reach the
// subscriber before the SUBSCRIBE_OK does, which it buffers (§3.1.2).
//
// A SUBSCRIBE for another track is answered with REQUEST_ERROR
// DOES_NOT_EXIST and Accept fails: serving it this track's objects would
// give them the wrong name (§2.4).
func (t *LocalTrack) Accept(r *SubscribeRequest, opts AcceptOptions) (*ServedSubscription, error) {
	if !r.Track.Equal(t.name) {
		_ = r.Reject(wire.ReqDoesNotExist, "no such track")
		return nil, fmt.Errorf("moqt: SUBSCRIBE for %v accepted by the LocalTrack of %v", r.Track, t.name)
	}
	props := t.props
	if p := r.Params.IncludeProperties; p.Set && !p.Value {
		props = nil // §9.20.22
	}
	return r.accept(opts, props, func(ss *ServedSubscription) (wire.Opt[wire.Location], error) {
		largest, err := t.join(ss, true)
		return largest.Param(), err
	})
}

// Publish offers the track to the peer of s with PUBLISH (§9.8) and serves
// the subscription. Objects start flowing at once, before PUBLISH_OK
// (§3.1), up to Config.MaxEarlyObjects of them, unless params sets
// FORWARD to 0; the rest wait for the answer. LARGEST_OBJECT is added to
// params when anything has been published (§9.20.18), and the subscription
// receives every object published after it. A REQUEST_ERROR is returned
// as *RequestError.
//
// opts apply as in Accept: OnUpdate sees the subscriber's REQUEST_UPDATEs,
// and a positive Expires is sent as the PUBLISH's EXPIRES in place of
// params.Expires (either way the subscription ends when it passes, unless
// an update extends it).
func (t *LocalTrack) Publish(ctx context.Context, s *Session, params wire.Params, opts AcceptOptions) (*ServedSubscription, error) {
	return t.publish(ctx, s, params, t.props, wire.Params{}, opts)
}

// PublishTracks offers the track with PUBLISH, as Publish does, as one of
// the results of a SUBSCRIBE_TRACKS on s whose parameters are req (those
// of its NamespaceWriter, NamespaceWriter.Params): they are the initial
// parameters of the subscription (§9.18.1).
//
//   - FORWARD, SUBSCRIBER_PRIORITY, GROUP_ORDER, LOCATION_FILTER and the
//     delivery timeouts go in the PUBLISH, which tells the subscriber of
//     them (§9.8). The request's AUTHORIZATION_TOKENs never do (§9.20.3).
//     On draft 19, whose PUBLISH carries FORWARD alone, the others are the
//     subscription's all the same, unsent, until the subscriber's
//     PUBLISH_OK gives its own (19 §10.19.1, draftRules.unsentInPublish).
//   - The object Range filters (SUBGROUP_, OBJECTID_, PRIORITY_ and
//     OBJECT_PROPERTY_FILTER), which PUBLISH cannot carry (§3.3.2), are
//     the subscription's filters all the same: only objects that pass
//     them are sent (§3.3.3), and the subscriber's REQUEST_UPDATEs replace
//     or remove them as a SUBSCRIBE's. A moqt subscriber holds them on its
//     end too (Session.SubscribeTracks).
//   - INCLUDE_PROPERTIES 0 sends the PUBLISH with no Track Properties
//     (§9.20.22).
//   - The TRACK_PROPERTY_FILTERs choose the tracks (NamespaceWriter.Wants).
//     NEW_GROUP_REQUEST is the application's to act on, as on a SUBSCRIBE
//     (§9.20.20). RENDEZVOUS_TIMEOUT, about a SUBSCRIBE waiting for a
//     publisher (§9.20.7), has nothing to apply to.
//   - FILL_PARAMETERS fail with ErrFillOnTracks, before anything is sent:
//     no fill is defined for a subscription PUBLISH starts (§3.4). The
//     library refuses such a SUBSCRIBE_TRACKS before the Handler sees it.
//
// Range filters past this end's Config.MaxFilterRanges fail with the
// *RequestError INVALID_FILTER, before anything is sent.
func (t *LocalTrack) PublishTracks(ctx context.Context, s *Session, req wire.Params, opts AcceptOptions) (*ServedSubscription, error) {
	if req.FillParameters != nil {
		return nil, ErrFillOnTracks
	}
	ranges := objectRangeFilters(req.RangeFilters)
	if err := checkRanges(&wire.Params{RangeFilters: ranges}, s.cfg.MaxFilterRanges); err != nil {
		return nil, err
	}
	params := wire.Params{
		ObjectDeliveryTimeout:   req.ObjectDeliveryTimeout,
		SubgroupDeliveryTimeout: req.SubgroupDeliveryTimeout,
		Forward:                 req.Forward,
		SubscriberPriority:      req.SubscriberPriority,
		LocationFilter:          req.LocationFilter,
		GroupOrder:              req.GroupOrder,
	}
	unsent := s.rules.unsentInPublish(&params)
	unsent.RangeFilters = ranges
	props := t.props
	if p := req.IncludeProperties; p.Set && !p.Value {
		props = nil // §9.20.22
	}
	return t.publish(ctx, s, params, props, unsent, opts)
}

// publish is Publish with props as the PUBLISH's Track Properties and
// unsent, parameters PUBLISH does not carry (the object Range filters, and
// on draft 19 what unsentInPublish leaves out), as the subscription's
// all the same.
func (t *LocalTrack) publish(ctx context.Context, s *Session, params wire.Params, props wire.KVList,
	unsent wire.Params, opts AcceptOptions) (*ServedSubscription, error) {
	if opts.Expires > 0 {
		params.Expires = wire.Some(uint64(max(opts.Expires.Milliseconds(), 1)))
	}
	ss, err := s.startPublish(ctx, t.name, params, props, func(ss *ServedSubscription) (wire.Opt[wire.Location], error) {
		// Set before the PUBLISH is written, so before the update
		// worker starts; the ranges before join makes the filter.
		ss.onUpdate = opts.OnUpdate
		ss.mu.Lock()
		holdUnsent(&ss.params, &unsent)
		ss.mu.Unlock()
		largest, err := t.join(ss, false)
		return largest.Param(), err
	})
	if err != nil {
		return nil, err
	}
	if err := ss.awaitPublishOK(ctx); err != nil {
		return nil, err
	}
	return ss, nil
}

// Status answers a TRACK_STATUS for this track with its Largest Object and
// Track Properties (§9.13).
func (t *LocalTrack) Status(r *TrackStatusRequest) error {
	largest, known := t.Largest()
	l := wire.Opt[wire.Location]{Value: largest, Set: known}
	return r.Accept(l, t.props)
}

// join starts serving ss, which its answer (SUBSCRIBE_OK, or this end's
// PUBLISH) has not reported yet: establish moves a SUBSCRIBE's
// subscription to Established. In one step under t.mu, ss's filter
// resolves against the Largest Object, which join returns for the answer
// to report, and ss joins the list writers deliver to. Every object whose
// first byte is published after that (a larger Location, §3.1.3) finds ss
// in the list. Nothing here does network I/O.
func (t *LocalTrack) join(ss *ServedSubscription, establish bool) (filter.LargestObject, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	largest := t.largest
	// Stored before the state is checked, so that a termination racing
	// this either sees the track and leaves it, or is seen here.
	ss.local.Store(t)
	if establish {
		if err := ss.establish(); err != nil {
			return largest, endedAsAccepted(ss.Err(), err)
		}
	} else if ss.current() == stateTerminated {
		return largest, ss.Err()
	}
	if l, ok := largest.Get(); ok {
		ss.setLargest(l)
	}
	ss.attachTrack(t, largest)
	subs := t.snapshot()
	if len(subs) == 0 {
		t.idle = nil // made afresh, open, by the next Idle
	}
	next := make([]*ServedSubscription, len(subs), len(subs)+1)
	copy(next, subs)
	next = append(next, ss)
	t.subs.Store(&next)
	return largest, nil
}

// leave stops serving ss: it is Terminated.
func (t *LocalTrack) leave(ss *ServedSubscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	subs := t.snapshot()
	i := slices.Index(subs, ss)
	if i < 0 {
		return
	}
	// A fresh slice: writers may be iterating the old one.
	next := make([]*ServedSubscription, 0, len(subs)-1)
	next = append(next, subs[:i]...)
	next = append(next, subs[i+1:]...)
	t.subs.Store(&next)
	if len(next) == 0 && t.idle != nil {
		close(t.idle)
	}
}

// snapshot returns the subscriptions being served, without a lock: the
// list is never modified in place. Subscriptions leave it when they
// terminate, so one may still be in a list a writer is iterating.
func (t *LocalTrack) snapshot() []*ServedSubscription {
	if p := t.subs.Load(); p != nil {
		return *p
	}
	return nil
}

// noteObject records that an object at l starts being published: Largest
// Object moves when the first byte of a larger Location is published
// (§3.1.3). The subscriptions read it from the track when they report it.
func (t *LocalTrack) noteObject(l wire.Location) {
	t.mu.Lock()
	prev, known := t.largest.Get()
	t.largest.Update(l)
	t.begun(l)
	t.mu.Unlock()
	t.groupBegun(prev, known, l)
}

// groupBegun tells the subscriptions when an object at l starts a group
// past the Largest Object prev (known) that was: those whose filter ends
// before it may end (endIfPast). t.mu is not held.
func (t *LocalTrack) groupBegun(prev wire.Location, known bool, l wire.Location) {
	if known && prev.Group >= l.Group {
		return
	}
	for _, ss := range t.snapshot() {
		ss.endIfPast(l.Group)
	}
}

// End ends every subscription to the track with PUBLISH_DONE code (§9.9),
// TRACK_ENDED for a track that is over. Subgroups still open are reset
// first, as their streams would otherwise read as complete (§9.9). The subscriptions end in parallel, so a subscriber that
// does not read its request stream delays no other; End returns once
// each PUBLISH_DONE is written or, past Config.PublishDoneTimeout, its
// request stream reset. A session whose draft lacks code gets the nearest
// code it has (SUBSCRIPTION_ENDED is INTERNAL_ERROR from draft 20 on).
// With MALFORMED_TRACK, the FETCHes the track serves from its cache
// (Fetch), now and later, are reset with MALFORMED_TRACK too (§12.1).
func (t *LocalTrack) End(code wire.PublishDoneCode, reason string) {
	if code == wire.DoneMalformedTrack {
		// "reset any fetch streams with Status Code MALFORMED_TRACK"
		// (§12.1): the FETCHes served from the track's cache too.
		t.fetches.abort(&MalformedTrackError{Reason: reason})
	}
	var wg sync.WaitGroup
	for _, ss := range t.snapshot() {
		wg.Go(func() { _ = ss.End(ss.sess.rules.doneCode(code), reason) })
	}
	wg.Wait()
}

// WriteDatagram sends o as a datagram to every subscription whose filters
// it passes (§3.3.3). A datagram larger than the path allows is
// dropped by the transport without notice (§11.2); the error reports it.
// A subscription whose delivery timeout passes before its copy reaches the
// transport (the transport's queue can block the loop) does not get it
// (§5.2).
//
// o's Subgroup ID must be 0, as datagrams have none; its Datagram field
// need not be set. A status datagram (§11.2.1) has no payload, properties
// or END_OF_GROUP. Object Properties are refused as WriteObject refuses
// them. WriteDatagram does not keep o's slices once it returns.
func (t *LocalTrack) WriteDatagram(o Object) error {
	start := o.arrived // a relayed object's timeouts run from its receipt (§5.2)
	if start == 0 {
		start = mono.Now()
	}
	if o.SubgroupID != 0 {
		return fmt.Errorf("moqt: datagram object with Subgroup ID %d", o.SubgroupID)
	}
	loc := o.Location
	prio := t.priority
	if o.Priority.Set {
		prio = o.Priority.Value
	}
	d := wire.ObjectDatagram{
		GroupID:         loc.Group,
		ObjectID:        loc.Object,
		EndOfGroup:      o.EndOfGroup,
		DefaultPriority: !o.Priority.Set,
		Priority:        o.Priority.Value,
		Properties:      o.Properties,
		HasStatus:       o.Status != wire.ObjectNormal,
		Status:          o.Status,
		Payload:         o.Payload,
	}
	// Checked before anything is published: encoding fails only for what
	// §11.2.1 forbids, whatever the alias.
	buf, err := d.Append(nil)
	if err != nil {
		return err
	}
	if err := t.checkSent(loc, 0, true, o.Properties); err != nil {
		return err
	}
	t.noteObject(loc)
	o.Priority, o.Datagram = wire.Some(prio), true
	t.published(o, false)
	timeouts := trackTimeouts(t.props).withObjectProperties(o.Properties)
	if o.arrived != 0 {
		if w := cacheWindow(t.props); w != 0 && time.Duration(mono.Now()-o.arrived) >= w {
			return nil // past its MAX_CACHE_DURATION: not to be forwarded (§10.3)
		}
	}
	meta := filter.Object{Location: loc, Datagram: true, PublisherPriority: prio, Properties: o.Properties}
	var firstErr error
	for _, ss := range t.snapshot() {
		v := ss.dataView()
		if ss.admit(v, meta) != admitSend || datagramLate(start, timeouts, v.dp) {
			continue
		}
		d.TrackAlias = ss.alias
		b, err := d.Append(buf[:0])
		if err != nil {
			return err
		}
		buf = b
		if err := ss.sess.conn.SendDatagram(b); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// SubgroupOptions shape a subgroup's streams (§2.2, §11.3.1).
type SubgroupOptions struct {
	// Priority is the Publisher Priority of the subgroup. Unset, the
	// header omits it and the subgroup inherits the track's
	// DEFAULT_PUBLISHER_PRIORITY (the DEFAULT_PRIORITY flag).
	Priority wire.Opt[uint8]
	// EndOfGroup marks the subgroup that holds the group's largest object,
	// so a FIN tells the subscriber the group is complete.
	EndOfGroup bool
	// SubgroupIDIsFirstObject encodes the Subgroup ID as the ID of the
	// subgroup's first object (SUBGROUP_ID_MODE 1); the first object
	// written must then have the Subgroup ID as its Object ID.
	SubgroupIDIsFirstObject bool
	// Properties allows Object Properties on this subgroup's objects (the
	// PROPERTIES flag: every object then carries a properties block).
	Properties bool
	// Joined says the first object written is not the first ever
	// published in the subgroup, as for a relay that joined it late: no
	// stream then carries FIRST_OBJECT (§2.2).
	Joined bool
}

// OpenSubgroup starts publishing subgroup subgroup of group. Streams open
// lazily, per subscription, when an object passes its filters.
func (t *LocalTrack) OpenSubgroup(group, subgroup uint64, opts SubgroupOptions) *SubgroupWriter {
	w := &SubgroupWriter{track: t, group: group, subgroup: subgroup, opts: opts,
		trackOrder: trackGroupOrder(t.props), timeouts: trackTimeouts(t.props), cacheWindow: cacheWindow(t.props),
		outs: map[*ServedSubscription]*subgroupOut{}}
	w.sq.Init(mono.Now)
	first := uint64(0)
	if opts.SubgroupIDIsFirstObject {
		first = subgroup
	}
	t.openCached(w, first)
	return w
}
