package moqt

import (
	"context"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// LocalTrack is a track this endpoint publishes (§2.4). It holds the
// track's Largest Object and Track Properties and serves every Established
// subscription to it, in any number of sessions: each object written
// through it goes once to every subscription whose filters it passes
// (C027, C033).
type LocalTrack struct {
	name     wire.FullTrackName
	props    wire.KVList
	priority uint8 // DEFAULT_PUBLISHER_PRIORITY (§10.4)

	mu      sync.Mutex
	largest LargestObject
	// subs is replaced, never modified in place, so writers iterate a
	// snapshot without holding mu.
	subs []*ServedSubscription
}

// DefaultPublisherPriority is the publisher priority of a track that does
// not set DEFAULT_PUBLISHER_PRIORITY (§10.4).
const DefaultPublisherPriority = 128

// NewLocalTrack returns a track named name with Track Properties props.
func NewLocalTrack(name wire.FullTrackName, props wire.KVList) (*LocalTrack, error) {
	if err := name.Namespace.Validate(len(name.Name)); err != nil {
		return nil, err
	}
	t := &LocalTrack{name: name, props: props, priority: DefaultPublisherPriority}
	if kv, ok := props.Get(wire.PropDefaultPublisherPriority); ok && kv.Value <= 255 {
		t.priority = uint8(kv.Value)
	}
	return t, nil
}

// Name is the track's Full Track Name.
func (t *LocalTrack) Name() wire.FullTrackName { return t.name }

// Properties are the Track Properties sent in SUBSCRIBE_OK and PUBLISH.
func (t *LocalTrack) Properties() wire.KVList { return t.props }

// Largest returns the Largest Object published so far (§3.1.3).
func (t *LocalTrack) Largest() (wire.Location, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.largest.Get()
}

// Accept answers a SUBSCRIBE for this track with SUBSCRIBE_OK, reporting
// the Largest Object and the Track Properties, and starts serving the
// subscription. opts.Largest and opts.Properties are filled in by the track.
func (t *LocalTrack) Accept(r *SubscribeRequest, opts AcceptOptions) (*ServedSubscription, error) {
	t.mu.Lock()
	largest := t.largest
	t.mu.Unlock()
	opts.Largest = largest.Param()
	opts.Properties = t.props
	if p := r.Params.IncludeProperties; p.Set && !p.Value {
		opts.Properties = nil // §9.20.22
	}
	ss, err := r.Accept(opts)
	if err != nil {
		return nil, err
	}
	t.attach(ss, largest)
	return ss, nil
}

// Publish offers the track to the peer of s with PUBLISH (§9.8) and serves
// the subscription. Objects start flowing at once, before PUBLISH_OK
// (§3.1), up to Config.MaxEarlyObjects of them, unless params sets
// FORWARD to 0; the rest wait for the answer. LARGEST_OBJECT is added to
// params when anything has been published (C016). A REQUEST_ERROR is
// returned as *RequestError.
func (t *LocalTrack) Publish(ctx context.Context, s *Session, params wire.Params) (*ServedSubscription, error) {
	t.mu.Lock()
	largest := t.largest
	t.mu.Unlock()
	params.LargestObject = largest.Param()
	ss, err := s.startPublish(ctx, t.name, params, t.props)
	if err != nil {
		return nil, err
	}
	t.attach(ss, largest)
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

// attach starts serving a subscription: an Established one, or one of its
// own PUBLISHes still awaiting PUBLISH_OK. Its filter resolves relative
// starts against the Largest Object its answer or PUBLISH reported.
func (t *LocalTrack) attach(ss *ServedSubscription, largest LargestObject) {
	ss.attachTrack(t, largest)
	t.mu.Lock()
	t.subs = append(slices.Clip(t.subs), ss)
	t.mu.Unlock()
}

// snapshot returns the subscriptions being served, pruning terminated
// ones. It allocates only when there is something to prune.
func (t *LocalTrack) snapshot() []*ServedSubscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, ss := range t.subs {
		if ss.State() != StateTerminated {
			continue
		}
		// A fresh slice: writers may be iterating the old one.
		live := make([]*ServedSubscription, i, len(t.subs)-1)
		copy(live, t.subs[:i])
		for _, ss := range t.subs[i+1:] {
			if ss.State() != StateTerminated {
				live = append(live, ss)
			}
		}
		t.subs = live
		break
	}
	return t.subs
}

// noteObject records that an object at l starts being published: Largest
// Object moves when the first byte of a larger Location is published
// (§3.1.3). Every served subscription learns it too.
func (t *LocalTrack) noteObject(l wire.Location) {
	t.mu.Lock()
	moved := t.largest.Update(l)
	subs := t.subs
	t.mu.Unlock()
	if moved {
		for _, ss := range subs {
			ss.SetLargest(l)
		}
	}
}

// End ends every subscription to the track with PUBLISH_DONE code (§9.9),
// TRACK_ENDED for a track that is over. Subgroups still open are reset
// first (C078).
func (t *LocalTrack) End(code wire.PublishDoneCode, reason string) {
	for _, ss := range t.snapshot() {
		_ = ss.Done(code, reason)
	}
}

// DatagramObject is an object to send as an OBJECT_DATAGRAM (§11.2.1).
type DatagramObject struct {
	Group, Object uint64
	// Priority is the Publisher Priority; unset, the datagram inherits the
	// track's default.
	Priority wire.Opt[uint8]
	// Properties is a raw Object Properties block; nil for none.
	Properties []byte
	// Status, when not Normal, makes a status datagram with no payload.
	Status wire.ObjectStatus
	// EndOfGroup says no larger Object ID exists in the group.
	EndOfGroup bool
	Payload    []byte
}

// WriteDatagram sends o as a datagram to every subscription whose filters
// it passes (C027, C033). A datagram larger than the path allows is
// dropped by the transport without notice (§11.2); the error reports it.
// A subscription whose delivery timeout passes before its copy reaches the
// transport (the transport's queue can block the loop) does not get it
// (§5.2).
func (t *LocalTrack) WriteDatagram(o DatagramObject) error {
	start := monoNow()
	timeouts := trackTimeouts(t.props).withObjectProperties(o.Properties)
	loc := wire.Location{Group: o.Group, Object: o.Object}
	t.noteObject(loc)
	prio := t.priority
	if o.Priority.Set {
		prio = o.Priority.Value
	}
	meta := ObjectMeta{Location: loc, Datagram: true, PublisherPriority: prio, Properties: o.Properties}
	d := wire.ObjectDatagram{
		GroupID:         o.Group,
		ObjectID:        o.Object,
		EndOfGroup:      o.EndOfGroup,
		DefaultPriority: !o.Priority.Set,
		Priority:        o.Priority.Value,
		Properties:      o.Properties,
		HasStatus:       o.Status != wire.ObjectNormal,
		Status:          o.Status,
		Payload:         o.Payload,
	}
	var buf []byte
	var firstErr error
	for _, ss := range t.snapshot() {
		if !ss.passes(meta) || datagramLate(start, timeouts, ss.dataParams()) {
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
