package moqt

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/readahead"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// SubgroupReader reads the objects of one subgroup stream of a
// subscription, in order (§11.3). ReadObject reads each object whole into a
// buffer the caller reuses. Next returns an object without its payload;
// Read or WriteTo then move the payload as it arrives, so an object can be
// consumed, or forwarded, before it is complete. A SubgroupReader is not
// safe for concurrent use.
type SubgroupReader struct {
	sub    *Subscription
	str    transport.ReceiveStream
	held   *heldStream // str as the session reads it, nil in some tests
	br     *bufio.Reader
	pipe   *readahead.Pipe // set when the stream arrived before its alias
	slot   *uniSlot        // the session's bound on the peer's streams, released at the end
	dec    wire.SubgroupDecoder
	first  *wire.SubgroupObject // read ahead to route the stream
	length uint64               // payload bytes of the current object
	remain uint64               // payload bytes of the current object not yet read
	props  []byte
	prio   uint8       // the Publisher Priority, resolved at the first object
	chk    streamCheck // Malformed Track checks (malformed.go)
	watch  readWatch   // what the stall watchdog sees (subscription_stall.go)
	err    error       // sticky
}

// Header is the stream's SUBGROUP_HEADER.
func (r *SubgroupReader) Header() wire.SubgroupHeader { return r.dec.Header }

// Next returns the next object without its payload (Payload is nil), first
// skipping whatever was left of the previous one's payload; PayloadLen is
// the payload's size, and Read or WriteTo read it. The
// returned Properties alias the reader's buffer: they are valid until the
// next call of Next or ReadObject, so copy them to keep them longer.
//
// At the end of the subgroup (the publisher's FIN) Next returns io.EOF; a
// reset stream returns the reset as a *StreamError-wrapping error. An
// object or FIN that reveals a Malformed Track is not returned: Next
// reports *MalformedTrackError, and the subscription is cancelled (§12.1).
// Objects outside the subscription's filters when they are read are
// skipped; they still count for the Malformed Track checks.
func (r *SubgroupReader) Next() (Object, error) {
	defer r.leave()
	for {
		if r.err != nil {
			return Object{}, r.err
		}
		if r.remain > 0 {
			if r.remain > uint64(r.br.Buffered()) {
				r.watch.wait()
			}
			n, err := r.br.Discard(int(min(r.remain, maxDiscard)))
			r.remain -= uint64(n)
			if err != nil {
				return Object{}, r.fail(err)
			}
			continue
		}
		var o wire.SubgroupObject
		routed := r.first != nil // the stream was routed by it
		if routed {
			o, r.first = *r.first, nil
		} else {
			if r.dec.Header.HasProperties || r.br.Buffered() < maxPlainObjectHeader {
				r.watch.wait() // the header may not all be here yet
			}
			var err error
			if o, err = r.dec.Read(r.br, r.props[:0]); err != nil {
				return Object{}, r.fail(err)
			}
			if o.Properties != nil {
				r.props = o.Properties // its storage is reused by the next read
			}
		}
		if e := r.check(&o); e != nil {
			return Object{}, r.malformed(e)
		}
		obj := r.object(o)
		r.length, r.remain = o.PayloadLength, o.PayloadLength
		if routed || r.sub.accepts(filter.Object{Location: obj.Location, SubgroupID: obj.SubgroupID,
			PublisherPriority: obj.Priority.Value, Properties: obj.Properties}) {
			return obj, nil
		}
	}
}

// maxPlainObjectHeader is the longest object header without properties:
// three varints (§11.3.2).
const maxPlainObjectHeader = 3 * 8

// maxDiscard is the most Next skips of an unread payload at once.
const maxDiscard = 1 << 30

// PayloadLen is the size in bytes of the payload of the object Next or
// ReadObject returned last, read or not.
func (r *SubgroupReader) PayloadLen() uint64 { return r.length }

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

// releaseBuffer returns the read buffer of a reader that has ended, read
// from the stream itself, to readerPool: the next stream reuses it. Every
// method checks r.err before it touches r.br, and fail, the only caller,
// runs inside the reader's own calls, so nothing reads it after.
func (r *SubgroupReader) releaseBuffer() {
	if r.err != nil && r.pipe == nil && r.br != nil {
		putReader(r.br)
		r.br = nil
	}
}

// object builds the Object of o, without its payload, from the stream's
// header.
func (r *SubgroupReader) object(o wire.SubgroupObject) Object {
	h := &r.dec.Header
	id, _ := r.dec.SubgroupID()
	return Object{
		Location:   wire.Location{Group: h.GroupID, Object: o.ObjectID},
		SubgroupID: id,
		Priority:   wire.Some(r.prio),
		Status:     o.Status,
		Properties: o.Properties,
		arrived:    r.received(),
	}
}

// received is when the object just decoded was received: when its stream
// was last read from the transport (heldStream.received), which is after
// its bytes arrived and before it was decoded.
func (r *SubgroupReader) received() int64 {
	if r.held != nil {
		if t := r.held.received(); t != 0 {
			return t
		}
	}
	return mono.Now()
}

