package moqt

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// NamespaceSubscription is the requester's end of an accepted
// SUBSCRIBE_NAMESPACE (§9.15) or SUBSCRIBE_TRACKS (§9.18). Next, Prefix
// and Close may be called from different goroutines; Next and Update are
// each not safe for concurrent use with themselves. Messages not yet
// taken by Next wait in a bounded queue, past which the stream is no
// longer read: flow control holds the peer back.
type NamespaceSubscription struct {
	// Params are the parameters of the REQUEST_OK that accepted the
	// request: EXPIRES, if the peer granted one (§9.20.17). Update sets
	// Params.Expires to what its REQUEST_OK grants.
	Params wire.Params

	r      *nsRequester
	tracks bool
	// own is this SUBSCRIBE_TRACKS among the session's (ownTracks), nil
	// for a SUBSCRIBE_NAMESPACE.
	own   *ownTracksRequest
	limit int           // Config.MaxActiveNamespaces
	space chan struct{} // cap 1: Next took an event
	ready chan struct{} // cap 1: an event or the end is there

	mu     sync.Mutex // guards the fields below; a leaf
	prefix wire.Namespace
	active map[wire.NamespaceKey]wire.Namespace // NAMESPACE seen, no NAMESPACE_DONE yet
	events []NamespaceEvent
	finals []wire.Namespace // active when the stream ended, to report Done
	end    error            // why the stream ended, once it did
	closed bool             // Close was called: Next returns end at once
}

// maxQueuedEvents bounds the events waiting for Next; a prefix update's
// Done events may go past it, bounded by the active namespaces.
const maxQueuedEvents = 256

// NamespaceEvent is one report of a NamespaceSubscription.
type NamespaceEvent struct {
	// Namespace is the whole namespace: the subscription's prefix and the
	// suffix the peer sent.
	Namespace wire.Namespace
	// Done reports a NAMESPACE_DONE (§9.17): the namespace is no longer
	// published. Without Done or Skipped, the event is a NAMESPACE (§9.16).
	Done bool
	// Skipped reports a PUBLISH_SKIPPED (§9.19), on a SUBSCRIBE_TRACKS: no
	// PUBLISH will come for the track TrackName in Namespace.
	Skipped   bool
	TrackName []byte
}

var errNamespaceSubClosed = fmt.Errorf("%w: namespace subscription closed", ErrCancelled)

// SubscribeNamespace sends SUBSCRIBE_NAMESPACE for prefix (§9.15) and
// returns once it is accepted; Next reports the namespaces under prefix
// that the peer publishes. A REQUEST_ERROR is returned as *RequestError. If
// ctx ends first, the request is cancelled.
//
// The peer's messages are checked: a first answer other than REQUEST_OK
// or REQUEST_ERROR, a NAMESPACE_DONE with no active NAMESPACE before it,
// or a namespace of more than 32 fields with the prefix, closes the
// session with PROTOCOL_VIOLATION (§9.15, §2.4.1). A NAMESPACE for a
// namespace already active is no news and is not reported again. A peer
// that keeps more than Config.MaxActiveNamespaces active gets the request
// cancelled with EXCESSIVE_LOAD, which Next reports.
func (s *Session) SubscribeNamespace(ctx context.Context, prefix wire.Namespace, params wire.Params) (*NamespaceSubscription, error) {
	return subscribeNamespaces(ctx, s, prefix, params, false)
}

// SubscribeTracks sends SUBSCRIBE_TRACKS for prefix (§9.18) and returns
// once it is accepted. The peer then sends a PUBLISH for each of its tracks
// under prefix: those arrive at the Handler, as every PUBLISH does, as
// *PublishRequest. Next reports the tracks it skips (PUBLISH_SKIPPED).
//
// params are the initial parameters of those subscriptions (§9.18.1). The
// object Range filters among them, which PUBLISH cannot carry, are the
// filters of every subscription a PUBLISH under the prefix starts while
// the request is open, on this end too (Subscription.Params), as they are
// at the publisher. FILL_PARAMETERS are refused with ErrFillOnTracks:
// the draft defines no fill for such subscriptions (§3.4).
func (s *Session) SubscribeTracks(ctx context.Context, prefix wire.Namespace, params wire.Params) (*NamespaceSubscription, error) {
	return subscribeNamespaces(ctx, s, prefix, params, true)
}

