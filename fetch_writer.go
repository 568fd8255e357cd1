package moqt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/malformed"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/priority"
	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// FetchWriter writes the data stream of one FETCH (§11.4): the
// FETCH_HEADER, then each object or End of Range marker in the fetch's
// group order, then a FIN (Close) or a reset. The stream opens with the
// first write or Close; Close without any write sends the FETCH_HEADER
// alone, the answer when no object exists in the range (§9.11).
//
// A write never waits on the subscriber for longer than
// Config.SubscriberGrace: a fetch stream that takes nothing for that long
// (a subscriber that stopped reading) is reset with TOO_FAR_BEHIND and the
// FETCH's request stream with it. The subscriber's STOP_SENDING on the
// data stream ends the fetch too, its request stream reset (§3.2.1).
// Writes are serialized; Reset may be called from any goroutine and
// interrupts a write in progress.
type FetchWriter struct {
	sess  *Session
	id    uint64 // the FETCH_HEADER's Request ID
	desc  bool   // Descending group order
	owner uint64 // the priority table's owner of the stream
	// defaultPriority is the Publisher Priority of an object that sets
	// none.
	defaultPriority uint8
	// open opens the stream; forget runs once the stream is finished or
	// reset, to drop it from where it was counted; over runs once after
	// that, with nil for a FIN and else why the stream was reset.
	open   func(ctx context.Context) (transport.SendStream, error)
	forget func(transport.SendStream)
	over   func(error)
	// cut, if set, resets a stream that failed keeping what was written
	// (a fill's, whose FETCH_HEADER must reach the subscriber, C089).
	cut func(transport.SendStream, wire.ResetCode)

	subscriber atomic.Uint32 // the subscriber priority in force (§9.20.8)
	// inherited, when set, gives the subscriber priority instead: that of
	// the subscription a fill without a SUBSCRIBER_PRIORITY of its own
	// inherits, which later updates of the subscription move (§3.4).
	inherited func() uint8

	// turn is held by the call that writes, so entries go out one at a
	// time; each Write under it is bounded by the watchdog below, and Reset
	// interrupts it without taking it. The fields below belong to its
	// holder.
	turn     sync.Mutex
	enc      wire.FetchEncoder
	buf      []byte          // the entries held, when coalescing; else empty between writes
	coalesce bool            // WriteObject holds small entries in buf (setCoalesce)
	started  bool            // an entry was written
	last     wire.Location   // the last entry's Location
	gaps     malformed.Fetch // the objects written, for the Prior ID Gap rules (checkProperties)
	ranked   int             // the publisher priority the stream is ranked with; -1 before

	// dog gives a Write still blocked at its bound a past stream
	// deadline (expireWrite).
	dog sendq.Watchdog

	mu     sync.Mutex // guards the fields below; a leaf
	str    transport.SendStream
	opened bool  // str is set, or the open failed
	ended  bool  // finished or reset: nothing more is written
	err    error // why, for a reset
	stop   func() bool
	cancel context.CancelFunc // interrupts an open in progress
}

// newFetchWriter returns the writer of a fetch stream tagged id.
func newFetchWriter(s *Session, id uint64, desc bool, subscriber, defaultPriority uint8) *FetchWriter {
	w := &FetchWriter{sess: s, id: id, owner: id, desc: desc, defaultPriority: defaultPriority, ranked: -1}
	w.enc.Descending, w.enc.Version = desc, s.version
	w.subscriber.Store(uint32(subscriber))
	w.dog.Init(mono.Now, w.expireWrite)
	return w
}

// errFetchEnded reports a write to a fetch stream that was finished or
// reset.
var errFetchEnded = errors.New("moqt: fetch stream ended")

