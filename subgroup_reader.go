package moqt

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// ObjectHeader describes one received object (§11.1.1): everything but its
// payload.
type ObjectHeader struct {
	Location   wire.Location
	SubgroupID uint64 // 0 for datagrams, which have none
	// Priority is the Publisher Priority: the subgroup's or datagram's, or
	// the track's default when they inherit it.
	Priority uint8
	Status   wire.ObjectStatus
	// Properties is the raw Object Properties block (read it with
	// wire.WalkKV). It is only valid until the next object is read.
	Properties []byte
	// PayloadLength is the size of the payload in bytes.
	PayloadLength uint64
	// Datagram reports an object that arrived in an OBJECT_DATAGRAM.
	Datagram bool
	// EndOfGroup is the datagram END_OF_GROUP flag.
	EndOfGroup bool
}

// SubgroupReader reads the objects of one subgroup stream of a
// subscription, in order (§11.3). Next returns each object's header; Read
// then reads its payload as it arrives, so an object can be consumed
// before it is complete. A SubgroupReader is not safe for concurrent use.
type SubgroupReader struct {
	sub    *Subscription
	str    transport.ReceiveStream
	br     *bufio.Reader
	pipe   *streamPipe // set when the stream arrived before its alias
	dec    wire.SubgroupDecoder
	first  *wire.SubgroupObject // read ahead to route the stream
	cur    ObjectHeader
	remain uint64 // payload bytes of cur not yet read
	props  []byte
	prio   uint8       // the Publisher Priority, resolved at the first object
	chk    streamCheck // Malformed Track checks (malformed.go)
	watch  readWatch   // what the stall watchdog sees (receive_stall.go)
	err    error       // sticky
}

// Header is the stream's SUBGROUP_HEADER.
func (r *SubgroupReader) Header() wire.SubgroupHeader { return r.dec.Header }

// Subscription is the subscription the stream belongs to.
func (r *SubgroupReader) Subscription() *Subscription { return r.sub }

// Next returns the header of the next object, skipping whatever was left
// of the previous one's payload. At the end of the subgroup (the
// publisher's FIN) it returns io.EOF; a reset stream returns the reset as
// a *transport.StreamError-wrapping error. An object or FIN that reveals a
// Malformed Track is not returned: Next reports *MalformedTrackError, and
// the subscription is cancelled (§12.1).
//
// Objects outside the subscription's filters when they are read are
// skipped (see Subscription.accepts); they still count for the Malformed
// Track checks. The first object was checked when the stream arrived.
func (r *SubgroupReader) Next() (ObjectHeader, error) {
	r.watch.enter()
	defer r.leave()
	for {
		if r.err != nil {
			return ObjectHeader{}, r.err
		}
		if r.remain > 0 {
			if _, err := io.CopyN(io.Discard, r.br, int64(r.remain)); err != nil {
				return ObjectHeader{}, r.fail(err)
			}
			r.remain = 0
		}
		var o wire.SubgroupObject
		routed := r.first != nil // the stream was routed by it
		if routed {
			o, r.first = *r.first, nil
		} else {
			var err error
			if o, err = r.dec.Read(r.br, r.props[:0]); err != nil {
				return ObjectHeader{}, r.fail(err)
			}
			r.props = o.Properties
		}
		if e := r.check(&o); e != nil {
			return ObjectHeader{}, r.malformed(e)
		}
		r.cur = r.header(o)
		r.remain = o.PayloadLength
		if routed || r.sub.accepts(filter.Object{Location: r.cur.Location, SubgroupID: r.cur.SubgroupID,
			PublisherPriority: r.cur.Priority, Properties: r.cur.Properties}) {
			return r.cur, nil
		}
	}
}

// check runs the Malformed Track checks on o (malformed.go). The first
// object also resolves the stream's Publisher Priority: the header's, or
// the track's default, which does not change.
func (r *SubgroupReader) check(o *wire.SubgroupObject) *MalformedTrackError {
	h := &r.dec.Header
	if !r.chk.started() {
		r.prio = h.Priority
		if h.DefaultPriority {
			r.prio = r.sub.publisherPriority()
		}
	}
	id, _ := r.dec.SubgroupID()
	return r.chk.object(&r.sub.checks, wire.Location{Group: h.GroupID, Object: o.ObjectID}, id, r.prio, o.Status, o.Properties)
}

