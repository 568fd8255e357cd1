package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// upstream is one subscription of the relay to one publisher of a track:
// made with SUBSCRIBE, or offered by the publisher with PUBLISH.
type upstream struct {
	e         *trackEntry
	s         *moqt.Session
	byPublish bool
	// sub is set once the subscription is Established; cancel ends the
	// SUBSCRIBE while it is in flight.
	sub    *moqt.Subscription
	cancel context.CancelFunc
	// sent is the Forward state the publisher has; updating is set while
	// a goroutine brings it to what the track wants.
	sent     bool
	updating bool
	// closing: the relay cancels it; its end is not the track's.
	closing bool
	// newGroup is a NEW_GROUP_REQUEST to send; newGroupBusy is set while a
	// goroutine sends them, one REQUEST_UPDATE at a time.
	newGroup     wire.Opt[uint64]
	newGroupBusy bool
	// sentNewGroup is the NEW_GROUP_REQUEST the SUBSCRIBE carried.
	sentNewGroup wire.Opt[uint64]
	// group is one more than the largest Group ID the publisher sent a
	// subgroup or datagram of; 0 for none yet (aheadOf).
	group atomic.Uint64
}

// noteGroup records that the publisher sent objects of group g.
func (u *upstream) noteGroup(g uint64) {
	for {
		cur := u.group.Load()
		if g < cur || u.group.CompareAndSwap(cur, g+1) {
			return
		}
	}
}

// reachesLocked reports whether u's publisher has reached group g: it
// reported or sent a Location in it or past it. A publisher that restarted
// and numbers its groups from scratch has not: the track's subscribers,
// whose filters start past its objects, would get nothing from it.
func (u *upstream) reachesLocked(g uint64) bool {
	if n := u.group.Load(); n > g {
		return true
	}
	if u.sub != nil {
		if l, ok := u.sub.Largest(); ok && l.Group >= g {
			return true
		}
	}
	return false
}

// run forwards u's subgroups and datagrams until the subscription ends, then
// ends the track downstream if u was its last publisher.
func (u *upstream) run() {
	u.e.awaitJoined()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		u.e.out.datagrams(u)
	}()
	next := make(chan *moqt.SubgroupReader)
	var idle atomic.Int32
	for {
		r, err := u.sub.AcceptSubgroup(context.Background())
		if err != nil {
			break
		}
		u.noteGroup(r.Header().GroupID)
		select {
		case next <- r: // an idle forwarder takes it
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				u.forwardStreams(r, next, &idle)
			}()
		}
	}
	close(next)
	wg.Wait()
	if n := u.sub.DroppedDatagrams(); n > 0 {
		u.e.reg.met.Dropped(DropDatagramQueue, int(n))
	}
	u.e.upstreamEnded(u, u.sub.Err())
}

// maxIdleForwarders is how many goroutines forwarding u's subgroup streams
// wait for the next stream once theirs ended.
const maxIdleForwarders = 2

// forwardStreams forwards r, then the streams run hands it while it is
// one of the maxIdleForwarders waiting, until run closes next. A goroutine
// that forwarded a stream has the stack that forwarding takes: the next
// stream forwarded on it does not grow a new one by copies.
func (u *upstream) forwardStreams(r *moqt.SubgroupReader, next <-chan *moqt.SubgroupReader, idle *atomic.Int32) {
	for {
		u.e.out.subgroup(r)
		if idle.Add(1) > maxIdleForwarders {
			idle.Add(-1)
			return
		}
		var ok bool
		r, ok = <-next
		idle.Add(-1)
		if !ok {
			return
		}
	}
}

// pushForward sends REQUEST_UPDATEs until the publisher's Forward state is
// what the track wants. A refused update ends the subscription
// (UPDATE_FAILED), which run then sees.
func (u *upstream) pushForward() {
	e, reg := u.e, u.e.reg
	for {
		e.mu.Lock()
		want := e.wantForwardLocked()
		if e.dead || u.closing || u.sent == want {
			u.updating = false
			e.forwardChangedLocked()
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		// Forward alone: moving the start too (to the Next Object) would
		// let a subgroup under way end with a FIN rather than a reset
		// (§11.3.2), but a publisher that refused it would end the
		// subscription (UPDATE_FAILED, §9.5.1), and with it the track.
		err := u.update(wire.Params{Forward: wire.Some(want)})
		e.mu.Lock()
		if err != nil {
			u.updating = false
			e.forwardChangedLocked()
			e.mu.Unlock()
			reg.log.Warn("relay: upstream", "event", "update_failed", "track", e.name.String(), "err", err)
			return
		}
		u.sent = want
		e.forwardChangedLocked()
		e.mu.Unlock()
	}
}

// update sends p to the publisher with REQUEST_UPDATE, within
// UpstreamTimeout, and reports the LARGEST_OBJECT of its answer downstream.
func (u *upstream) update(p wire.Params) error {
	e := u.e
	ctx, cancel := context.WithTimeout(e.reg.ctx, e.reg.cfg.UpstreamTimeout)
	err := u.sub.Update(ctx, p)
	cancel()
	if err == nil {
		e.mu.Lock()
		e.noteLargestLocked(u.sub)
		e.mu.Unlock()
	}
	return err
}

// pushNewGroup sends u's NEW_GROUP_REQUESTs, one REQUEST_UPDATE at a time,
// so that a subscriber sending many costs one goroutine per publisher.
func (u *upstream) pushNewGroup() {
	e := u.e
	for {
		e.mu.Lock()
		v := u.newGroup
		u.newGroup = wire.Opt[uint64]{}
		if !v.Set || e.dead || u.closing {
			u.newGroupBusy = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		_ = u.update(wire.Params{NewGroupRequest: v}) // a refusal ends the subscription, which run sees
	}
}

// requestErrorOf is the REQUEST_ERROR to pass downstream for an upstream
// failure: the upstream's own code, TIMEOUT for no answer in time,
// INTERNAL_ERROR for the rest (a session that ended, say).
func requestErrorOf(err error) *moqt.RequestError {
	var re *moqt.RequestError
	switch {
	case errors.As(err, &re):
		if re.Code == wire.ReqRedirect {
			// For this relay, not for its requester, to whom it could not
			// go without the Redirect (§9.4.1).
			return &moqt.RequestError{Code: wire.ReqInternalError, Reason: re.Reason}
		}
		return &moqt.RequestError{Code: re.Code, Reason: re.Reason}
	case errors.Is(err, context.DeadlineExceeded):
		return &moqt.RequestError{Code: wire.ReqTimeout, Reason: "upstream did not answer"}
	}
	return &moqt.RequestError{Code: wire.ReqInternalError, Reason: "upstream: " + err.Error()}
}

// closeAll cancels the upstream subscriptions.
func closeAll(list []*upstream) {
	for _, u := range list {
		if u.sub != nil {
			_ = u.sub.Close()
		} else {
			u.cancel()
		}
	}
}

// dynamicGroups reports whether props have DYNAMIC_GROUPS = 1 (§10.6),
// looked for inside IMMUTABLE_PROPERTIES too (§10.7).
func dynamicGroups(props wire.KVList) bool {
	kv, ok := props.Lookup(wire.PropDynamicGroups)
	return ok && kv.Value == 1
}
