package moqt

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/cache"
	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/priority"
	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/wire"
)

// SubgroupWriter publishes the objects of one subgroup (§2.2) to every
// subscription of its track. Each subscription whose filters an object
// passes gets its own stream (§11.3), opened when the first such object is
// written; objects go straight to the QUIC streams, with no goroutine or
// queue in between while the subscribers keep up. A SubgroupWriter is safe
// for concurrent use, though objects are written one at a time, in
// increasing Object ID order.
//
// A write waits on subscribers that take nothing no longer than
// Config.SubscriberGrace (or SetWriteDeadline, if earlier): what a stream
// has not taken by then is queued for it, and a subscription that falls
// too far behind (its queue would pass Config.MaxSubscriberBacklog, or it
// takes nothing for a whole grace) ends with PUBLISH_DONE TOO_FAR_BEHIND,
// its streams reset with TOO_FAR_BEHIND. While every subscriber is behind,
// the publisher goes at the pace of the fastest that makes progress; a
// relay, writing objects it received, waits half a grace at most, so that
// its own publisher does not find it stalled (subgroup_pace.go). Close and
// Reset interrupt a write in progress.
//
// On raw QUIC each stream is scheduled by the subscription's subscriber
// priority, the subgroup's publisher priority and the group order (§5.1).
// A stream that misses its OBJECT_DELIVERY_TIMEOUT or
// SUBGROUP_DELIVERY_TIMEOUT is reset with DELIVERY_TIMEOUT (§5.2).
type SubgroupWriter struct {
	track    *LocalTrack
	group    uint64
	subgroup uint64
	opts     SubgroupOptions
	// trackOrder is the track's DEFAULT_PUBLISHER_GROUP_ORDER (§10.5).
	trackOrder wire.GroupOrder

	// turn is held by the call that writes an object's bytes, so objects
	// go out one at a time. It is held across stream writes, each bounded
	// by the call's deadline; Close and Reset interrupt the holder (stop,
	// cur) before they take it. The fields below belong to its holder.
	turn sync.Mutex
	outs map[*ServedSubscription]*subgroupOut
	// snap is the track's subscriptions when byPos, their streams in
	// order, was built (outsInOrder).
	snap    *[]*ServedSubscription
	byPos   []*subgroupOut
	started bool   // an object has been written
	firstID uint64 // the first one's Object ID
	last    uint64 // the last one's
	ended   bool   // an End of Group or End of Track object was written
	pend    bool   // the last object's publication began and is not complete
	closed  bool
	buf     []byte
	shared  sharedHeader // the current object's header, encoded once
	// pl is the payload bytes being sent, which backlogs share one copy
	// of (sendq.Payload).
	pl   sendq.Payload
	rbuf []byte // ObjectWriter.ReadFrom's
	// keep is the streamed object being written, for the track's store
	// once complete; nil when none is kept. It points to kept, whose
	// buffers are reused from one object to the next.
	keep    *Object
	kept    Object
	gen     uint64         // counts objects begun, so a stale ObjectWriter fails
	remain  uint64         // payload bytes of the current object still to write
	relayed bool           // the current object was received, as a relay's are (subgroup_pace.go)
	targets []*subgroupOut // streams receiving the current object
	// omitted lists subscriptions that had objects of this subgroup
	// withheld by their Forward State before they had a stream: a stream
	// opened for them later cannot end with a FIN (§11.3.2).
	omitted map[*ServedSubscription]bool
	// timeouts are the publisher's delivery timeouts: the Track
	// Properties, overridden by the first object's Object Properties.
	timeouts deliveryTimeouts
	// cacheWindow is how long after its receipt a relayed object may
	// still start going out: the track's MAX_CACHE_DURATION (§10.3),
	// 0 for none.
	cacheWindow time.Duration

	// sq writes to the streams and queues what they do not take in time
	// (served_backlog.go); Close and Reset interrupt it (stopped) before they
	// take turn. stopCode is the code its interrupted streams are reset
	// with, set once, before sq is stopped.
	sq       sendq.Writer
	stopOnce sync.Once
	stopCode atomic.Uint64
	// userDeadline is SetWriteDeadline's, as a mono.Now time; 0 for none.
	userDeadline atomic.Int64
	// cached follows the subgroup in the track's cache, nil for none
	// (track_cache.go); it belongs to the holder of turn.
	cached *cache.Subgroup
}