// WriteObject writes o, an object or, with o.EndOfRange set, the end of a
// range the stream does not carry (§11.4.1.2). Groups must come in the
// fetch's group order and objects by increasing Object ID within a group
// (§9.11): an entry out of order fails, and nothing is written. An
// object whose Datagram is set goes with the Datagram flag (§11.4.1.1); an
// unset Priority stands for the track's default publisher priority, or
// 128 on a FETCH the application serves. Fetch streams carry no Object
// Status (§11.4.1), so only Normal objects are written. On a draft 18 or
// 19 session an End of Timed-Out Range, which those drafts lack, goes as
// an End of Unknown Range. WriteObject does not keep o's slices once it
// returns.
func (w *FetchWriter) WriteObject(o Object) error {
	fo, err := w.entry(o)
	if err != nil {
		return err
	}
	w.turn.Lock()
	defer w.turn.Unlock()
	if err := w.follows(o.Location); err != nil {
		return err
	}
	gaps, err := w.checkProperties(fo)
	if err != nil {
		return err
	}
	str, err := w.stream()
	if err != nil {
		return err
	}
	if fo.EndOfRange == 0 && int(fo.Priority) != w.ranked {
		// The bytes held go at the rank they were given.
		if err := w.flush(str); err != nil {
			return err
		}
		w.rank(str, fo)
	}
	b := w.buf // after the entries held, when coalescing
	if !w.started {
		b = wire.FetchHeader{RequestID: w.id}.Append(b)
	}
	b, err = w.enc.AppendObject(b, fo)
	if err != nil {
		return err
	}
	w.started, w.last = true, o.Location
	if fo.EndOfRange == 0 {
		w.gaps.Record(o.Location, gaps)
	}
	large := fo.EndOfRange == 0 && len(o.Payload) > inlinePayload
	if fo.EndOfRange == 0 && !large {
		// Header and payload in one Write.
		b = append(b, o.Payload...)
	}
	w.buf = b
	if w.coalesce && !large && len(b) < fetchCoalesce {
		return nil // written with the next entries, or by flush
	}
	if err := w.flush(str); err != nil {
		return err
	}
	if large {
		return w.write(str, o.Payload)
	}
	return nil
}

// fetchCoalesce is how many bytes of entries a coalescing FetchWriter
// holds before it writes them: a Write per several small objects, not one
// each, so quic-go fills its packets and wakes its sender less often.
const fetchCoalesce = 16 << 10

// flush writes the entries held. The caller holds the turn.
func (w *FetchWriter) flush(str transport.SendStream) error { return w.flushWith(str, false) }

// flushWith is flush, its write reserved against flow control where
// reserve is set (writeWith).
func (w *FetchWriter) flushWith(str transport.SendStream, reserve bool) error {
	if len(w.buf) == 0 {
		return nil
	}
	b := w.buf
	w.buf = b[:0]
	return w.writeWith(str, b, reserve)
}

// setCoalesce makes WriteObject hold small entries, up to fetchCoalesce
// bytes, for fewer and larger Writes; the caller must then call flushHeld
// before it waits for its next entry, and Close writes what is held. For
// a writer fed from a cursor (pumpFetch), not the application's.
func (w *FetchWriter) setCoalesce() {
	w.turn.Lock()
	w.coalesce = true
	w.turn.Unlock()
}

// flushHeld writes the entries held, if any: the caller's next entry is
// not ready.
func (w *FetchWriter) flushHeld() {
	w.turn.Lock()
	defer w.turn.Unlock()
	if len(w.buf) == 0 {
		return
	}
	if str, err := w.stream(); err == nil {
		_ = w.flush(str) // a failure resets the stream, which the next write reports
	}
}

// entry converts o to the fields of a fetch stream entry.
func (w *FetchWriter) entry(o Object) (wire.FetchObject, error) {
	if o.EndOfRange != 0 {
		e := wireEndOfRange(w.sess.profile(), o.EndOfRange) // 18/19 have no 0x20C
		return wire.FetchObject{EndOfRange: e, GroupID: o.Location.Group, ObjectID: o.Location.Object}, nil
	}
	switch {
	case o.Status != wire.ObjectNormal:
		return wire.FetchObject{}, fmt.Errorf("moqt: a %s object on a fetch stream, which carries no Object Status", o.Status)
	case o.Datagram && o.SubgroupID != 0:
		return wire.FetchObject{}, fmt.Errorf("moqt: datagram object with Subgroup ID %d", o.SubgroupID)
	}
	prio := w.defaultPriority
	if o.Priority.Set {
		prio = o.Priority.Value
	}
	return wire.FetchObject{GroupID: o.Location.Group, ObjectID: o.Location.Object, Datagram: o.Datagram,
		SubgroupID: o.SubgroupID, Priority: prio, Properties: o.Properties, PayloadLength: uint64(len(o.Payload))}, nil
}

// checkProperties refuses an object whose properties would make every
// receiver take the track for malformed (§12.1): on their own (a Mandatory
// Track Property, §3.6; IMMUTABLE_PROPERTIES against §10.7), or by Prior
// Group ID Gap or Prior Object ID Gap against the objects before it on
// the stream (§10.8, §10.9). It returns the object's gaps, for the
// stream's record once written. The caller holds the turn, and has
// checked that the entry follows the last.
func (w *FetchWriter) checkProperties(fo wire.FetchObject) (malformed.Gaps, error) {
	if fo.EndOfRange != 0 {
		return malformed.Gaps{}, nil
	}
	gaps, e := w.gaps.Check(wire.Location{Group: fo.GroupID, Object: fo.ObjectID}, fo.Properties, w.desc)
	return gaps, sentError(e)
}

