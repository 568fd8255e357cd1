package moqt

import (
	"errors"
	"fmt"
	"io"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// Objects whose payload is written as it is produced (BeginObject), or
// forwarded from a reader (ObjectWriter.ReadFrom).

// BeginObject starts a Normal object of length payload bytes whose payload
// is written as it is produced, through the returned ObjectWriter: the
// header goes out at once, so subscribers can start reading an incomplete
// object (§3.1). No other object of the subgroup can be written until this
// one is complete or its writer closed. props are the Object Properties
// (nil for none); BeginObject does not keep them once it returns. A relay
// forwards a payload it reads with ObjectWriter.ReadFrom.
func (w *SubgroupWriter) BeginObject(id, length uint64, props []byte) (*ObjectWriter, error) {
	if err := w.acquire(); err != nil {
		return nil, err
	}
	defer w.turn.Unlock()
	w.keep = nil
	if err := w.start(wire.SubgroupObject{ObjectID: id, Properties: props, PayloadLength: length}, nil, nil, mono.Now()); err != nil {
		return nil, err
	}
	if w.track.keeps(length) {
		// The object goes to the track's store once complete, when the
		// caller's props may have been reused: a copy, in a buffer
		// reused from object to object.
		k := &w.kept
		*k = Object{Location: wire.Location{Group: w.group, Object: id}, SubgroupID: w.subgroup,
			Priority: wire.Some(w.priority()), Properties: append(k.Properties[:0], props...), Payload: k.Payload[:0]}
		w.keep = k
	}
	if length == 0 {
		w.objectDone()
		w.stored()
	}
	return &ObjectWriter{w: w, gen: w.gen}, nil
}

// stored hands a streamed object, now complete, to the track's store. The
// caller holds the turn.
func (w *SubgroupWriter) stored() {
	k := w.keep
	w.keep = nil
	if k == nil {
		w.abandon() // not gathered: the cache leaves it unknown
		return
	}
	w.pend = false
	w.track.published(*k, false)
}

// ObjectWriter writes the payload of one object begun with BeginObject.
type ObjectWriter struct {
	w   *SubgroupWriter
	gen uint64 // the object it writes; a stale writer fails
}

// Write sends payload bytes to every subscription receiving the object. It
// fails if p goes past the declared length. Like every write it waits for
// slow subscribers within the SubgroupWriter's bound. It does not keep p.
func (ow *ObjectWriter) Write(p []byte) (int, error) {
	w, err := ow.acquire()
	if err != nil {
		return 0, err
	}
	defer w.turn.Unlock()
	if uint64(len(p)) > w.remain {
		return 0, fmt.Errorf("moqt: %d bytes past the object's declared length", uint64(len(p))-w.remain)
	}
	if err := w.streamed(p, mono.Now()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ReadFrom sends the rest of the object's payload, read from r, to every
// subscription receiving it: a relay forwards a payload from the
// upstream's reader this way, through one buffer the SubgroupWriter
// reuses, with no copy of its own. It reads no more than the bytes still
// declared, and stops there; a reader that ends before returns
// io.ErrUnexpectedEOF with the object incomplete (Close then resets its
// streams). The bytes read are written as they come, so a payload may be
// larger than memory.
//
// r is read without holding the subgroup: Close, Reset and the
// SubgroupWriter's deadlines are not held up by a stalled upstream, and a
// subgroup closed meanwhile fails the next write with ErrSubgroupClosed.
// An ObjectWriter is not for concurrent use.
func (ow *ObjectWriter) ReadFrom(r io.Reader) (int64, error) {
	w, err := ow.acquire()
	if err != nil {
		return 0, err
	}
	if len(w.rbuf) < readFromChunk {
		w.rbuf = make([]byte, readFromChunk)
	}
	buf := w.rbuf // this object's until it is complete: no other reads it
	remain := w.remain
	w.turn.Unlock()
	var total int64
	for remain > 0 {
		n, err := r.Read(buf[:min(uint64(len(buf)), remain)])
		if n > 0 {
			w, werr := ow.acquire()
			if werr != nil {
				return total, werr
			}
			werr = w.streamed(buf[:n], mono.Now())
			remain = w.remain
			w.turn.Unlock()
			if werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		switch {
		case err == io.EOF && remain > 0:
			return total, io.ErrUnexpectedEOF
		case err == io.EOF:
			return total, nil
		case err != nil:
			return total, err
		}
	}
	return total, nil
}

// readFromChunk is the size of ReadFrom's buffer, at most: a few QUIC
// packets per stream write.
const readFromChunk = 32 << 10

// acquire takes the writer's turn for a payload write, or fails, without
// it, when the object's payload cannot be written to now.
func (ow *ObjectWriter) acquire() (*SubgroupWriter, error) {
	w := ow.w
	if err := w.acquire(); err != nil {
		return nil, err
	}
	switch {
	case w.closed:
		w.turn.Unlock()
		return nil, ErrSubgroupClosed
	case ow.gen != w.gen || w.remain == 0:
		w.turn.Unlock()
		return nil, errors.New("moqt: object already complete")
	}
	return w, nil
}

// streamed writes p, bytes of the current object's payload begun with
// BeginObject, and completes the object when it is its last. The caller
// holds the turn.
func (w *SubgroupWriter) streamed(p []byte, begun int64) error {
	if w.keep != nil {
		w.keep.Payload = append(w.keep.Payload, p...)
	}
	if err := w.payload(p, begun); err != nil {
		return err
	}
	if w.remain == 0 {
		w.objectDone()
		w.stored()
	}
	return nil
}

// Close finishes the object. If fewer bytes than declared were written,
// the object cannot be completed: its streams are reset (§11.3.2) and the
// subgroup is closed.
func (ow *ObjectWriter) Close() error {
	w := ow.w
	w.turn.Lock()
	defer w.turn.Unlock()
	if ow.gen != w.gen || w.remain == 0 {
		return nil
	}
	missing := w.remain
	w.remain = 0
	w.closed = true
	w.keep = nil // never complete: nothing to store
	w.endCached(false)
	w.abandon()
	for _, out := range w.outs {
		if !out.closed() {
			w.drop(out, wire.ResetCancelled)
		}
	}
	return fmt.Errorf("moqt: object closed %d bytes short", missing)
}