// acquire takes the turn, or fails once the subgroup is closing.
func (w *SubgroupWriter) acquire() error {
	if w.sq.Stopped() {
		return ErrSubgroupClosed
	}
	w.turn.Lock()
	return nil
}

// WriteObject publishes o, a Normal object or a status object
// (wire.ObjectEndOfGroup or wire.ObjectEndOfTrack, after which no object
// may follow, §11.1.2). o's Group ID and Subgroup ID must be the writer's;
// its Priority, when set, must be the subgroup's effective Publisher
// Priority, since objects of a subgroup share their stream's (§5.1). A
// status object carries neither properties nor payload, and no object
// carries a Mandatory Track Property (§3.6), IMMUTABLE_PROPERTIES that
// would make the track malformed (§10.7), or a Prior Group ID Gap or
// Prior Object ID Gap that would (§10.8, §10.9): one given twice, larger
// than its ID, or contradicting the objects the track published before.
// WriteObject does not keep o's slices once it returns: the caller may
// reuse them at once.
func (w *SubgroupWriter) WriteObject(o Object) error {
	if err := w.checkObject(o); err != nil {
		return err
	}
	if err := w.acquire(); err != nil {
		return err
	}
	defer w.turn.Unlock()
	// A relayed object's waits run from its receipt, which its reader
	// stamped once per read from the transport: the upstream is held
	// within the grace of when the object came, and a relay reads no
	// clock per object.
	start := o.arrived
	if start == 0 {
		start = mono.Now()
	}
	so := wire.SubgroupObject{ObjectID: o.Location.Object, Properties: o.Properties, Status: o.Status,
		PayloadLength: uint64(len(o.Payload))}
	// Whole in memory: a slower subscriber may be this much behind
	// (sendq.Writer.Object).
	w.sq.Object(len(o.Payload) + len(o.Properties) + objectFieldsMax)
	defer w.sq.Object(0)
	o.Priority = wire.Some(w.priority())
	if len(o.Payload) <= inlinePayload {
		// Header and payload in one Write: half the stream operations
		// for small objects.
		if err := w.start(so, o.Payload, &o, start); err != nil {
			return err
		}
	} else {
		if err := w.start(so, nil, &o, start); err != nil {
			return err
		}
		if err := w.payload(o.Payload, start); err != nil {
			return err
		}
	}
	w.objectDone()
	w.pend = false
	w.track.published(o, true)
	return nil
}

// objectFieldsMax bounds the bytes an object adds to its stream beyond its
// payload and properties: its fields, and the stream's header if it is the
// first, each a few varints.
const objectFieldsMax = 64

// abandon tells the track's cache that the object begun last will not be
// complete. The caller holds the turn.
func (w *SubgroupWriter) abandon() {
	if w.pend {
		w.pend = false
		w.track.abandoned(wire.Location{Group: w.group, Object: w.last})
	}
}

// checkObject checks what WriteObject takes from o that the writer's
// state does not decide.
func (w *SubgroupWriter) checkObject(o Object) error {
	switch {
	case o.Incomplete != nil || o.EndOfRange != 0:
		return errNotAnObject
	case o.Location.Group != w.group || o.SubgroupID != w.subgroup:
		return fmt.Errorf("moqt: object of group %d subgroup %d written to subgroup %d of group %d",
			o.Location.Group, o.SubgroupID, w.subgroup, w.group)
	case o.Datagram || o.EndOfGroup:
		return errors.New("moqt: a datagram object written to a subgroup")
	case o.Priority.Set && o.Priority.Value != w.priority():
		return fmt.Errorf("moqt: object priority %d in a subgroup of priority %d", o.Priority.Value, w.priority())
	case !o.Status.Valid():
		return fmt.Errorf("moqt: unknown object status %s", o.Status)
	case o.Status != wire.ObjectNormal && (len(o.Payload) > 0 || len(o.Properties) > 0):
		return fmt.Errorf("moqt: a %s object carries a payload or properties", o.Status)
	}
	return nil
}

// inlinePayload is the largest payload written together with its header.
const inlinePayload = 1200

