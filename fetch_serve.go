package moqt

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// fetchServing is a session's count of the FETCHes and fill fetch streams
// it serves now, which Config.MaxServedFetches bounds.
type fetchServing struct {
	n atomic.Int64
	// refused counts the fills refused for want of a place that are being
	// reset, their linger included, up to Config.MaxServedFetches too: a
	// peer's REQUEST_UPDATEs cannot make them pile up (refuseFill).
	refused atomic.Int64
	// source, when set, replaces LocalTrack.cursor (tests only).
	source atomic.Pointer[func(t *LocalTrack, w filter.Window, desc bool) fetchCursor]
}

// cursor returns the entries t answers window w with.
func (f *fetchServing) cursor(t *LocalTrack, w filter.Window, desc bool) fetchCursor {
	if src := f.source.Load(); src != nil {
		return (*src)(t, w, desc)
	}
	return t.cursor(w, desc)
}

// takeFetchSlot counts one more FETCH or fill served in the session, if
// Config.MaxServedFetches allows it; release gives the place back.
func takeFetchSlot(s *Session) (release func(), ok bool) {
	if s.serving.n.Add(1) > int64(s.cfg.MaxServedFetches) {
		s.serving.n.Add(-1)
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { s.serving.n.Add(-1) }) }, true
}

// refuseFill counts one more fill refused over Config.MaxServedFetches
// and being reset, if there are not that many already; release gives the
// place back. Without one the fill is reset at once, without the linger
// that keeps its FETCH_HEADER for the subscriber.
func refuseFill(s *Session) (release func(), ok bool) {
	if s.serving.refused.Add(1) > int64(s.cfg.MaxServedFetches) {
		s.serving.refused.Add(-1)
		return nil, false
	}
	var once sync.Once
	return func() { once.Do(func() { s.serving.refused.Add(-1) }) }, true
}

// fillBudgetOf is the total wait FILL_TIMEOUT allows (§9.20.6): def when
// absent, none at all for 0.
func fillBudgetOf(p *wire.Params, def time.Duration) time.Duration {
	if p.FillTimeout.Set {
		return msDuration(p.FillTimeout.Value)
	}
	return def
}

// pumpFetch writes the entries of cur that f passes to w, then FIN. The
// cursor's waits share budget; ctx ends the fetch (w is then reset). One
// entry is in memory at a time.
func pumpFetch(ctx context.Context, cur fetchCursor, f *filter.Filter, w *FetchWriter, budget time.Duration) error {
	b := newWaitBudget(ctx, budget)
	defer b.close()
	if c, ok := cur.(interface{ close() }); ok {
		defer c.close() // an upstream fetch it reads from, however this ends
	}
	// Entries ready one after another share Writes; what is held goes
	// out before the cursor waits.
	w.setCoalesce()
	b.onWait = w.flushHeld
	for {
		o, err := b.next(cur)
		if ctx.Err() != nil {
			cause, code := context.Cause(ctx), wire.ResetCancelled
			if errors.As(cause, new(*MalformedTrackError)) {
				code = wire.ResetMalformedTrack // the track's end as Malformed (§12.1)
			}
			w.fail(code, cause)
			return cause
		}
		if errors.Is(err, io.EOF) {
			return w.Close()
		}
		if err != nil {
			code := wire.ResetInternalError
			if errors.As(err, new(*MalformedTrackError)) {
				code = wire.ResetMalformedTrack // an upstream's (§12.1)
			}
			w.failAfterHeader(code, err, w.cut)
			return err
		}
		if o.EndOfRange == 0 {
			if o.Status != wire.ObjectNormal {
				continue // a fetch stream carries no status (§11.4.1)
			}
			prio := w.defaultPriority
			if o.Priority.Set {
				prio = o.Priority.Value
			}
			meta := filter.Object{Location: o.Location, SubgroupID: o.SubgroupID, Datagram: o.Datagram,
				PublisherPriority: prio, Properties: o.Properties}
			if !f.Passes(meta) {
				continue // the range filters leave it out (§3.3.2)
			}
		}
		if err := w.WriteObject(o); err != nil {
			return err
		}
	}
}

// waitBudget is the context a fetch's cursor waits under: done once the
// fetch's total wait has used up its budget (FILL_TIMEOUT, §9.20.6), or
// when the fetch ends. Only the time spent inside next, from when the
// cursor first asks for Done, counts, so neither the time the subscriber
// takes to read nor an entry served without waiting uses the budget, nor
// costs a timer.
type waitBudget struct {
	context.Context // the fetch's: values and the end of the fetch
	stop            func() bool
	onWait          func() // called when the cursor is about to wait, if set
	once            sync.Once
	done            chan struct{}
	mu              sync.Mutex // guards the fields below
	err             error
	left            time.Duration
	timer           *time.Timer
	armedAt         int64       // when the timer started, a mono.Now time
	armed           atomic.Bool // the timer runs for the call of next in progress; set under mu
}

func newWaitBudget(ctx context.Context, budget time.Duration) *waitBudget {
	b := &waitBudget{Context: ctx, left: budget, done: make(chan struct{})}
	b.stop = context.AfterFunc(ctx, func() { b.end(context.Cause(ctx)) })
	if budget <= 0 {
		b.end(context.DeadlineExceeded) // 0: never wait
	}
	return b
}

// next returns cur's next entry, charging the wait to the budget.
func (b *waitBudget) next(cur fetchCursor) (Object, error) {
	o, err := cur.next(b)
	if !b.armed.Load() {
		return o, err // no wait: nothing to charge
	}
	b.mu.Lock()
	spent := false
	if b.armed.Load() {
		b.armed.Store(false)
		b.timer.Stop()
		b.left -= time.Duration(mono.Now() - b.armedAt)
		spent = b.left <= 0
	}
	b.mu.Unlock()
	if spent {
		b.end(context.DeadlineExceeded)
	}
	return o, err
}

func (b *waitBudget) end(err error) {
	b.once.Do(func() {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
		close(b.done)
	})
}

func (b *waitBudget) close() {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
}

// Deadline reports none: the budget has no fixed end.
func (b *waitBudget) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed once the budget is used up or the fetch ends. The first
// call inside a call of next starts the budget's clock.
func (b *waitBudget) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.armed.Load() || b.err != nil {
		return b.done
	}
	if b.onWait != nil {
		b.mu.Unlock()
		b.onWait() // may write: not under mu
		b.mu.Lock()
		if b.armed.Load() || b.err != nil {
			return b.done
		}
	}
	b.armedAt = mono.Now()
	b.armed.Store(true)
	if b.timer == nil {
		b.timer = time.AfterFunc(b.left, func() { b.end(context.DeadlineExceeded) })
	} else {
		b.timer.Reset(b.left)
	}
	return b.done
}

// Err is context.DeadlineExceeded for a used-up budget.
func (b *waitBudget) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