func subscribeNamespaces(ctx context.Context, s *Session, prefix wire.Namespace, params wire.Params, tracks bool) (*NamespaceSubscription, error) {
	if err := prefix.Validate(0); err != nil {
		return nil, err
	}
	if tracks && params.FillParameters != nil {
		return nil, ErrFillOnTracks
	}
	where, okCtx, kind := wire.InSubscribeNamespace, wire.InSubscribeNamespaceOK, wire.MsgSubscribeNamespace
	if tracks {
		where, okCtx, kind = wire.InSubscribeTracks, wire.InSubscribeTracksOK, wire.MsgSubscribeTracks
	}
	rs, err := s.openChecked(ctx, &params, where)
	if err != nil {
		return nil, err
	}
	ns := &NamespaceSubscription{
		tracks: tracks,
		limit:  s.cfg.MaxActiveNamespaces,
		space:  make(chan struct{}, 1),
		ready:  make(chan struct{}, 1),
		prefix: cloneNamespace(prefix),
		active: make(map[wire.NamespaceKey]wire.Namespace),
	}
	r := newNSRequester(s, rs, kind, okCtx)
	r.more, r.updated, r.ended = ns.receive, ns.prefixUpdated, ns.streamEnded
	ns.r = r
	var m wire.Message = &wire.SubscribeNamespace{RequestID: rs.id, TrackNamespacePrefix: prefix, Parameters: params}
	if tracks {
		m = &wire.SubscribeTracks{RequestID: rs.id, TrackNamespacePrefix: prefix, Parameters: params}
		ns.own = s.ownTracks.add(prefix, &params)
	}
	if err := r.start(ctx, m); err != nil {
		ns.forget()
		return nil, err
	}
	r.mu.Lock()
	ns.Params = r.params
	r.mu.Unlock()
	return ns, nil
}

// receive applies NAMESPACE, NAMESPACE_DONE and PUBLISH_SKIPPED (reader
// goroutine); which request may carry which was checked already.
func (ns *NamespaceSubscription) receive(m wire.Message) error {
	var suffix wire.Namespace
	var name []byte
	switch m := m.(type) {
	case *wire.NamespaceMsg:
		suffix = m.TrackNamespaceSuffix
	case *wire.NamespaceDone:
		suffix = m.TrackNamespaceSuffix
	case *wire.PublishSkipped:
		suffix, name = m.TrackNamespaceSuffix, m.TrackName
	default:
		return protocolViolation("unexpected %s on %s", m.Type(), ns.r.kind)
	}
	ns.mu.Lock()
	whole := append(cloneNamespace(ns.prefix), cloneNamespace(suffix)...)
	ns.mu.Unlock()
	if err := whole.Validate(len(name)); err != nil {
		return sessionErrorFrom(fmt.Errorf("%s: prefix and suffix: %w", m.Type(), err))
	}
	if err := ns.waitSpace(); err != nil {
		return err
	}
	ns.mu.Lock()
	if ns.end != nil {
		ns.mu.Unlock()
		return errRequesterEnded
	}
	k := whole.Key()
	ev := NamespaceEvent{Namespace: whole}
	switch m.(type) {
	case *wire.NamespaceMsg:
		if _, ok := ns.active[k]; ok {
			ns.mu.Unlock()
			return nil // already active: no news
		}
		if len(ns.active) >= ns.limit {
			ns.mu.Unlock()
			ns.r.cancel(&RequestError{Code: wire.ReqExcessiveLoad,
				Reason: fmt.Sprintf("moqt: peer published more than %d active namespaces (Config.MaxActiveNamespaces)", ns.limit)},
				wire.ResetExcessiveLoad)
			return errRequesterEnded
		}
		ns.active[k] = whole
	case *wire.NamespaceDone:
		if _, ok := ns.active[k]; !ok {
			ns.mu.Unlock()
			return protocolViolation("NAMESPACE_DONE for %s with no active NAMESPACE", whole) // §9.15
		}
		delete(ns.active, k)
		ev.Done = true
	case *wire.PublishSkipped:
		ev.Skipped, ev.TrackName = true, slices.Clone(name)
	}
	ns.events = append(ns.events, ev)
	ns.mu.Unlock()
	signal(ns.ready)
	return nil
}

// waitSpace waits until the queue has room; else it returns what ends
// the read loop: the request's end, or the session's.
func (ns *NamespaceSubscription) waitSpace() error {
	for {
		ns.mu.Lock()
		room := len(ns.events) < maxQueuedEvents
		ns.mu.Unlock()
		if room {
			return nil
		}
		select {
		case <-ns.space:
		case <-ns.r.done:
			return errRequesterEnded
		case <-ns.r.sess.ctx.Done():
			return context.Cause(ns.r.sess.ctx)
		}
	}
}

