package moqt

import (
	"context"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// A subscription's incoming streams and datagrams: how the session hands
// them over (deliverStream, deliverDatagram) and how the application takes
// them (AcceptSubgroup, ReadDatagram).

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
	}
	if d.DefaultPriority {
		obj.Priority.Value = sub.publisherPriority()
	}
	if !sub.accepts(filter.Object{Location: obj.Location, Datagram: true, PublisherPriority: obj.Priority.Value, Properties: obj.Properties}) {
		return // held before its alias was known, and not this subscription's
	}
	sub.datagrams.push(obj)
}

// AcceptSubgroup returns the next subgroup stream of the subscription.
// After the subscription ends it keeps returning the streams that arrive
// late, until every stream PUBLISH_DONE counted has arrived or
// Config.DoneLinger passes; then it returns the subscription's error. A
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
					return nil, sub.Err()
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
			return Object{}, sub.Err()
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