// Read reads the current object's payload; it returns io.EOF at the end of
// the payload.
func (r *SubgroupReader) Read(p []byte) (int, error) {
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
	if r.br.Buffered() == 0 {
		r.watch.wait()
	}
	n, err := r.br.Read(p)
	r.remain -= uint64(n)
	if err != nil {
		return n, r.fail(err)
	}
	return n, nil
}

// readPayload reads the rest of the current object's payload into a new
// slice, which is the caller's. Payloads larger than max fail without
// reading; use Read or WriteTo for those.
func (r *SubgroupReader) readPayload(max int) ([]byte, error) {
	if r.remain > uint64(max) {
		return nil, fmt.Errorf("moqt: object payload of %d bytes exceeds %d", r.remain, max)
	}
	b := make([]byte, r.remain)
	_, err := io.ReadFull(r, b)
	return b, err
}

// ReadObject reads the next object whole: Next, then its payload, read into
// buf's storage from index 0 and grown when too small. The returned Payload
// is the caller's: pass it back as buf to reuse its storage, so a relay
// forwarding objects one at a time allocates nothing per object. The
// returned Properties alias the reader's buffer, as Next's do: they are
// valid until the next call of Next or ReadObject.
//
// A payload larger than Config.MaxObjectSize is not read: ReadObject
// returns the object without it and an error wrapping ErrObjectTooLarge,
// and the object stays current, so Read or WriteTo can still move its
// payload, or Next skip it. Storage grows only as payload bytes arrive,
// never on a length alone. Other errors are Next's, or a read error inside
// the payload, with the bytes read so far in Payload.
func (r *SubgroupReader) ReadObject(buf []byte) (Object, error) {
	obj, err := r.Next()
	if err != nil {
		return obj, err
	}
	if r.remain > uint64(r.sub.sess.cfg.MaxObjectSize) {
		return obj, fmt.Errorf("%w: %d bytes", ErrObjectTooLarge, r.remain)
	}
	obj.Payload, err = r.readInto(buf[:0], int(r.remain))
	return obj, err
}

// growStep bounds how far ReadObject grows a buffer ahead of the bytes that
// have arrived.
const growStep = 64 << 10

// readInto appends the next n payload bytes to p, growing it by at most
// growStep beyond what has arrived.
func (r *SubgroupReader) readInto(p []byte, n int) ([]byte, error) {
	for n > 0 {
		k := n
		if k > cap(p)-len(p) && k > growStep {
			k = growStep
		}
		start := len(p)
		p = slices.Grow(p, k)[:start+k]
		m, err := io.ReadFull(r, p[start:])
		if err != nil {
			return p[:start+m], err
		}
		n -= k
	}
	return p, nil
}

// WriteTo writes the rest of the current object's payload to w as it
// arrives, straight from the stream's read buffer: no copy, no allocation.
// It returns at the payload's end, as Read does with io.EOF, so io.Copy(w,
// r) forwards one payload. A write error leaves the payload's rest
// unread, for Read, WriteTo or Next.
func (r *SubgroupReader) WriteTo(w io.Writer) (int64, error) {
	defer r.leave()
	var n int64
	for r.err == nil && r.remain > 0 {
		if r.br.Buffered() == 0 {
			r.watch.wait()
			if _, err := r.br.Peek(1); err != nil {
				return n, r.fail(err)
			}
		}
		b, _ := r.br.Peek(int(min(uint64(r.br.Buffered()), r.remain)))
		m, err := w.Write(b)
		_, _ = r.br.Discard(m) // m bytes are buffered: this cannot fail
		r.remain -= uint64(m)
		n += int64(m)
		if err != nil {
			return n, err
		}
		if m < len(b) {
			return n, io.ErrShortWrite
		}
	}
	return n, r.err
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
		r.pipe.Abort(code)
	} else {
		r.str.CancelRead(uint64(code))
	}
	r.slot.release()
}

// fail records a stream error. A FIN inside an object is a
// PROTOCOL_VIOLATION (§11.3) and closes the session. A FIN at an object
// boundary ends the subgroup, unless it contradicts what the track said
// before (§12.1). A stream stopped because the track was malformed reports
// that.
func (r *SubgroupReader) fail(err error) error {
	defer r.sub.forgetReader(r)
	defer r.releaseBuffer()
	defer r.slot.release()
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

// readerPool holds the read buffers of ended subgroup streams: a track
// that opens a stream per group would otherwise allocate one for each.
var readerPool sync.Pool

// getReader returns a read buffer over r, from readerPool if it has one.
func getReader(r io.Reader) *bufio.Reader {
	if br, ok := readerPool.Get().(*bufio.Reader); ok {
		br.Reset(r)
		return br
	}
	return bufio.NewReader(r)
}

// putReader returns br to readerPool, holding on to nothing it read.
func putReader(br *bufio.Reader) {
	br.Reset(nil)
	readerPool.Put(br)
}