// prefixUpdated applies an accepted update's TRACK_NAMESPACE_PREFIX
// (reader goroutine, §9.5.2): later suffixes are relative to it, and the
// active namespaces not under it are reported Done.
func (ns *NamespaceSubscription) prefixUpdated(params wire.Params) {
	p := params.TrackNamespacePrefix
	if !p.Set {
		return
	}
	ns.mu.Lock()
	if ns.end != nil {
		ns.mu.Unlock()
		return
	}
	ns.prefix = cloneNamespace(p.Value)
	var gone []wire.Namespace
	for k, a := range ns.active {
		if !a.HasPrefix(ns.prefix) {
			gone = append(gone, a)
			delete(ns.active, k)
		}
	}
	slices.SortFunc(gone, compareNamespaces)
	for _, a := range gone {
		ns.events = append(ns.events, NamespaceEvent{Namespace: a, Done: true})
	}
	ns.mu.Unlock()
	if len(gone) > 0 {
		signal(ns.ready)
	}
}

// streamEnded records the end of the request.
func (ns *NamespaceSubscription) streamEnded(err error) {
	ns.forget()
	ns.mu.Lock()
	if ns.end == nil {
		ns.end = err
		for _, a := range ns.active {
			ns.finals = append(ns.finals, a)
		}
		slices.SortFunc(ns.finals, compareNamespaces)
		ns.active = nil
	}
	ns.mu.Unlock()
	signal(ns.ready)
}

// forget takes a SUBSCRIBE_TRACKS that ended, or was never sent, off the
// session's list: later PUBLISHes are no longer its results.
func (ns *NamespaceSubscription) forget() {
	if ns.own != nil {
		ns.r.sess.ownTracks.remove(ns.own)
	}
}

// Next returns the next event. When the response stream ends, it first
// returns a Done event for every namespace still active (§9.15), then the
// end: io.EOF after the peer's FIN, else the cause (an error wrapping
// *StreamError for the peer's reset, the *RequestError of a refused
// Update or of EXCESSIVE_LOAD, the session's *SessionError). After Close
// it returns an error wrapping ErrCancelled at once. It returns ctx's
// error if ctx ends first.
func (ns *NamespaceSubscription) Next(ctx context.Context) (NamespaceEvent, error) {
	for {
		ns.mu.Lock()
		switch {
		case ns.closed:
			ns.mu.Unlock()
			return NamespaceEvent{}, errNamespaceSubClosed
		case len(ns.events) > 0:
			ev := ns.events[0]
			ns.events[0] = NamespaceEvent{}
			ns.events = ns.events[1:]
			ns.mu.Unlock()
			signal(ns.space)
			return ev, nil
		case ns.end != nil && len(ns.finals) > 0:
			ev := NamespaceEvent{Namespace: ns.finals[0], Done: true}
			ns.finals = ns.finals[1:]
			ns.mu.Unlock()
			return ev, nil
		case ns.end != nil:
			err := ns.end
			ns.mu.Unlock()
			return NamespaceEvent{}, err
		}
		ns.mu.Unlock()
		select {
		case <-ns.ready:
		case <-ctx.Done():
			return NamespaceEvent{}, ctx.Err()
		}
	}
}

// Prefix is the current prefix: the request's, or that of the last
// accepted TRACK_NAMESPACE_PREFIX update.
func (ns *NamespaceSubscription) Prefix() wire.Namespace {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.prefix
}

// Update sends REQUEST_UPDATE (§9.5) and waits for its answer.
// TRACK_NAMESPACE_PREFIX changes the prefix (§9.5.2): the namespaces no
// longer under it are reported Done, and the peer reports those under the
// new one that are not active yet. A refused update (PREFIX_OVERLAP, …)
// returns *RequestError and ends the subscription, whose stream the peer
// closes (§9.5.1). If ctx ends while the update is still being written
// (the peer does not read), the subscription is cancelled: part of the
// update may have left.
func (ns *NamespaceSubscription) Update(ctx context.Context, params wire.Params) error {
	where := wire.InUpdateSubscribeNamespace
	if ns.tracks {
		where = wire.InUpdateSubscribeTracks
	}
	if err := ns.r.sess.rules.checkOwnParams(&params, where); err != nil {
		return err
	}
	if p := params.TrackNamespacePrefix; p.Set {
		if err := p.Value.Validate(0); err != nil {
			return err
		}
		if ns.own != nil {
			// Before it is sent: the peer may PUBLISH under it before
			// its REQUEST_OK arrives.
			ns.r.sess.ownTracks.addPrefix(ns.own, p.Value)
		}
	}
	granted, err := ns.r.update(ctx, params)
	if err != nil {
		return err
	}
	if granted.Expires.Set {
		ns.Params.Expires = granted.Expires
	}
	return nil
}

// Close cancels the request (§6.4.2.3). It is safe to call more than once.
func (ns *NamespaceSubscription) Close() error {
	ns.mu.Lock()
	ns.closed = true
	ns.mu.Unlock()
	ns.r.cancel(errNamespaceSubClosed, wire.ResetCancelled)
	signal(ns.ready)
	return nil
}
