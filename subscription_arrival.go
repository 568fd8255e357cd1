package moqt

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/wire"
)

// Subscription.ReadObject reads a subscription's objects in the order they
// arrive, across its subgroup streams and its datagrams. Its first call
// starts a goroutine that takes the subscription's streams as they arrive
// (as AcceptSubgroup would), and one goroutine per open stream that reads
// the stream's objects whole, in order, into a shared queue. The queue is
// bounded in objects and bytes; a stream goroutine that finds it full
// waits, leaving its stream unread, so QUIC flow control pushes back on the
// publisher: nothing is dropped. The goroutines end with the subscription's
// data plane, or when it is cancelled, or with the session.
//
// Pushing back is safe only while the application has something to take:
// taking it makes room. When every byte held belongs to an object still
// arriving, the application can free nothing, and the object being read
// may wait for bytes that the connection's flow-control window keeps out,
// the window being full of the unread data of the streams left waiting.
// A publisher that sends several streams at once (round-robin, as quic-go
// does for streams of one urgency, and over WebTransport for all) fills it
// so: ReadObject then waited for good, and the publisher cut the subscriber
// off as too far behind. So while nothing complete is held, objects still
// arriving are read together up to Config.MaxObjectSize, the bound one
// object alone already had (fits).

// Bounds of the queue behind Subscription.ReadObject.
const (
	// arrivalObjects is how many read objects wait in the queue; each
	// stream goroutine may hold one more while it waits for room.
	arrivalObjects = 64
	// arrivalBytes bounds the payload and properties bytes of the objects
	// queued, being read into the queue, or last returned to the caller.
	// An object larger than that is read when nothing else is held, so
	// the bound is then one object (at most Config.MaxObjectSize).
	arrivalBytes = 1 << 20
)

// subgroupFailed is the item of a subgroup stream that ended before its
// FIN: the error, with the Object naming the subgroup.
func subgroupFailed(r *SubgroupReader, err error) arrivalItem {
	id, _ := r.dec.SubgroupID()
	return arrivalItem{obj: Object{Location: wire.Location{Group: r.dec.Header.GroupID}, SubgroupID: id},
		err: fmt.Errorf("moqt: subgroup %d of group %d: %w", id, r.dec.Header.GroupID, err)}
}

// arrival is the state of Subscription.ReadObject.
type arrival struct {
	startOnce sync.Once
	items     chan arrivalItem // read objects and stream errors, in arrival order
	// fills carries the fill fetch streams' entries and ends, when
	// ReadObject reads the fills (subscription_fill.go); nil otherwise.
	fills     chan arrivalItem
	fillBytes fillBudget // the bytes of the fill entries in fills or held
	// waiting is set while ReadObject waits: the application is not
	// behind, whatever is held back (subscription_stall.go).
	waiting atomic.Bool
	// ctx ends the goroutines: cancelled by abort, by the session's end,
	// or once they have all ended.
	ctx     context.Context
	cancel  context.CancelFunc
	drained chan struct{} // closed when the pump and every stream goroutine have ended
	started atomic.Bool   // items is set: the stall watchdog may look at it
	// taken is the stall clock's tick when ReadObject last returned, for the
	// stall watchdog.
	taken atomic.Int64
	// toldMissing is set once ReadObject has yielded the entry for the
	// streams PUBLISH_DONE counted that never came. ReadObject's caller
	// alone uses it.
	toldMissing bool

	mu      sync.Mutex // guards the fields below
	stopped chan struct{}
	aborted bool
	live    int           // goroutines running: the pump and one per stream
	bytes   int           // bytes reserved: queued, being read, or held by the caller
	reading int           // of bytes, those of objects still being read from their streams
	maxRead int           // Config.MaxObjectSize: the bound of reading while nothing else is held
	waiters int           // stream goroutines waiting for bytes
	room    chan struct{} // closed when bytes are released and waiters > 0
	free    [][]byte      // buffers of returned objects, to reuse
	freeCap int           // capacity of the buffers in free
	held    arrivalItem   // the object ReadObject returned last
}

// arrivalItem is one entry of the queue: an object, whose payload and
// properties share buf, or a stream's error.
type arrivalItem struct {
	obj  Object
	buf  []byte // obj's storage, reused once the caller is done with it
	size int    // bytes reserved for it
	err  error
	// slot is set on the entries of a fill fetch stream; fillEnd marks
	// the item that ends one, with err unless it ended with its FIN.
	slot    *fillSlot
	fillEnd bool
}

