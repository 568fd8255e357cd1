package moqt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// fetchStream reads one fetch data stream (§11.4.1): a FETCH's or a fill's.
// Its entries come out as Objects, gap markers included, each checked
// against what the stream may carry (checkEntry). It is read by one
// goroutine at a time; stop may be called from any.
type fetchStream struct {
	sess *Session
	str  transport.ReceiveStream
	br   *bufio.Reader
	id   uint64 // the Request ID of its FETCH_HEADER
	dec  wire.FetchDecoder

	// Set by the stream's owner before the first read.
	//
	// window bounds the Locations of its entries: the FETCH's range, up to
	// the FETCH_OK End, or the fill range; the zero Window passes all.
	window filter.Window
	// malformed is told when the stream reveals a Malformed Track (§12.1).
	malformed func(*MalformedTrackError)
	// chk follows the stream's objects for the Prior ID Gap rules; its
	// track is the subscription's for a fill's (malformed.go).
	chk fetchCheck
	// watch is what the stall watchdog sees of a fill stream (nil clock
	// for a FETCH's).
	watch readWatch
	// hold is the slot the stream held while it waited for its request.
	hold *holdSlot
	// onEnd, if set, is called once when the stream has ended.
	onEnd   func()
	endOnce sync.Once

	props   []byte
	slab    []byte // what is left of the storage small payloads are carved from
	hasPrev bool
	prev    wire.Location // the last entry's Location
	err     error         // sticky
	stopped atomic.Bool   // this end stopped the stream
	fin     atomic.Bool   // the stream ended with its FIN, read
	once    sync.Once
}

// errFetchClosed is what a Fetch's reads return once Close stopped it.
var errFetchClosed = fmt.Errorf("moqt: fetch closed: %w", ErrCancelled)

// next reads the next entry whole. The Payload and Properties of an object
// are new slices, the caller's. maxSize bounds payload and properties.
func (r *fetchStream) next(maxSize int) (Object, error) {
	defer r.leave()
	if r.err != nil {
		return Object{}, r.err
	}
	if r.br.Buffered() < maxPlainObjectHeader {
		r.watch.wait() // the entry may not all be here yet
	}
	o, err := r.dec.Read(r.br, r.props[:0])
	if err != nil {
		return Object{}, r.fail(err, false)
	}
	if o.Properties != nil {
		r.props = o.Properties // its storage is reused by the next read
	}
	loc := o.Location()
	if e := r.checkEntry(loc); e != nil {
		return Object{}, r.onMalformed(e)
	}
	if o.EndOfRange != 0 {
		r.hasPrev, r.prev = true, loc
		return Object{Location: loc, EndOfRange: o.EndOfRange}, nil
	}
	if e := r.chk.object(loc, o.Properties, r.dec.Descending); e != nil {
		return Object{}, r.onMalformed(e)
	}
	r.hasPrev, r.prev = true, loc
	obj := Object{Location: loc, SubgroupID: o.SubgroupID, Priority: wire.Some(o.Priority),
		Datagram: o.Datagram}
	if len(o.Properties) > 0 {
		obj.Properties = r.carve(len(o.Properties))
		copy(obj.Properties, o.Properties)
	}
	if o.PayloadLength > uint64(maxSize) || o.PayloadLength+uint64(len(o.Properties)) > uint64(maxSize) {
		// A local limit, not the peer's error: the rest of the stream
		// cannot be read past it, so the stream is stopped.
		r.stop(wire.ResetCancelled)
		r.err = fmt.Errorf("%w: object %v of %d bytes", ErrObjectTooLarge, loc, o.PayloadLength)
		return Object{}, r.err
	}
	if obj.Payload, err = r.readPayload(int(o.PayloadLength)); err != nil {
		return Object{}, r.fail(err, true)
	}
	return obj, nil
}

// Small payloads and properties are carved from slabs of fetchSlab bytes:
// an allocation per several objects rather than one each. A slice kept
// keeps its slab alive, so only slices of up to fetchSlabMax bytes share
// one.
const (
	fetchSlab    = 16 << 10
	fetchSlabMax = 2 << 10
)

// carve returns n bytes of storage of the caller's, from the slab when n
// is small.
func (r *fetchStream) carve(n int) []byte {
	if n > fetchSlabMax {
		return make([]byte, n)
	}
	if len(r.slab) < n {
		r.slab = make([]byte, fetchSlab)
	}
	b := r.slab[:n:n]
	r.slab = r.slab[n:]
	return b
}

