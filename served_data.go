package moqt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The data-plane side of ServedSubscription: its filter and the data
// streams opened for it, which PUBLISH_DONE counts (§9.9) and which a
// cancellation resets (C003).

// servedView is what the data path reads of a subscription for each
// object: its filter, the Largest Object when it joined its track, and its
// data parameters. It is built under ss.mu whenever one of them changes
// (the track's join, a REQUEST_UPDATE, a PUBLISH_STATE_NOTIFY) and never
// modified after, so a writer reads it with one atomic load and no lock.
type servedView struct {
	filter *filter.Filter // a copy of ss.filter; nil until a LocalTrack serves it
	// joined is the Largest Object when the subscription started being
	// served: objects up to it were published before it saw any.
	joined filter.LargestObject
	dp     dataParams
}

// refreshView publishes the data path's view of the subscription's
// current filter and parameters. ss.mu is held.
func (ss *ServedSubscription) refreshView() {
	v := &servedView{joined: ss.wp.joined, dp: dataParamsOf(&ss.params)}
	if ss.filter != nil {
		f := *ss.filter // Update replaces, never mutates, what a copy shares
		v.filter = &f
	}
	ss.view.Store(v)
}

// dataView returns the data path's view of the subscription.
func (ss *ServedSubscription) dataView() *servedView {
	if v := ss.view.Load(); v != nil {
		return v
	}
	return &noView
}

// noView is the view of a subscription no track serves yet: no filter, so
// nothing passes.
var noView servedView

// attachTrack starts serving objects of t: the subscription's filter
// resolves against largest, the Largest Object its answer reported, and
// objects up to it were published before the subscription saw any.
func (ss *ServedSubscription) attachTrack(t *LocalTrack, largest filter.LargestObject) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.filter = filter.New(&ss.params, largest)
	ss.wp.joined = largest
	ss.refreshView()
}

// endIfPast ends the subscription with PUBLISH_DONE SUBSCRIPTION_ENDED
// once the track publishes in a group past its filter's End Group, on a
// draft that has the code (18/19 §10.11: "The publisher reached the end of
// an associated subscription filter"); from 20 a subscription outlives its
// filter (#1833). The PUBLISH_DONE goes out from a goroutine of its own:
// the caller is publishing. Subgroups of the End Group still open then are
// reset, those finished delivered first (End).
func (ss *ServedSubscription) endIfPast(group uint64) {
	if !ss.sess.rules.endAtFilterEnd || ss.current() != stateEstablished {
		return
	}
	w := ss.dataView().window()
	if !w.Bounded || w.End.Group >= group || !ss.filterEnded.CompareAndSwap(false, true) {
		return
	}
	ss.sess.goroutines.Go(func() {
		_ = ss.End(wire.DoneSubscriptionEnded, "the subscription's filter has ended")
	})
}

// admission is what becomes of an object for one subscription.
type admission int

const (
	admitSkip admission = iota // its filters refuse it
	admitSend                  // send it now
	// admitHold: this end's PUBLISH awaits its answer and has sent
	// Config.MaxEarlyObjects already; the object waits for PUBLISH_OK in
	// its stream's backlog (§3.1).
	admitHold
)

// admit decides whether an object goes to the subscription whose view is
// v: it must pass FORWARD, the Location filter and the range filters
// (C024, C027), and the subscription must be Established, or be this end's
// PUBLISH awaiting its answer, whose objects past Config.MaxEarlyObjects
// are held back. It takes no lock.
func (ss *ServedSubscription) admit(v *servedView, meta filter.Object) admission {
	st := ss.current()
	if st != stateEstablished && st != statePendingPublisher || v.filter == nil || !v.filter.Passes(meta) {
		return admitSkip
	}
	if st == stateEstablished {
		return admitSend
	}
	limit := int64(ss.sess.cfg.MaxEarlyObjects)
	for {
		n := ss.early.Load()
		if n >= limit {
			return admitHold
		}
		if ss.early.CompareAndSwap(n, n+1) {
			return admitSend
		}
	}
}