// malformed ends the stream on a Malformed Track: the object that revealed
// it is dropped (C023), the stream stopped and the subscription cancelled
// (C022).
func (r *SubgroupReader) malformed(e *MalformedTrackError) error {
	r.err = e
	r.remain = 0
	r.stopWith(wire.ResetMalformedTrack)
	r.sub.forgetReader(r)
	r.sub.malformedTrack(e)
	return e
}

// header builds the ObjectHeader of o from the stream's header.
func (r *SubgroupReader) header(o wire.SubgroupObject) ObjectHeader {
	h := r.dec.Header
	id, _ := r.dec.SubgroupID()
	return ObjectHeader{
		Location:      wire.Location{Group: h.GroupID, Object: o.ObjectID},
		SubgroupID:    id,
		Priority:      r.prio,
		Status:        o.Status,
		Properties:    o.Properties,
		PayloadLength: o.PayloadLength,
	}
}

// Read reads the current object's payload; it returns io.EOF at the end of
// the payload.
func (r *SubgroupReader) Read(p []byte) (int, error) {
	r.watch.enter()
	defer r.leave()
	if r.err != nil {
		return 0, r.err
	}
	if r.remain == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > r.remain {
		p = p[:r.remain]
	}
	n, err := r.br.Read(p)
	r.remain -= uint64(n)
	if err != nil {
		return n, r.fail(err)
	}
	return n, nil
}

// ReadPayload reads the whole payload of the current object into a new
// slice. Payloads larger than max fail without reading; use Read for
// those.
func (r *SubgroupReader) ReadPayload(max int) ([]byte, error) {
	if r.remain > uint64(max) {
		return nil, fmt.Errorf("moqt: object payload of %d bytes exceeds %d", r.remain, max)
	}
	b := make([]byte, r.remain)
	_, err := io.ReadFull(r, b)
	return b, err
}

// leave ends a call for the stall watchdog: data is left unread when the
// current object's payload is not read yet or bytes are buffered.
func (r *SubgroupReader) leave() {
	r.watch.leave(r.err == nil && (r.remain > 0 || r.br.Buffered() > 0))
}

// Close stops reading the stream: STOP_SENDING, which tells the publisher
// the subgroup is no longer of interest (§11.3.2).
func (r *SubgroupReader) Close() error {
	if r.err == nil {
		r.err = io.EOF
	}
	r.stop()
	r.sub.forgetReader(r)
	return nil
}

// stop sends STOP_SENDING with CANCELLED. It is safe to call from another
// goroutine than the reader's.
func (r *SubgroupReader) stop() { r.stopWith(wire.ResetCancelled) }

// stopWith sends STOP_SENDING with code.
func (r *SubgroupReader) stopWith(code wire.ResetCode) {
	if r.pipe != nil {
		r.pipe.abort(code)
	} else {
		r.str.CancelRead(uint64(code))
	}
}

// fail records a stream error. A FIN inside an object is a
// PROTOCOL_VIOLATION (§11.3) and closes the session. A FIN at an object
// boundary ends the subgroup, unless it contradicts what the track said
// before (§12.1). A stream stopped because the track was malformed reports
// that.
func (r *SubgroupReader) fail(err error) error {
	defer r.sub.forgetReader(r)
	switch {
	case errors.Is(err, io.EOF) && r.remain == 0 && !errors.Is(err, wire.ErrTruncated):
		r.err = io.EOF
		if r.chk.started() {
			h := &r.dec.Header
			if e := r.chk.fin(h.GroupID, h.EndOfGroup, r.sub.partialFins()); e != nil {
				return r.malformed(e)
			}
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, wire.ErrTruncated):
		se := protocolViolation("subgroup stream ended inside an object")
		r.sub.sess.fail(se)
		r.err = se
	default:
		var pe *wire.ProtocolError
		if errors.As(err, &pe) {
			r.sub.sess.fail(err)
			r.err = r.sub.sess.streamError(err)
			break
		}
		r.err = r.sub.sess.streamError(err)
		var me *MalformedTrackError
		if errors.As(r.sub.Err(), &me) {
			r.err = me // this end stopped the stream for it
		}
	}
	return r.err
}