// start checks o, updates the Largest Object and writes o's header to the
// stream of every subscription whose filters it passes, opening streams as
// needed. inline, if not nil, is the whole payload, written with the
// header. whole, if not nil, is the complete object (WriteObject), which
// the track's cache takes now: should the write be interrupted, the
// object was still published whole. Writes begun at begun wait for slow
// subscribers until waitUntil. The caller holds the turn.
func (w *SubgroupWriter) start(o wire.SubgroupObject, inline []byte, whole *Object, begun int64) error {
	if err := w.check(o); err != nil {
		return err
	}
	loc := wire.Location{Group: w.group, Object: o.ObjectID}
	// received is when a relay received the object it writes on: its
	// timeouts and its time in the cache run from then (§5.2, §10.3).
	var received, expiry int64
	if whole != nil && whole.arrived != 0 {
		received = whole.arrived
		if w.cacheWindow != 0 {
			expiry = received + int64(w.cacheWindow)
		}
	}
	w.track.noteSubgroupObject(w, loc, whole, cmp.Or(received, begun))
	w.relayed = received != 0
	w.pend = true
	meta := filter.Object{Location: loc, SubgroupID: w.subgroup, PublisherPriority: w.priority(), Properties: o.Properties}
	first := !w.started
	prev := w.last // the object before o, if any
	if first {
		w.timeouts = w.timeouts.withObjectProperties(o.Properties) // §10.1, §10.2
		w.firstID = o.ObjectID
	}
	w.started, w.last, w.ended = true, o.ObjectID, o.Status != wire.ObjectNormal
	w.gen++
	w.remain = o.PayloadLength - uint64(len(inline))
	// First the streams that get the object, so that each write knows
	// whether others wait on it.
	w.targets = w.targets[:0]
	provided := received // when the header was received or provided, if a timeout needs it
	subs := w.outsInOrder()
	for i, ss := range subs {
		out := w.byPos[i]
		resumed := false
		if out != nil && out.closed() {
			if !out.cut {
				continue
			}
			// Cut by Forward 0 or an update: if the subscription takes
			// the subgroup's objects again, a new stream carries them,
			// lacking those before (§11.3.2).
			out, resumed = nil, true
		}
		v := ss.dataView()
		adm := ss.admit(v, meta)
		if adm == admitSkip {
			if out != nil {
				w.skip(out, loc)
			} else if v.withheld(loc) {
				if w.omitted == nil {
					w.omitted = map[*ServedSubscription]bool{}
				}
				w.omitted[ss] = true
			}
			continue
		}
		dp := v.dp
		if out == nil {
			var err error
			if out, err = w.open(ss, first, v); err != nil {
				continue // the subscription is ending; it leaves the track
			}
			out.incomplete = (resumed || w.omitted[ss]) && w.covers(v, prev) || w.missedBy(v, first, prev, o.ObjectID)
			if out.incomplete {
				out.q.ReserveLast() // its end is a reset that keeps what it carried
			}
			w.outs[ss], w.byPos[i] = out, out
		} else if dp.priority != out.subscriber {
			// A REQUEST_UPDATE changed the subscriber priority (§5.1.1).
			out.subscriber = dp.priority
			ss.sess.priorities().SetSubscriber(ss.rs.id, dp.priority)
		}
		// Past Config.MaxEarlyObjects before PUBLISH_OK, the object
		// waits in the stream's backlog for the answer.
		out.hold = adm == admitHold
		out.deadline = 0
		if timeout := effectiveTimeout(w.timeouts.object, dp.objectTimeout); timeout != 0 {
			if provided == 0 {
				provided = mono.Now()
			}
			out.deadline = provided + int64(millis(timeout))
		}
		if expiry != 0 && (out.deadline == 0 || expiry < out.deadline) {
			// Not to start going out once expired: in a backlog, it
			// is reset as a late object is.
			out.deadline = expiry
		}
		w.targets = append(w.targets, out)
	}
	fanout := len(w.targets) > 1
	sent := w.targets[:0]
	w.shared.ok = false
	w.pl.Reset(inline)
	defer w.pl.Reset(nil)
	for i, out := range w.targets {
		if w.sq.Stopped() {
			w.interruptedAt(i, sent)
			return ErrSubgroupClosed
		}
		b, err := w.encode(out, o, fanout)
		if err == nil {
			b = append(b, inline...)
			w.buf = b
			out.objEnd = out.q.Offset() + uint64(len(b)) + w.remain
			if out.deadline != 0 {
				out.arm(out.deadline)
			}
			if out.late() {
				continue
			}
			err = w.send(out, b, fanout, begun)
		}
		if err != nil {
			if errors.Is(err, ErrSubgroupClosed) {
				w.interruptedAt(i, sent)
				return err
			}
			w.drop(out, out.resetCode(err))
			continue
		}
		sent = append(sent, out)
		out.ss.sess.hook(func(h *sessionHooks) func() { return h.headerSent })
	}
	w.targets = sent
	w.settle(begun)
	return nil
}