// next waits for the next queued object or error, or datagram. Once the
// goroutines have ended, what is left is returned before the
// subscription's error.
func (a *arrival) next(ctx context.Context, sub *Subscription) (arrivalItem, error) {
	a.waiting.Store(true)
	defer a.waiting.Store(false)
	for {
		it, err := a.nextRaw(ctx, sub)
		if err != nil {
			return it, err
		}
		if it, ok := sub.seam(a, it); ok {
			return it, nil
		}
	}
}

// nextRaw is next without the seam between fill and subscription: while
// the initial fill is awaited only fill entries are taken.
func (a *arrival) nextRaw(ctx context.Context, sub *Subscription) (arrivalItem, error) {
	if slot := sub.pendingInitialFill(); slot != nil {
		return a.nextFill(ctx, sub, slot)
	}
	if it, ok := a.queued(); ok {
		return it, nil
	}
	for {
		if d, ok := sub.datagrams.pop(); ok {
			return arrivalItem{obj: d}, nil
		}
		select {
		case it := <-a.fills:
			return it, nil
		case it := <-a.items:
			return it, nil
		case <-sub.datagrams.ready:
		case <-a.drained:
			if it, ok := a.queued(); ok {
				return it, nil
			}
			if d, ok := sub.datagrams.pop(); ok {
				return arrivalItem{obj: d}, nil
			}
			if err := sub.streamsMissing(); err != nil && !a.toldMissing {
				// News, in band, before the end: whole streams are
				// missing.
				a.toldMissing = true
				return arrivalItem{err: err}, nil
			}
			return arrivalItem{}, sub.endErr(ctx)
		case <-a.stopped:
			return arrivalItem{}, sub.endErr(ctx)
		case <-ctx.Done():
			return arrivalItem{}, ctx.Err()
		}
	}
}

// queued returns a fill entry or an object already waiting, if any.
func (a *arrival) queued() (arrivalItem, bool) {
	select {
	case it := <-a.fills:
		return it, true
	case it := <-a.items:
		return it, true
	default:
		return arrivalItem{}, false
	}
}

// start begins taking the subscription's streams.
func (a *arrival) start(sub *Subscription) {
	a.items = make(chan arrivalItem, arrivalObjects)
	a.drained = make(chan struct{})
	byRead := sub.readFills() // under Subscription.mu: before arrival.mu, a leaf
	if byRead {
		a.fills = make(chan arrivalItem, arrivalObjects)
	}
	a.mu.Lock()
	a.ctx, a.cancel = context.WithCancel(sub.sess.ctx)
	if a.stopped == nil {
		a.stopped = make(chan struct{})
	}
	if a.aborted {
		a.cancel()
	}
	a.live = 1
	a.maxRead = sub.sess.cfg.MaxObjectSize
	if byRead {
		a.live++
	}
	a.mu.Unlock()
	a.taken.Store(sub.stall.now())
	a.started.Store(true)
	go a.pump(sub)
	if byRead {
		go a.pumpFills(sub)
	}
}

// took records the application's progress, for the stall watchdog.
func (a *arrival) took(sub *Subscription) {
	now := sub.stall.now()
	if a.taken.Load() != now {
		a.taken.Store(now)
	}
	sub.stall.advance(now)
}

// stalled reports objects queued for ReadObject since before cutoff, when
// it was last called: its stream goroutines may have read them with
// nothing left buffered, where the watchdog looks for unread data.
func (a *arrival) stalled(cutoff int64) bool {
	return a.started.Load() && len(a.items) > 0 && a.taken.Load() < cutoff
}

// pump takes the subscription's streams and starts a reader for each, until
// the data plane ends.
func (a *arrival) pump(sub *Subscription) {
	defer a.exit()
	for {
		r, err := sub.AcceptSubgroup(a.ctx)
		if err != nil {
			return
		}
		a.mu.Lock()
		a.live++
		a.mu.Unlock()
		go a.readStream(r)
	}
}

// exit ends one goroutine; the last closes drained.
func (a *arrival) exit() {
	a.mu.Lock()
	a.live--
	last := a.live == 0
	a.mu.Unlock()
	if last {
		a.cancel()
		close(a.drained)
	}
}