// readPayload reads n payload bytes into a new slice, growing it by at
// most growStep beyond what has arrived, never on a length alone.
func (r *fetchStream) readPayload(n int) ([]byte, error) {
	var p []byte
	if n == 0 {
		return []byte{}, nil
	}
	if n <= fetchSlabMax {
		// Less than growStep: sized at once.
		p = r.carve(n)
		if r.br.Buffered() < n {
			r.watch.wait()
		}
		if _, err := io.ReadFull(r.br, p); err != nil {
			return nil, err
		}
		return p, nil
	}
	for len(p) < n {
		k := min(n-len(p), growStep)
		start := len(p)
		p = slices.Grow(p, k)[:start+k]
		if r.br.Buffered() < k {
			r.watch.wait()
		}
		if _, err := io.ReadFull(r.br, p[start:]); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// checkEntry holds an entry's Location to what the stream may carry: inside
// its window (§9.11: nothing past the requested range or the FETCH_OK End;
// §3.4: a fill never extends beyond Largest Object), and after the entry
// before it in the stream's order: groups in the Group Order, objects in
// Object ID order within a group (§9.11, C094). The Delta encoding keeps
// objects in order by itself; End of Range markers carry absolute
// Locations, which must keep it too.
func (r *fetchStream) checkEntry(loc wire.Location) *MalformedTrackError {
	if !r.window.Contains(loc) {
		return &MalformedTrackError{Reason: fmt.Sprintf("fetch stream %d carries %v, outside its range", r.id, loc)}
	}
	if !r.hasPrev {
		return nil
	}
	p := r.prev
	var ok bool
	switch {
	case loc.Group == p.Group:
		ok = p.Object < loc.Object
	case r.dec.Descending:
		ok = loc.Group < p.Group
	default:
		ok = p.Group < loc.Group
	}
	if !ok {
		return &MalformedTrackError{Reason: fmt.Sprintf("fetch stream %d carries %v after %v, out of order", r.id, loc, p)}
	}
	return nil
}

// onMalformed ends the stream on a Malformed Track: the entry that
// revealed it is dropped, the stream stopped with MALFORMED_TRACK, and
// the owner told, which cancels the fetch or subscription (§12.1).
func (r *fetchStream) onMalformed(e *MalformedTrackError) error {
	r.err = e
	r.stop(wire.ResetMalformedTrack)
	if r.malformed != nil {
		r.malformed(e)
	}
	return e
}

// fail records why the stream ended. A FIN between entries ends it (io.EOF);
// one inside an entry or a payload, and any bad entry, is a
// PROTOCOL_VIOLATION, or the decoder's own code, and closes the session
// (§11.4.1.1, C098-C101). A reset is reported as a *StreamError with its
// code.
func (r *fetchStream) fail(err error, inPayload bool) error {
	var pe *wire.ProtocolError
	switch {
	case r.stopped.Load():
		r.err = errFetchClosed
	case !inPayload && isCleanEOF(err):
		r.err = io.EOF
		r.fin.Store(true)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		se := protocolViolation("fetch stream %d ended inside an object", r.id)
		r.sess.fail(se)
		r.err = r.sess.closeErr(se)
	case asProtocolError(err, &pe):
		r.sess.fail(err)
		r.err = r.sess.closeErr(sessionErrorFrom(err))
	default:
		r.err = r.sess.streamError(err)
		if r.stopped.Load() {
			r.err = errFetchClosed
		}
	}
	return r.err
}

// leave ends a call for the stall watchdog.
func (r *fetchStream) leave() {
	r.watch.leave(r.err == nil && r.br.Buffered() > 0)
	if r.err != nil && r.onEnd != nil {
		r.endOnce.Do(r.onEnd)
	}
}

// stop sends STOP_SENDING with code, once, unless the stream was read to
// its end, and gives back its held-stream slot. Safe from any goroutine.
func (r *fetchStream) stop(code wire.ResetCode) {
	r.once.Do(func() {
		r.stopped.Store(true)
		if !r.fin.Load() {
			r.str.CancelRead(uint64(code))
		}
	})
	r.hold.release()
	if r.onEnd != nil {
		r.endOnce.Do(r.onEnd)
	}
}

// Bounds of what a fetchPump reads ahead of ReadObject: the queue holds
// at most fetchAhead entries and, beyond its first entry, fetchAheadBytes
// of payload and properties; ReadObject's batch holds as many.
const (
	fetchAhead      = 32
	fetchAheadBytes = 64 << 10
)

// readAhead is an entry a fetchPump read, or the error that ended it.
type readAhead struct {
	obj Object
	err error
}

// errFetchQuit is fetchPump.take's report that the Fetch was closed.
var errFetchQuit = errors.New("moqt: fetch closed")

// fetchPump reads a fetch stream's entries for ReadObject in a goroutine of
// its own, ahead of it within fetchAhead entries and fetchAheadBytes, so
// that a context can abandon a wait without leaving an entry half read.
// ReadObject takes the entries read by the batch: a lock per batch, and a
// wake-up only when it waits for the network, not a channel handoff per
// entry.
type fetchPump struct {
	r     *fetchStream
	quit  chan struct{} // closed by halt
	done  chan struct{} // closed when the goroutine has ended
	ready chan struct{} // capacity 1: entries were queued while ReadObject waited
	room  chan struct{} // capacity 1: ReadObject took the queue while the pump waited
	once  sync.Once

	mu         sync.Mutex // guards the fields below
	q          []readAhead
	bytes      int  // payload and properties queued
	takerWaits bool // ReadObject waits for an entry
	pumpWaits  bool // the pump waits for room

	// ReadObject's: the batch it returns entries from.
	cur []readAhead
	pos int
}

// startPump starts reading r; the goroutine ends at the stream's end,
// with halt, or with the session.
func startPump(r *fetchStream) *fetchPump {
	p := &fetchPump{r: r, quit: make(chan struct{}), done: make(chan struct{}),
		ready: make(chan struct{}, 1), room: make(chan struct{}, 1),
		q: make([]readAhead, 0, fetchAhead/4), cur: make([]readAhead, 0, fetchAhead/4)}
	s := r.sess
	go func() {
		defer close(p.done)
		for {
			obj, err := r.next(s.cfg.MaxObjectSize)
			if !p.put(readAhead{obj: obj, err: err}, s.ctx.Done()) || err != nil {
				return
			}
		}
	}()
	return p
}

// put queues it, waiting for room; it reports false once halted or the
// session ended.
func (p *fetchPump) put(it readAhead, sessDone <-chan struct{}) bool {
	size := len(it.obj.Payload) + len(it.obj.Properties)
	p.mu.Lock()
	for len(p.q) >= fetchAhead || len(p.q) > 0 && p.bytes+size > fetchAheadBytes {
		p.pumpWaits = true
		p.mu.Unlock()
		select {
		case <-p.room:
		case <-p.quit:
			return false
		case <-sessDone:
			return false
		}
		p.mu.Lock()
	}
	p.q = append(p.q, it)
	p.bytes += size
	wake := p.takerWaits
	p.takerWaits = false
	p.mu.Unlock()
	if wake {
		signal(p.ready)
	}
	return true
}

// take returns the next entry, waiting for one. It fails with ctx's error,
// or errFetchQuit once quit is closed. After the pump ended with nothing
// more queued, the entry is the stream's error, or the session's.
func (p *fetchPump) take(ctx context.Context, quit <-chan struct{}, s *Session) (readAhead, error) {
	if p.pos == len(p.cur) {
		ended, err := p.refill(ctx, quit)
		if err != nil {
			return readAhead{}, err
		}
		if ended {
			// The pump ended, perhaps with the session, before it
			// could hand over its last entry or error.
			it := readAhead{err: p.r.err}
			if it.err == nil {
				it.err = s.closeErr(ErrCancelled)
			}
			return it, nil
		}
	}
	it := p.cur[p.pos]
	p.cur[p.pos] = readAhead{} // the caller's now
	p.pos++
	return it, nil
}

// refill swaps ReadObject's spent batch for the queue, waiting for an
// entry; ended reports the pump ended with the queue empty.
func (p *fetchPump) refill(ctx context.Context, quit <-chan struct{}) (ended bool, err error) {
	p.mu.Lock()
	for len(p.q) == 0 {
		p.takerWaits = true
		p.mu.Unlock()
		select {
		case <-p.ready:
		case <-p.done:
			ended = true
		case <-quit:
			err = errFetchQuit
		case <-ctx.Done():
			err = ctx.Err()
		}
		p.mu.Lock()
		if len(p.q) == 0 && (ended || err != nil) {
			p.takerWaits = false
			p.mu.Unlock()
			return ended, err
		}
		ended, err = false, nil
	}
	p.takerWaits = false
	p.cur, p.q, p.pos, p.bytes = p.q, p.cur[:0], 0, 0
	wake := p.pumpWaits
	p.pumpWaits = false
	p.mu.Unlock()
	if wake {
		signal(p.room)
	}
	return false, nil
}

// halt ends the pump's goroutine.
func (p *fetchPump) halt() { p.once.Do(func() { close(p.quit) }) }
