package moqt

import (
	"fmt"
	"sync"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// The Joining FETCH a publisher serves in drafts 18 and 19 (18 §5.1,
// §10.12.2, §10.12.2.1; docs/drafts.md §6). It names a subscription of the
// session by Request ID; the session resolves it to the Standalone range it
// stands for, {Joining Location.Group − Joining Start, 0} (relative) or
// {Joining Start, 0} (absolute) through the Joining Location itself, and
// serves that like any FETCH: with the subscription's LocalTrack (its cache,
// and for a relay the upstream behind it, as fills are served), or, for a
// subscription no LocalTrack serves, through the Handler as a FetchRequest
// whose Params carry the range as LOCATION_FILTER.

// joinPoint is a served subscription's Joining Location and the count of
// its REQUEST_UPDATEs a Joining FETCH must wait for. Its lock is a leaf.
type joinPoint struct {
	mu sync.Mutex
	// loc is the Largest Location communicated in SUBSCRIBE_OK, PUBLISH,
	// or the REQUEST_OK of an update that moved Forward from 0 to 1
	// (18 §5.1); unset while nothing was published.
	loc wire.Opt[wire.Location]
	// received and applied count the REQUEST_UPDATEs handed to the
	// update worker and answered by it.
	received, applied uint64
	changed           chan struct{} // closed and replaced when applied grows
}

func (j *joinPoint) set(l wire.Opt[wire.Location]) {
	j.mu.Lock()
	j.loc = l
	j.mu.Unlock()
}

func (j *joinPoint) location() wire.Opt[wire.Location] {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.loc
}

func (j *joinPoint) updateReceived() {
	j.mu.Lock()
	j.received++
	j.mu.Unlock()
}

func (j *joinPoint) updateApplied() {
	j.mu.Lock()
	j.applied++
	if j.changed != nil {
		close(j.changed)
		j.changed = nil
	}
	j.mu.Unlock()
}

// pending returns how many updates were received so far.
func (j *joinPoint) pending() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.received
}

// appliedThrough reports whether the first n updates are answered, and
// else a channel closed at the next answer.
func (j *joinPoint) appliedThrough(n uint64) (bool, <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.applied >= n {
		return true, nil
	}
	if j.changed == nil {
		j.changed = make(chan struct{})
	}
	return false, j.changed
}

// joinTable is a session's subscriptions as publisher, by Request ID, that
// a Joining FETCH may name: registered when the SUBSCRIBE arrives or this
// end's PUBLISH goes, removed when they are released. A peer's SUBSCRIBE
// is expected from the moment its Request ID is taken until it is
// registered or refused, so that a Joining FETCH read meanwhile waits for
// it rather than finding its ID used and nothing there. Its lock is a leaf.
type joinTable struct {
	mu       sync.Mutex
	byID     map[uint64]*ServedSubscription
	expected map[uint64]struct{}
	changed  chan struct{} // closed and replaced at each add or forget
}

func (t *joinTable) add(ss *ServedSubscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = map[uint64]*ServedSubscription{}
	}
	t.byID[ss.rs.id] = ss
	delete(t.expected, ss.rs.id)
	t.notifyLocked()
}

// expect records a peer's SUBSCRIBE whose Request ID is taken, not yet
// registered.
func (t *joinTable) expect(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.expected == nil {
		t.expected = map[uint64]struct{}{}
	}
	t.expected[id] = struct{}{}
}

// forget ends expect for a SUBSCRIBE refused before it was registered.
func (t *joinTable) forget(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.expected[id]; ok {
		delete(t.expected, id)
		t.notifyLocked()
	}
}

func (t *joinTable) notifyLocked() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

func (t *joinTable) remove(ss *ServedSubscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[ss.rs.id] == ss {
		delete(t.byID, ss.rs.id)
	}
}

// lookup returns the subscription id names, or a channel closed at the
// next registration or forget, and whether id is a SUBSCRIBE expected.
func (t *joinTable) lookup(id uint64) (*ServedSubscription, <-chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ss := t.byID[id]; ss != nil {
		return ss, nil, false
	}
	if t.changed == nil {
		t.changed = make(chan struct{})
	}
	_, expected := t.expected[id]
	return nil, t.changed, expected
}

// admit registers ss for Joining FETCHes, on a draft that has them.
func (t *joinTable) admit(ss *ServedSubscription) {
	if ss.sess.profile().JoiningFetch {
		t.add(ss)
	}
}

// serveJoiningFetch serves a Joining FETCH (18 §10.12.2): once its
// subscription is Established and its pending REQUEST_UPDATEs applied, as
// the Standalone FETCH of the range computed from the Joining Location.
// Until then it is buffered, holding one of the session's served-fetch
// places (Config.MaxServedFetches), for at most Config.FillWait.
func serveJoiningFetch(s *Session, rs *requestStream, m *wire.Fetch, toks []AuthToken) error {
	release, rej := admitFetch(s, m)
	if rej != nil {
		rs.reject(rej)
		return rs.drain()
	}
	ss, lf, rej := joiningRange(s, m)
	if rej != nil {
		release()
		rs.reject(rej)
		return rs.drain()
	}
	params := m.Parameters
	params.LocationFilter = wire.Some(lf)
	r := newFetchRequest(s, rs, ss.track, params, toks, release)
	if t := ss.local.Load(); t != nil {
		in := r.base()
		in.rs.peer = in
		s.handlers.Go(func() { _ = t.Fetch(r) }) // it answers, Accept or Reject
	} else {
		s.handOff(r)
	}
	return rs.serve((*fetchServed)(r))
}

