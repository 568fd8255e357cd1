package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// The fill side of Subscription.ReadObject (§3.4): its readers of the
// fill streams and their byte bound. The seam that returns the initial
// fill's entries before the subscription's objects, each object once, is
// Subscription.seam (subscription_read.go).

// fillError is the ReadObject error entry of a fill stream that ended
// before its FIN.
func fillError(slot *fillSlot, err error) error {
	return fmt.Errorf("%w: fill fetch stream of request %d: %w", ErrFillFailed, slot.id, err)
}

// The fill side of Subscription.ReadObject. The initial fill, the one
// SUBSCRIBE_OK promised, comes first: until it has ended, ReadObject takes
// only its entries, and the subscription's own objects wait in their
// streams and the arrival queue, whose bounds push back on the publisher;
// none is dropped for it. Once it has ended, a subscription-delivered
// object is dropped only when it lies in the range the fill covered: the
// whole fill range after the fill's FIN, or up to the last entry it
// yielded in the fill's order after a reset, since the fill delivered it
// or reported it as a gap (§3.4). With the Next Object filter and an
// open-ended fill (§3.4's recipe) nothing is dropped: the ranges meet at
// the Largest Object of SUBSCRIBE_OK, and every object comes once, in
// order across the seam. Later fills, from Update, are yielded as they
// arrive, between the subscription's objects.

// errFillMissing is the fill error when the initial fill stream does not
// open within Config.FillWait.
var errFillMissing = errors.New("moqt: the fill fetch stream did not open within Config.FillWait")

// errFillStalled is the fill error when the initial fill gives nothing for
// Config.FillWait while the subscription's objects wait for it.
var errFillStalled = errors.New("moqt: the fill fetch stream stalled while the subscription's objects waited: they follow, the rest of the fill as it comes")

// nextFill waits for the next entry of the fills while the initial fill
// is awaited: up to its deadline for the stream to open, then as long as
// entries keep coming. A fill that gives nothing for Config.FillWait while
// the subscription's objects wait ends the wait (errFillStalled): the held
// objects may be what keeps it from coming, filling the connection's
// flow-control window.
func (a *arrival) nextFill(ctx context.Context, sub *Subscription, slot *fillSlot) (arrivalItem, error) {
	sub.mu.Lock()
	arrived := slot.arrived
	sub.mu.Unlock()
	var expired, stalled <-chan time.Time
	if !arrived {
		t := time.NewTimer(time.Until(slot.deadline))
		defer t.Stop()
		expired = t.C
	} else {
		t := time.NewTicker(sub.sess.cfg.FillWait)
		defer t.Stop()
		stalled = t.C
	}
	for {
		select {
		case it := <-a.fills:
			return it, nil
		case <-stalled:
			if len(a.items) == 0 && sub.datagrams.empty() {
				continue // nothing is held back
			}
			return arrivalItem{slot: slot, fillEnd: true, err: fillError(slot, errFillStalled)}, nil
		case <-expired:
			sub.mu.Lock()
			arrived := slot.arrived
			sub.mu.Unlock()
			if arrived {
				// It opened in time and has yet to give its first
				// entry: waited for as any entry is.
				t := time.NewTicker(sub.sess.cfg.FillWait)
				defer t.Stop()
				expired, stalled = nil, t.C
				continue
			}
			return arrivalItem{slot: slot, fillEnd: true, err: fillError(slot, errFillMissing)}, nil
		case <-a.drained:
			select {
			case it := <-a.fills:
				return it, nil
			default:
				// Nothing more comes: the fill is over, as is everything.
				return arrivalItem{slot: slot, fillEnd: true, err: fillError(slot, errFillMissing)}, nil
			}
		case <-a.stopped:
			return arrivalItem{}, sub.endErr(ctx)
		case <-ctx.Done():
			return arrivalItem{}, ctx.Err()
		}
	}
}

// pumpFills takes the subscription's fill streams and starts a reader for
// each, until the data plane ends.
func (a *arrival) pumpFills(sub *Subscription) {
	defer a.exit()
	for {
		sub.mu.Lock()
		f, sig := sub.nextFillLocked()
		sub.mu.Unlock()
		if f == nil {
			select {
			case <-sig:
				continue
			case <-sub.dataDone:
				sub.mu.Lock()
				f, _ = sub.nextFillLocked()
				sub.mu.Unlock()
				if f == nil {
					return
				}
			case <-a.ctx.Done():
				return
			}
		}
		sub.mu.Lock()
		slot := sub.fill.slots[f.data.r.id]
		sub.mu.Unlock()
		a.mu.Lock()
		a.live++
		a.mu.Unlock()
		go a.readFill(f, slot)
	}
}

// fillBudget bounds the bytes of the fill entries queued for ReadObject,
// or last returned, to arrivalBytes (one larger entry alone), apart from
// the subscription's own objects: those may all be held back waiting for
// the initial fill, which must still get through.
type fillBudget struct {
	mu    sync.Mutex // a leaf
	bytes int
	room  chan struct{} // closed when bytes are released
}

// reserve waits until size fits, or nothing else is held; it reports false
// once ctx ends.
func (b *fillBudget) reserve(ctx context.Context, size int) bool {
	b.mu.Lock()
	for b.bytes > 0 && b.bytes+size > arrivalBytes {
		if b.room == nil {
			b.room = make(chan struct{})
		}
		room := b.room
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false
		}
		b.mu.Lock()
	}
	b.bytes += size
	b.mu.Unlock()
	return true
}

func (b *fillBudget) release(size int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bytes -= size
	if b.room != nil {
		close(b.room)
		b.room = nil
	}
}

// readFill reads one fill stream's entries into the fill queue, within the
// queue's byte bound, then its end.
func (a *arrival) readFill(f *Fetch, slot *fillSlot) {
	defer a.exit()
	for {
		obj, err := f.ReadObject(a.ctx)
		if a.ctx.Err() != nil {
			return
		}
		if err != nil {
			end := arrivalItem{slot: slot, fillEnd: true}
			if err != io.EOF {
				end.err = fillError(slot, err)
			}
			a.pushTo(a.fills, end)
			return
		}
		size := len(obj.Payload) + len(obj.Properties)
		if !a.fillBytes.reserve(a.ctx, size) {
			return
		}
		if !a.pushTo(a.fills, arrivalItem{obj: obj, size: size, slot: slot}) {
			a.fillBytes.release(size)
			return
		}
	}
}