// readStream reads r's objects into the queue, up to its end.
func (a *arrival) readStream(r *SubgroupReader) {
	defer a.exit()
	maxSize := r.sub.sess.cfg.MaxObjectSize
	for {
		obj, err := r.Next()
		if err == nil && r.PayloadLen()+uint64(len(obj.Properties)) > uint64(maxSize) {
			err = fmt.Errorf("%w: %d bytes", ErrObjectTooLarge, r.PayloadLen())
			_ = r.Close()
		}
		if err != nil {
			if err != io.EOF { // not the subgroup's FIN
				a.push(subgroupFailed(r, err))
			}
			return
		}
		size := int(r.PayloadLen()) + len(obj.Properties)
		buf, ok := a.reserve(size)
		if !ok {
			r.stop()
			r.sub.forgetReader(r)
			return
		}
		n := int(r.PayloadLen())
		buf, err = r.readInto(buf[:0], n)
		if err != nil {
			a.release(size, size, nil)
			a.push(subgroupFailed(r, err))
			return
		}
		a.arrived(size)
		// The properties alias the reader's buffer, which the next Next
		// reuses: they are kept after the payload, in the same storage.
		buf = append(buf, obj.Properties...)
		obj.Payload = buf[:n:n]
		if obj.Properties != nil {
			obj.Properties = buf[n:]
		}
		if !a.push(arrivalItem{obj: obj, buf: buf, size: size}) {
			a.release(size, 0, buf)
			r.stop()
			r.sub.forgetReader(r)
			return
		}
	}
}

// reserve waits until an object of size bytes fits (fits), and returns a
// buffer to read it into. It reports false once the reader is aborted or
// the session ends.
func (a *arrival) reserve(size int) ([]byte, bool) {
	a.mu.Lock()
	for !a.fits(size) {
		if a.room == nil {
			a.room = make(chan struct{})
		}
		room := a.room
		a.waiters++
		a.mu.Unlock()
		select {
		case <-room:
		case <-a.ctx.Done():
		}
		a.mu.Lock()
		a.waiters--
		if a.ctx.Err() != nil {
			a.mu.Unlock()
			return nil, false
		}
	}
	a.bytes += size
	a.reading += size
	var buf []byte
	if k := len(a.free); k > 0 {
		buf = a.free[k-1]
		a.free[k-1] = nil
		a.free = a.free[:k-1]
		a.freeCap -= cap(buf)
	}
	a.mu.Unlock()
	return buf, true
}

// fits reports whether an object of size bytes may be read now: when
// nothing is held, within the queue's bound, or, when every byte held
// belongs to an object still arriving (the application can free none), if
// the objects being read stay within maxRead. a.mu is held.
func (a *arrival) fits(size int) bool {
	switch {
	case a.bytes == 0 || a.bytes+size <= arrivalBytes:
		return true
	case a.bytes == a.reading:
		return a.reading+size <= a.maxRead
	}
	return false
}

// arrived records that the object of size bytes being read is whole.
func (a *arrival) arrived(size int) {
	a.mu.Lock()
	a.reading -= size
	a.mu.Unlock()
}

// release gives back size reserved bytes, of which reading were of an
// object still being read, and keeps buf for reuse, within the queue's
// byte bound.
func (a *arrival) release(size, reading int, buf []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.bytes -= size
	a.reading -= reading
	if buf != nil && a.freeCap+cap(buf) <= arrivalBytes && len(a.free) < arrivalObjects {
		a.free = append(a.free, buf[:0])
		a.freeCap += cap(buf)
	}
	if a.waiters > 0 && a.room != nil {
		close(a.room)
		a.room = nil
	}
}

// recycle releases the object ReadObject returned last: the caller is done
// with it.
func (a *arrival) recycle() {
	a.mu.Lock()
	held := a.held
	a.held = arrivalItem{}
	a.mu.Unlock()
	switch {
	case held.slot != nil:
		a.fillBytes.release(held.size)
	case held.buf != nil || held.size > 0:
		a.release(held.size, 0, held.buf)
	}
}

// push queues it, waiting for room; it reports false once the reader is
// aborted or the session ends.
func (a *arrival) push(it arrivalItem) bool { return a.pushTo(a.items, it) }

// pushTo is push onto ch.
func (a *arrival) pushTo(ch chan arrivalItem, it arrivalItem) bool {
	if a.ctx.Err() != nil {
		return false
	}
	select {
	case ch <- it:
		return true
	case <-a.ctx.Done():
		return false
	}
}

// abort ends the reader when this end cancelled the subscription: its
// goroutines stop, and ReadObject returns the subscription's error.
func (a *arrival) abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.aborted {
		return
	}
	a.aborted = true
	if a.stopped == nil {
		a.stopped = make(chan struct{})
	}
	close(a.stopped)
	if a.cancel != nil {
		a.cancel()
	}
}

func (a *arrival) isAborted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.aborted
}