// covers reports whether v's subscription covers this subgroup's object
// prev, the last written before a stream of it opens after others were
// withheld or cut: objects before the subscription's Start Location are
// excepted from the FIN rule (§11.3.2), so a REQUEST_UPDATE that moved the
// start past them (with Forward 1, say) lets the stream end with a FIN.
// The caller holds the turn.
func (w *SubgroupWriter) covers(v *servedView, prev uint64) bool {
	return !(wire.Location{Group: w.group, Object: prev}).Less(v.window().Start)
}

// missedBy reports whether a stream of v's subscription opening at object
// id lacks objects of the subgroup that the subscription covers (§11.3.2):
// those written before it (first to prev, when id is not the first), or,
// for a writer that joined the subgroup late (SubgroupOptions.Joined),
// those published before the first it wrote. The caller holds the turn.
func (w *SubgroupWriter) missedBy(v *servedView, first bool, prev, id uint64) bool {
	lo, hi := w.firstID, prev
	if w.opts.Joined {
		lo = 0
	}
	if first {
		if !w.opts.Joined || id == 0 {
			return false
		}
		hi = id - 1
	}
	return v.missedBefore(w.group, lo, hi)
}

// outsInOrder returns the track's subscriptions, with w.byPos holding
// their streams (nil for none yet) in the same order: rebuilt from outs
// only when the subscriptions changed, so that an object costs no map
// lookup per subscription. The caller holds the turn.
func (w *SubgroupWriter) outsInOrder() []*ServedSubscription {
	p := w.track.subs.Load()
	if p == nil {
		return nil
	}
	if p != w.snap {
		w.snap = p
		w.byPos = slices.Grow(w.byPos[:0], len(*p))[:len(*p)]
		for i, ss := range *p {
			w.byPos[i] = w.outs[ss]
		}
	}
	return *p
}

// objectDone ends the current object's delivery timeouts: all of it has
// been passed to the transport, or to a backlog whose drain ends them.
// The caller holds the turn.
func (w *SubgroupWriter) objectDone() {
	for _, out := range w.targets {
		out.objectDone()
	}
}

// payload writes payload bytes of the current object to its targets. A
// failed stream (STOP_SENDING, the subscription ending) stops only that
// subscription's copy of the subgroup (§11.3.2). Interrupted by Close or
// Reset, it resets the streams that did not take p, and every stream when
// the object stays incomplete. The caller holds the turn.
func (w *SubgroupWriter) payload(p []byte, begun int64) error {
	w.remain -= uint64(len(p))
	if len(p) == 0 {
		return nil
	}
	fanout := len(w.targets) > 1
	w.pl.Reset(p)
	defer w.pl.Reset(nil)
	for i, out := range w.targets {
		if out.closed() || out.late() {
			continue
		}
		err := ErrSubgroupClosed
		if !w.sq.Stopped() {
			err = w.send(out, p, fanout, begun)
		}
		if errors.Is(err, ErrSubgroupClosed) {
			w.interrupted(w.targets[i:])
			if w.remain > 0 {
				w.interrupted(w.targets[:i])
			}
			w.remain = 0
			return err
		}
		if err != nil {
			w.drop(out, out.resetCode(err))
		}
	}
	w.settle(begun)
	return nil
}