// withheld reports whether an object at l that the subscription refused
// is one it covers, held back only by its Forward State (§11.3.2).
func (v *servedView) withheld(l wire.Location) bool {
	return v.filter != nil && !v.filter.Forward() && v.filter.Window().Contains(l)
}

// missedBefore reports whether a stream opening now for objects first to
// prev of a subgroup of group, all published, may lack some the
// subscription covers: those published before it was served that are not
// before its Start Location (§11.3.2). Range filters are not consulted,
// so a stream may be reset that held everything its ranges wanted.
func (v *servedView) missedBefore(group, first, prev uint64) bool {
	j, ok := v.joined.Get()
	if !ok || j.Group < group || v.filter == nil {
		return false // nothing of the group was published before
	}
	last := prev
	if j.Group == group {
		last = min(prev, j.Object)
	}
	return last >= first && !(wire.Location{Group: group, Object: last}).Less(v.filter.Window().Start)
}

// window returns the resolved Location filter; the zero window without a
// filter.
func (v *servedView) window() filter.Window {
	if v.filter == nil {
		return filter.Window{}
	}
	return v.filter.Window()
}

// skipAction says what an open subgroup stream does with an object at l
// that the subscription's filters refuse.
type skipAction int

const (
	skipReset  skipAction = iota // the stream would miss covered objects
	skipFinish                   // past the window: the stream is complete
	skipKeep                     // a range filter left it out; go on
)

// skipAction decides for a stream opened when the Location filter ended at
// end (if bounded). Only that end completes the stream: one that a
// REQUEST_UPDATE moved below l, like a start moved past it or Forward
// at 0, leaves objects undelivered (§11.3.2, C020).
func (v *servedView) skipAction(l, end wire.Location, bounded bool) skipAction {
	switch {
	case v.filter == nil || !v.filter.Forward():
		return skipReset
	case v.filter.Window().Contains(l):
		return skipKeep
	case bounded && end.Less(l):
		return skipFinish
	}
	return skipReset
}

// resetCodeFor is the stream reset code (§12.5) for the data streams of a
// subscription ending with PUBLISH_DONE code: the matching code where
// §12.5 has one, else CANCELLED, which §12.5 gives for subscriptions whose
// PUBLISH_DONE says more. §12.5 has none for EXPIRED: EXPIRED_AUTH_TOKEN
// is about a token, not the subscription's EXPIRES.
func resetCodeFor(code wire.PublishDoneCode) wire.ResetCode {
	switch code {
	case wire.DoneTooFarBehind:
		return wire.ResetTooFarBehind
	case wire.DoneGoingAway:
		return wire.ResetGoingAway
	case wire.DoneExcessiveLoad:
		return wire.ResetExcessiveLoad
	case wire.DoneMalformedTrack:
		return wire.ResetMalformedTrack
	case wire.DoneInternalError:
		return wire.ResetInternalError
	}
	return wire.ResetCancelled
}