// follows checks that an entry at l may come next (C094). The caller
// holds the turn.
func (w *FetchWriter) follows(l wire.Location) error {
	if !w.started {
		return nil
	}
	p := w.last
	switch {
	case l.Group == p.Group && l.Object <= p.Object:
		return fmt.Errorf("moqt: fetch entry %v does not follow %v", l, p)
	case l.Group != p.Group && (l.Group < p.Group) != w.desc:
		return fmt.Errorf("moqt: group %d cannot follow group %d in this fetch's group order", l.Group, p.Group)
	}
	return nil
}

// Close ends the stream with a FIN: every entry of the range was written.
// A stream never written to is opened for its FETCH_HEADER first.
func (w *FetchWriter) Close() error {
	w.turn.Lock()
	defer w.turn.Unlock()
	str, err := w.stream()
	if err != nil {
		return err
	}
	if !w.started {
		w.started = true
		w.buf = wire.FetchHeader{RequestID: w.id}.Append(w.buf[:0])
	}
	if err := w.flush(str); err != nil {
		return err
	}
	if !w.end(nil) {
		return w.endErr()
	}
	err = str.Close()
	w.forget(str)
	w.over(nil)
	if err != nil {
		return w.sess.streamError(err)
	}
	return nil
}

// Reset ends the stream abruptly with code (§12.5): the objects not yet
// delivered will not be.
func (w *FetchWriter) Reset(code wire.ResetCode) {
	w.fail(code, fmt.Errorf("moqt: fetch stream reset with %s", code))
}

// fail resets the stream with code, once, and reports err as why.
func (w *FetchWriter) fail(code wire.ResetCode, err error) { w.reset(code, err, nil) }

// reset resets the stream with code, once, through cut when set, and
// reports err as why.
func (w *FetchWriter) reset(code wire.ResetCode, err error, cut func(transport.SendStream, wire.ResetCode)) {
	if !w.end(err) {
		return
	}
	w.mu.Lock()
	str, cancel := w.str, w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	switch {
	case str != nil && cut != nil:
		cut(str, code)
	case str != nil:
		str.CancelWrite(uint64(code))
		w.forget(str)
	}
	w.over(&fetchStreamError{code: code, err: err})
}

// failAfterHeader resets the stream with code, opened for its
// FETCH_HEADER first when nothing was written: a fill fetch stream's
// failure is told that way (§3.4.1, C089). cut, if set, resets it keeping
// what was written (ServedSubscription.cutDataStream).
func (w *FetchWriter) failAfterHeader(code wire.ResetCode, err error, cut func(transport.SendStream, wire.ResetCode)) {
	w.turn.Lock()
	defer w.turn.Unlock()
	if str, serr := w.stream(); serr == nil {
		if !w.started {
			w.started = true
			w.buf = wire.FetchHeader{RequestID: w.id}.Append(w.buf[:0])
		}
		// What was held goes first: a cut keeps what was written.
		if w.flushWith(str, true) != nil {
			return // the stream failed, and was reset
		}
	}
	w.reset(code, err, cut)
}

// end marks the stream ended, reporting whether this call did.
func (w *FetchWriter) end(err error) bool {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return false
	}
	w.ended, w.err = true, err
	if w.stop != nil {
		w.stop()
	}
	w.mu.Unlock()
	w.dog.Stop()
	return true
}

// endErr is the error a write to an ended stream returns.
func (w *FetchWriter) endErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return fmt.Errorf("%w: %w", errFetchEnded, w.err)
	}
	return errFetchEnded
}