// check validates o against the subgroup's state before anything is sent.
func (w *SubgroupWriter) check(o wire.SubgroupObject) error {
	switch {
	case w.closed || w.sq.Stopped():
		return ErrSubgroupClosed
	case w.remain > 0:
		return fmt.Errorf("moqt: object %d is still being written", w.last)
	case w.ended:
		return fmt.Errorf("moqt: object %d after the end of group %d", o.ObjectID, w.group)
	case w.started && o.ObjectID <= w.last:
		return fmt.Errorf("moqt: object %d does not follow %d in subgroup %d", o.ObjectID, w.last, w.subgroup)
	case !w.started && w.opts.SubgroupIDIsFirstObject && o.ObjectID != w.subgroup:
		return fmt.Errorf("moqt: first object %d is not subgroup ID %d", o.ObjectID, w.subgroup)
	case len(o.Properties) > 0 && !w.opts.Properties:
		return errors.New("moqt: object properties on a subgroup opened without Properties")
	}
	return w.track.checkSent(wire.Location{Group: w.group, Object: o.ObjectID}, w.subgroup, false, o.Properties)
}

// priority is the Publisher Priority objects of this subgroup carry.
func (w *SubgroupWriter) priority() uint8 {
	if w.opts.Priority.Set {
		return w.opts.Priority.Value
	}
	return w.track.priority
}

// open starts ss's stream for this subgroup with its SUBGROUP_HEADER.
// FIRST_OBJECT is set when the stream starts at the subgroup's first
// object (§11.3.1); a stream that joins later carries its Subgroup ID
// explicitly, since mode 1 would name the wrong ID.
func (w *SubgroupWriter) open(ss *ServedSubscription, first bool, v *servedView) (*subgroupOut, error) {
	dp := v.dp
	h := wire.SubgroupHeader{
		TrackAlias:      ss.alias,
		GroupID:         w.group,
		SubgroupID:      w.subgroup,
		HasProperties:   w.opts.Properties,
		EndOfGroup:      w.opts.EndOfGroup,
		DefaultPriority: !w.opts.Priority.Set,
		Priority:        w.opts.Priority.Value,
		FirstObject:     first && !w.opts.Joined,
	}
	switch {
	case w.opts.SubgroupIDIsFirstObject && first:
		h.SubgroupIDMode = wire.SubgroupIDFirstObject
	case w.subgroup == 0:
		h.SubgroupIDMode = wire.SubgroupIDZero
	default:
		h.SubgroupIDMode = wire.SubgroupIDPresent
	}
	str, err := ss.openDataStream()
	if err != nil {
		return nil, err
	}
	order := w.trackOrder
	if dp.order != 0 {
		order = dp.order
	}
	ss.sess.priorities().Add(str, priority.Params{Owner: ss.rs.id, Subscriber: dp.priority,
		Publisher: w.priority(), Order: order, Group: w.group, Subgroup: w.subgroup})
	// The header goes out with the first object (encode); it is checked
	// now.
	b, err := h.Append(w.buf[:0])
	if err != nil {
		ss.closeDataStream(str, wire.ResetInternalError)
		return nil, err
	}
	w.buf = b
	win := v.window()
	out := &subgroupOut{str: str, ss: ss, enc: wire.SubgroupEncoder{Header: h}, fresh: true,
		subscriber: dp.priority, end: win.End, bounded: win.Bounded}
	out.q.Init(str, out, &ss.wp.group, &w.sq)
	if ss.sess.conn.ReliableReset() {
		// What its first write carries, the SUBGROUP_HEADER and the
		// first object, survives a later reset of the stream (§11.3.2:
		// "the reliable_size SHOULD include the stream header"): a
		// subscriber that had not read the header yet, such as one
		// behind a lossy path when a delivery timeout resets the stream,
		// still learns which subscription lost the subgroup.
		out.q.MarkFirstWrite()
	}
	return out, nil
}

// send queues b, the next bytes of out's stream, ending with w.pl's
// payload, for the stream's drain (sendq.Writer.Send), waiting for room
// within the call's wait (waitUntil). It returns ErrSubgroupClosed
// when Close or Reset interrupted it; a subscription refused more backlog
// is cut off. The caller holds the turn.
func (w *SubgroupWriter) send(out *subgroupOut, b []byte, fanout bool, begun int64) error {
	err := w.sq.Send(&out.q, b, &w.pl, out.hold, fanout, w.waitUntil(out.ss, begun))
	if err == nil {
		return nil
	}
	if err == sendq.ErrStopped {
		return ErrSubgroupClosed
	}
	out.ss.cutFor(err)
	return err
}