// openDataStream opens a unidirectional stream for this subscription and
// counts it for PUBLISH_DONE's Stream Count.
// Without stream credit at hand it returns a sendq.Pending, which opens
// in the background: a subscriber slow to grant credit must not hold up
// the publisher. Once the subscription's streams have been reset for its
// end, no new one opens, so the count PUBLISH_DONE reads is final.
func (ss *ServedSubscription) openDataStream() (transport.SendStream, error) {
	ss.openMu.RLock()
	defer ss.openMu.RUnlock()
	if ss.closing {
		return nil, errSubscriptionClosing
	}
	str, err := ss.sess.conn.OpenUniStream()
	if err != nil {
		if ss.sess.conn.Context().Err() != nil {
			return nil, ss.sess.closeErr(err)
		}
		if ss.pendingOpens.Load() >= maxPendingOpens {
			ss.fallBehind(fmt.Sprintf("%d data streams waiting for stream credit", maxPendingOpens))
			return nil, errTooFarBehind
		}
		if err := ss.sess.backlog.Charge(pendingOpenCost); err != nil {
			ss.cutOff(wire.DoneExcessiveLoad, err.Error())
			return nil, err
		}
		str = ss.openLater()
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.dataStreams == nil {
		ss.dataStreams = map[transport.SendStream]bool{}
	}
	ss.dataStreams[str] = false
	ss.streams++
	return str, nil
}

// openLater starts opening a data stream for ss in the background.
func (ss *ServedSubscription) openLater() *sendq.Pending {
	s := ss.sess
	openCtx, abandon := context.WithCancel(s.ctx)
	p := sendq.NewPending(s.ctx, abandon, ss.forgetDataStream, ss.uncountDataStream)
	ss.pendingOpens.Add(1)
	s.goroutines.Go(func() {
		defer abandon()
		str, err := s.conn.OpenUniStreamSync(openCtx)
		if err != nil {
			err = s.closeErr(err)
		}
		ss.pendingOpens.Add(-1)
		s.backlog.Release(pendingOpenCost)
		p.Opened(str, err)
	})
	return p
}

// cutFor ends the subscription when its backlog was refused (err is a
// *sendq.CutError): with PUBLISH_DONE TOO_FAR_BEHIND past
// Config.MaxSubscriberBacklog or after a stall, EXCESSIVE_LOAD past its
// session's budgets; either resets its streams first. Other errors are
// left alone.
func (ss *ServedSubscription) cutFor(err error) {
	var ce *sendq.CutError
	switch {
	case !errors.As(err, &ce):
	case errors.Is(ce.Err, errExcessiveLoad):
		ss.cutOff(wire.DoneExcessiveLoad, ce.Error())
	default:
		ss.fallBehind(ce.Reason)
	}
}

// fallBehind ends the subscription with PUBLISH_DONE TOO_FAR_BEHIND, once.
func (ss *ServedSubscription) fallBehind(reason string) {
	ss.cutOff(wire.DoneTooFarBehind, reason)
}

// cutOff ends the subscription with PUBLISH_DONE code, TOO_FAR_BEHIND or
// EXCESSIVE_LOAD, unless it was cut off already. PUBLISH_DONE is sent
// from its own goroutine: its write may wait for the subscriber's flow
// control, and the publisher must not.
func (ss *ServedSubscription) cutOff(code wire.PublishDoneCode, reason string) {
	if ss.cut.CompareAndSwap(nil, &DoneError{Code: code, Reason: reason}) {
		go func() { _ = ss.End(code, reason) }()
	}
}

// cutStatus is the status and reason of the PUBLISH_DONE End sends: the
// cut-off's, once the subscription was cut off, else code and reason.
func (ss *ServedSubscription) cutStatus(code wire.PublishDoneCode, reason string) (wire.PublishDoneCode, string) {
	if d := ss.cut.Load(); d != nil {
		return d.Code, d.Reason
	}
	return code, reason
}

// finishDataStream ends a data stream with a FIN: every object it was to
// carry was written (§11.3.2).
func (ss *ServedSubscription) finishDataStream(str transport.SendStream) {
	if p, ok := str.(*sendq.Pending); ok && p.FinishWhenOpen() {
		ss.endingDataStream(str) // until it opens: see finishWhenOpen
		return
	}
	_ = str.Close()
	ss.forgetDataStream(str)
}

// closeDataStream resets a data stream whose objects will not all be
// delivered (§11.3.2).
func (ss *ServedSubscription) closeDataStream(str transport.SendStream, code wire.ResetCode) {
	str.CancelWrite(uint64(code))
	ss.forgetDataStream(str)
}

// cutLinger is how long, without RESET_STREAM_AT, a cut stream stays open
// before its reset, so that a subscriber reading at pace takes its last
// objects first: a plain reset discards what the peer has not read.
const cutLinger = time.Second

// maxLingering bounds a subscription's cut streams waiting out cutLinger
// at once. Each holds one of the subscriber's stream credits, which a
// stream ended by a FIN gives back as soon as it is read: a publisher
// closing subgroup after subgroup incomplete (header-only streams) would
// otherwise hold them all and have the subscription cut off as too far
// behind. Past the bound a cut stream is reset at once; the subscriber
// may lose its unread end, and learns of the stream from PUBLISH_DONE's
// Stream Count.
const maxLingering = 32

// cutDataStream resets a data stream that lacks objects of its subgroup
// (§11.3.2) but whose written objects are all whole and belong to the
// subscription: joined mid-subgroup, or cut short by Forward 0 or a
// REQUEST_UPDATE. The reset keeps what was written: RESET_STREAM_AT with
// a reliable size covering it, where both ends support it and the
// subscriber's flow control has taken all of it (a larger final size is
// a FLOW_CONTROL_ERROR), or else a reset after cutLinger (at once while
// maxLingering others wait it out). A PUBLISH_DONE or session end meanwhile
// resets it at once, as it does every open stream.
func (ss *ServedSubscription) cutDataStream(str transport.SendStream, code wire.ResetCode) {
	ss.cutDataStreamThen(str, code, nil)
}

// cutDataStreamThen is cutDataStream, calling done, if set, once the
// stream is reset. A lingering stream has nothing more to write: it leaves
// the priority ranking at once, so that many of them cost nothing there.
func (ss *ServedSubscription) cutDataStreamThen(str transport.SendStream, code wire.ResetCode, done func()) {
	if ss.sess.conn.ReliableReset() && str.SetReliableBoundary() {
		ss.closeDataStream(str, code)
		if done != nil {
			done()
		}
		return
	}
	if !ss.startLinger() {
		ss.closeDataStream(str, code)
		if done != nil {
			done()
		}
		return
	}
	ss.sess.priorities().Remove(str)
	ss.endingDataStream(str)
	time.AfterFunc(cutLinger, func() {
		ss.mu.Lock()
		ss.lingering--
		ss.mu.Unlock()
		ss.closeDataStream(str, code)
		if done != nil {
			done()
		}
	})
}

// startLinger counts a cut stream that waits out cutLinger, unless
// maxLingering already do.
func (ss *ServedSubscription) startLinger() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.lingering >= maxLingering {
		return false
	}
	ss.lingering++
	return true
}