// stream returns the stream, opening it first. The caller holds the turn.
func (w *FetchWriter) stream() (transport.SendStream, error) {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return nil, w.endErr()
	}
	if w.opened {
		str := w.str
		w.mu.Unlock()
		if str == nil {
			return nil, w.endErr()
		}
		return str, nil
	}
	ctx, cancel := context.WithTimeout(w.sess.ctx, w.sess.cfg.SubscriberGrace)
	w.cancel = cancel
	w.mu.Unlock()
	str, err := w.open(ctx)
	cancel()
	if err != nil {
		code := wire.ResetInternalError
		if errors.Is(err, context.DeadlineExceeded) {
			code, err = wire.ResetTooFarBehind, fmt.Errorf("moqt: no stream credit for a fetch stream within %v", w.sess.cfg.SubscriberGrace)
		}
		w.mu.Lock()
		w.opened = true
		w.mu.Unlock()
		w.fail(code, err)
		return nil, w.endErr()
	}
	w.sess.priorities().Add(str, priority.Params{Owner: w.owner, Subscriber: w.subscriberNow(),
		Publisher: w.defaultPriority})
	w.mu.Lock()
	w.str, w.opened, w.cancel = str, true, nil
	ended := w.ended
	if !ended {
		// The subscriber's STOP_SENDING ends the fetch even while nothing
		// is being written (§3.2.1).
		w.stop = context.AfterFunc(str.Context(), func() {
			w.fail(wire.ResetCancelled, fmt.Errorf("%w: STOP_SENDING from the subscriber on the fetch stream", ErrCancelled))
		})
	}
	w.mu.Unlock()
	if ended {
		str.CancelWrite(uint64(wire.ResetCancelled))
		w.forget(str)
		return nil, w.endErr()
	}
	return str, nil
}

// write writes b, bounded by Config.SubscriberGrace. A stream that takes
// nothing for that long is too far behind and is reset: the deadline is
// renewed as long as the subscriber takes bytes, so a large payload going
// at a slow subscriber's pace is no failure. Any other failure (the
// subscriber's STOP_SENDING, the session's end) ends the fetch too. The
// caller holds the turn.
func (w *FetchWriter) write(str transport.SendStream, b []byte) error {
	return w.writeWith(str, b, false)
}

// writeWith is write, with WriteReserved where reserve is set: for the
// last write before a reset that keeps what was written
// (cutDataStream), which may mark only bytes flow control took. Plain
// writes cost one call into quic-go, not two.
func (w *FetchWriter) writeWith(str transport.SendStream, b []byte, reserve bool) error {
	grace := w.sess.cfg.SubscriberGrace
	until := mono.Now() + int64(grace)
	for {
		w.dog.Begin(until)
		var n int
		var err error
		if reserve {
			n, err = str.WriteReserved(b)
		} else {
			n, err = str.Write(b)
		}
		w.dog.End()
		if err == nil {
			return nil
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Time is left when the watchdog's past deadline was for an
			// earlier Write, done by the time it was set. A subscriber
			// that took some bytes within the grace is still reading: a
			// large payload going at its pace gets a fresh grace.
			if n == len(b) {
				return nil // the deadline came after the last byte went
			}
			early, progress := mono.Now() < until, n > 0
			if early || progress {
				if err := str.SetWriteDeadline(time.Time{}); err == nil {
					b = b[n:]
					if progress {
						until = mono.Now() + int64(grace)
					}
					continue
				}
			}
		}
		code := wire.ResetCancelled
		if errors.Is(err, os.ErrDeadlineExceeded) {
			code = wire.ResetTooFarBehind
			err = fmt.Errorf("moqt: fetch stream took nothing for %v: %w", grace, err)
		}
		w.fail(code, w.sess.streamError(err))
		return w.endErr()
	}
}

// expireWrite is the watchdog's expire: the stream's Write in progress,
// blocked past its bound, gets a past deadline.
func (w *FetchWriter) expireWrite() {
	w.mu.Lock()
	str := w.str
	w.mu.Unlock()
	if str != nil {
		_ = str.SetWriteDeadline(time.Unix(1, 0))
	}
}

// rank places the stream by the publisher priority of the object about
// to be written: a fetch's objects may differ in it (§5.1.1). The caller
// holds the turn.
func (w *FetchWriter) rank(str transport.SendStream, o wire.FetchObject) {
	if int(o.Priority) == w.ranked {
		return
	}
	w.ranked = int(o.Priority)
	order := wire.GroupOrderAscending
	if w.desc {
		order = wire.GroupOrderDescending
	}
	w.sess.priorities().Add(str, priority.Params{Owner: w.owner, Subscriber: w.subscriberNow(),
		Publisher: o.Priority, Order: order, Group: o.GroupID})
}

// subscriberNow is the subscriber priority the stream is ranked by.
func (w *FetchWriter) subscriberNow() uint8 {
	if w.inherited != nil {
		return w.inherited()
	}
	return uint8(w.subscriber.Load())
}

// setSubscriber applies a new subscriber priority (§5.1.1, REQUEST_UPDATE).
func (w *FetchWriter) setSubscriber(prio uint8) {
	w.subscriber.Store(uint32(prio))
	w.sess.priorities().SetSubscriber(w.owner, prio)
}