// joiningRange waits for the subscription m joins and returns it with the
// range to serve as a LOCATION_FILTER, or the REQUEST_ERROR (18 §10.12.2,
// §10.12.2.1).
func joiningRange(s *Session, m *wire.Fetch) (*ServedSubscription, wire.LocationFilter, *RequestError) {
	var none wire.LocationFilter
	ss, rej := awaitJoined(s, m.JoiningRequestID)
	if rej != nil {
		return nil, none, rej
	}
	if !ss.Forward() {
		// 18 §10.12.2: a Joining FETCH needs Forward State 1.
		return nil, none, &RequestError{Code: wire.ReqInvalidRange, Reason: "the joined subscription has Forward State 0"}
	}
	jl := ss.join.location()
	if !jl.Set {
		return nil, none, &RequestError{Code: wire.ReqInvalidRange, Reason: "no objects have been published"}
	}
	start, rej := joiningStart(m.FetchType, m.JoiningStart, jl.Value)
	if rej != nil {
		return nil, none, rej
	}
	return ss, wire.RangeFilterToObject(start, jl.Value), nil
}

// joiningStart is the Start Location of a Joining FETCH (18 §10.12.2.1):
// {JL.Group − Joining Start, 0} for a Relative one, clamped at group 0 as
// 21 clamps a relative filter (the text leaves it open), and
// {Joining Start, 0} for an Absolute one, whose End must not precede it.
func joiningStart(typ wire.FetchType, js uint64, jl wire.Location) (wire.Location, *RequestError) {
	if typ == wire.FetchRelativeJoining {
		if js > jl.Group {
			return wire.Location{}, nil
		}
		return wire.Location{Group: jl.Group - js}, nil
	}
	if js > jl.Group {
		return wire.Location{}, &RequestError{Code: wire.ReqInvalidRange,
			Reason: fmt.Sprintf("joining start group %d is after the Joining Location %v", js, jl)}
	}
	return wire.Location{Group: js}, nil
}

// awaitJoined finds the subscription id names and waits until it is
// Established, its opening message written, and the REQUEST_UPDATEs
// received before now applied (18 §10.12.2: "buffers the pending Joining
// Fetch until either the Subscription is established or the request times
// out"; "MUST process any pending REQUEST_UPDATE messages ... before").
// The peer's SUBSCRIBE may still be on its way on another stream: an ID of
// the peer's it has not used yet is waited for too.
func awaitJoined(s *Session, id uint64) (*ServedSubscription, *RequestError) {
	invalid := &RequestError{Code: wire.ReqInvalidJoiningRequestID,
		Reason: fmt.Sprintf("request %d is no subscription of this session", id)}
	timeout := &RequestError{Code: wire.ReqTimeout,
		Reason: fmt.Sprintf("subscription %d not established within %v", id, s.cfg.FillWait)}
	t := time.NewTimer(s.cfg.FillWait)
	defer t.Stop()
	// wait waits for a or b (a nil one never comes).
	wait := func(a, b <-chan struct{}) *RequestError {
		select {
		case <-a:
		case <-b:
		case <-t.C:
			return timeout
		case <-s.ctx.Done():
			return &RequestError{Code: wire.ReqInternalError, Reason: "session closed"}
		}
		return nil
	}
	var ss *ServedSubscription
	for {
		var changed <-chan struct{}
		var expected bool
		if ss, changed, expected = s.joins.lookup(id); ss != nil {
			break
		}
		if !expected && s.ids.peerUsed(id) {
			// Its SUBSCRIBE was expected before its ID was taken: look
			// again, in case both happened since the first look.
			if ss, changed, expected = s.joins.lookup(id); ss != nil {
				break
			}
			if !expected {
				return nil, invalid
			}
		}
		if e := wait(changed, nil); e != nil {
			return nil, e
		}
	}
	n := ss.join.pending()
	for _, ch := range []<-chan struct{}{ss.established, ss.opened} {
		if e := wait(ch, ss.ended()); e != nil {
			return nil, e
		}
		if ss.current() == stateTerminated {
			return nil, invalid
		}
	}
	for {
		if ss.current() != stateEstablished {
			return nil, invalid
		}
		done, ch := ss.join.appliedThrough(n)
		if done {
			return ss, nil
		}
		if e := wait(ch, ss.ended()); e != nil {
			return nil, e
		}
	}
}

// peerUsed reports whether the peer has sent a request with id, or id is
// not of its parity: one it may still send is false.
func (r *requestIDSpace) peerUsed(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id%2 != r.peer.floor%2 {
		return true
	}
	_, ok := r.peer.above[id]
	return ok || id < r.peer.floor
}