// uncountDataStream forgets a stream that was abandoned before it opened:
// it never existed.
func (ss *ServedSubscription) uncountDataStream(str transport.SendStream) {
	ss.mu.Lock()
	ss.streams--
	delete(ss.dataStreams, str)
	ss.mu.Unlock()
	ss.sess.priorities().Remove(str)
}

// maxPendingOpens bounds a subscription's streams waiting for stream
// credit. A subscriber that holds back credit for that many subgroups is
// too far behind. A burst of small groups, faster than a subscriber that
// reads everything can finish its streams and return their credit, must
// not cut it off: 64 did (a file published in one-object groups through
// the relay), so the bound is generous, and what the waiting streams hold
// is within the session's backlog budget (pendingOpenCost each).
const maxPendingOpens = 256

// pendingOpenCost is what a stream waiting for stream credit counts
// against its session's backlog budget, besides its bytes: about what its
// goroutine and state hold. A peer that withholds credit from many
// subscriptions would otherwise make this end hold maxPendingOpens
// goroutines for each.
const pendingOpenCost = 8 << 10

// errSubscriptionClosing refuses a data stream to a subscription that is
// ending.
var errSubscriptionClosing = errors.New("moqt: subscription is ending")

func (ss *ServedSubscription) forgetDataStream(str transport.SendStream) {
	ss.mu.Lock()
	delete(ss.dataStreams, str)
	ss.noteEndingLocked()
	ss.mu.Unlock()
	ss.sess.priorities().Remove(str)
}

// endingDataStream records that str's writer is done with it: what is left
// is its backlog's drain, or a cut stream's linger, before its FIN or
// reset.
func (ss *ServedSubscription) endingDataStream(str transport.SendStream) {
	ss.mu.Lock()
	if _, ok := ss.dataStreams[str]; ok {
		ss.dataStreams[str] = true
	}
	ss.mu.Unlock()
}

// noteEndingLocked wakes closeDataStreams once no ending stream is left.
// ss.mu is held.
func (ss *ServedSubscription) noteEndingLocked() {
	if ss.endingDone == nil {
		return
	}
	for _, ending := range ss.dataStreams {
		if ending {
			return
		}
	}
	close(ss.endingDone)
	ss.endingDone = nil
}

// deliversLast reports whether a subscription ending with code delivers
// the streams its writers have finished before PUBLISH_DONE: all but those
// ended because the subscriber cannot take more, or must not (§12.1).
func deliversLast(code wire.PublishDoneCode) bool {
	switch code {
	case wire.DoneTooFarBehind, wire.DoneExcessiveLoad, wire.DoneMalformedTrack:
		return false
	}
	return true
}

// closeDataStreams closes every data stream before PUBLISH_DONE (C078,
// C081): those still being written are reset with code; with deliver, the
// ending ones (finished by their writers, a backlog or a cut's linger
// left) first finish as they would have, within a bound: a backlog that
// cannot drain ends the subscription TOO_FAR_BEHIND within
// Config.SubscriberGrace, and a linger lasts cutLinger. What is left then
// is reset too. No stream opens after this.
func (ss *ServedSubscription) closeDataStreams(code wire.ResetCode, deliver bool) {
	ss.openMu.Lock()
	ss.closing = true
	ss.openMu.Unlock()
	if !deliver {
		ss.resetDataStreams(code)
		return
	}
	ss.mu.Lock()
	var open []transport.SendStream
	for str, ending := range ss.dataStreams {
		if !ending {
			open = append(open, str)
			delete(ss.dataStreams, str)
		}
	}
	var wait chan struct{}
	if len(ss.dataStreams) > 0 {
		wait = make(chan struct{})
		ss.endingDone = wait
	}
	ss.mu.Unlock()
	prio := ss.sess.priorities()
	for _, str := range open {
		str.CancelWrite(uint64(code))
		prio.Remove(str)
	}
	if wait != nil {
		ss.awaitEnding(wait)
	}
	ss.resetDataStreams(code)
}

// maxEndingWait bounds how long End waits for a subscriber that keeps
// taking data to take the backlogs of the streams already complete.
const maxEndingWait = time.Minute

// awaitEnding waits until wait is closed: the streams complete when End
// came have written their backlogs. It waits while the subscriber takes
// data, up to maxEndingWait, and gives up on one that takes nothing for
// SubscriberGrace plus cutLinger, as on a stalled one: a slow path (a
// lossy link, say) still gets every object of those streams, which a fixed
// bound had reset, losing the end of a file as the publisher exited.
func (ss *ServedSubscription) awaitEnding(wait chan struct{}) {
	quiet := ss.sess.cfg.SubscriberGrace + cutLinger
	limit := time.NewTimer(maxEndingWait)
	defer limit.Stop()
	t := time.NewTimer(quiet)
	defer t.Stop()
	taken := ss.wp.group.Taken()
	for {
		select {
		case <-wait:
			return
		case <-ss.sess.ctx.Done():
			return
		case <-limit.C:
			return
		case <-t.C:
			now := ss.wp.group.Taken()
			if now == taken {
				return
			}
			taken = now
			t.Reset(quiet)
		}
	}
}

// resetDataStreams resets every data stream still open: on cancellation
// (C003) and before PUBLISH_DONE, which must come after all the
// subscription's streams are closed (C078, C081).
func (ss *ServedSubscription) resetDataStreams(code wire.ResetCode) {
	ss.openMu.Lock()
	ss.closing = true
	ss.openMu.Unlock()
	ss.mu.Lock()
	open := ss.dataStreams
	ss.dataStreams = nil
	ss.mu.Unlock()
	prio := ss.sess.priorities()
	for str := range open {
		str.CancelWrite(uint64(code))
		prio.Remove(str)
	}
}

// largestOf converts a LARGEST_OBJECT value to a LargestObject.
func largestOf(l wire.Opt[wire.Location]) filter.LargestObject {
	if l.Set {
		return filter.LargestAt(l.Value)
	}
	return filter.LargestObject{}
}
