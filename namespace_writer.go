package moqt

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// SubscribeNamespaceRequest is a peer's SUBSCRIBE_NAMESPACE (§9.15) or,
// with Tracks set, SUBSCRIBE_TRACKS (§9.18), handed to the Handler. One
// whose prefix overlaps another open request of the same type on the
// session is refused with PREFIX_OVERLAP before it gets here.
type SubscribeNamespaceRequest struct {
	RequestCommon
	// Prefix is the requested namespace prefix.
	Prefix wire.Namespace
	// Params are the request's parameters. Its AUTHORIZATION_TOKENs are
	// resolved, as USE_VALUE (see AuthorizationTokens).
	Params wire.Params
	// Tracks reports a SUBSCRIBE_TRACKS: the requester wants a PUBLISH
	// for each track under Prefix (LocalTrack.PublishTracks on Session,
	// with NamespaceWriter.Params). One carrying FILL_PARAMETERS is
	// refused with NOT_SUPPORTED before it gets here (ErrFillOnTracks).
	Tracks bool
	// OnUpdate, if set before Accept, is called with the parameters of
	// each REQUEST_UPDATE of the accepted request before the library
	// applies them: a new TRACK_NAMESPACE_PREFIX (§9.5.2; PREFIX_OVERLAP
	// is checked after it), refreshed AUTHORIZATION_TOKENs (resolved, as
	// USE_VALUE), so that the application keeps deciding what it
	// authorized (§9.15). An
	// error refuses the update, which ends the request (§9.5.1); a
	// *RequestError chooses the REQUEST_ERROR code. Calls come one at a
	// time, in order, and the stream is not read meanwhile; the first
	// may come within Accept. Without it every update is accepted.
	OnUpdate func(update *wire.Params) error

	w *NamespaceWriter
}

// Accept answers with REQUEST_OK; only EXPIRES may be set in params, and
// this end then ends the request when it passes unless a REQUEST_UPDATE
// comes first, which renews it. The NamespaceWriter it returns lasts as
// long as the request's Context. It fails if the request has ended
// already: the requester cancelled it, or the session ended.
func (r *SubscribeNamespaceRequest) Accept(params wire.Params) (*NamespaceWriter, error) {
	where := wire.InSubscribeNamespaceOK
	if r.Tracks {
		where = wire.InSubscribeTracksOK
	}
	if err := r.sess.rules.checkOwnParams(&params, where); err != nil {
		return nil, err
	}
	err := r.answer(func() error { return r.w.srv.accept(params, r.OnUpdate) })
	if err != nil {
		return nil, err
	}
	r.w.srv.drainEarly()
	return r.w, nil
}

// NamespaceWriter is the responder's end of an accepted
// SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS. Its methods never block on the
// network: messages are queued, within Config.MaxActiveNamespaces, and
// written in order by a goroutine of its own; a requester that reads none
// of them for Config.SubscriberGrace, or lets the queue fill, gets the
// stream reset with TOO_FAR_BEHIND (§9.15), and the methods fail from then
// on. It is safe for concurrent use, and lasts as long as the request's
// Context.
type NamespaceWriter struct {
	srv    *nsServed
	tracks bool
	// Guarded by srv.mu.
	prefix wire.Namespace
	// params are the request's parameters as its REQUEST_UPDATEs left
	// them, without AUTHORIZATION_TOKENs or TRACK_NAMESPACE_PREFIX.
	params  wire.Params
	offered map[wire.NamespaceKey]wire.Namespace
	sent    map[wire.NamespaceKey]wire.Namespace // offered and sent as NAMESPACE under prefix
	hooks   writerHooks
}

// compareNamespaces orders namespaces field by field, so that what is
// reported in bulk comes in a stable order.
func compareNamespaces(a, b wire.Namespace) int { return slices.CompareFunc(a, b, bytes.Compare) }

// cloneNamespace returns a copy of ns that owns its memory.
func cloneNamespace(ns wire.Namespace) wire.Namespace {
	out := make(wire.Namespace, len(ns))
	for i, f := range ns {
		out[i] = slices.Clone(f)
	}
	return out
}

// Prefix is the current prefix: the request's, or that of the requester's
// last TRACK_NAMESPACE_PREFIX update (§9.5.2).
func (w *NamespaceWriter) Prefix() wire.Namespace {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	return w.prefix
}

// Params returns the request's parameters as the requester's
// REQUEST_UPDATEs left them (§9.5), without its AUTHORIZATION_TOKENs,
// which authorized the request and go nowhere else (§9.20.3), and without
// TRACK_NAMESPACE_PREFIX (see Prefix). For a SUBSCRIBE_TRACKS they are
// the initial parameters of the subscriptions its PUBLISHes start from
// now on (§9.18.1; an update's FORWARD applies to those, not to the
// existing ones, §9.20.19): pass them to LocalTrack.PublishTracks.
func (w *NamespaceWriter) Params() wire.Params {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	p := w.params
	p.RangeFilters = cloneRangeFilters(p.RangeFilters)
	return p
}

// ownParams returns p, the request's or an update's parameters, as Params
// keeps them: its own copy.
func ownParams(p wire.Params) wire.Params {
	p.AuthorizationTokens = nil
	p.TrackNamespacePrefix = wire.Opt[wire.Namespace]{}
	p.RangeFilters = cloneRangeFilters(p.RangeFilters)
	return p
}

// errOfferRefused is Publish's when the session's backlog budget refuses
// the namespace: the request ends as for a queue it refused.
var errOfferRefused = errors.New("moqt: namespace not held: backlog budget spent")

var (
	errNotTracks    = errors.New("moqt: PUBLISH_SKIPPED is only for a SUBSCRIBE_TRACKS")
	errNotNamespace = errors.New("moqt: NAMESPACE and NAMESPACE_DONE are only for a SUBSCRIBE_NAMESPACE")
)

// Publish reports ns as published (NAMESPACE, §9.16), on a
// SUBSCRIBE_NAMESPACE. ns is remembered: it is sent if it falls under the
// prefix, now or after a prefix update, once. Publishing it again is a
// no-op.
func (w *NamespaceWriter) Publish(ns wire.Namespace) error {
	if isSessionNamespace(ns) {
		return errSessionNamespacePublish // §6.5
	}
	return w.changeNamespace(ns, func(k wire.NamespaceKey) (wire.Message, error) {
		if _, ok := w.offered[k]; ok {
			return nil, nil
		}
		own := cloneNamespace(ns)
		// What is offered is held for the requester until the request
		// ends, as its queue is: within the session's backlog budget.
		size := offeredSize(own)
		if w.srv.sess.backlog.Charge(size) != nil {
			w.srv.spent = true
			return nil, errOfferRefused
		}
		w.srv.offered += size
		w.offered[k] = own
		if !own.HasPrefix(w.prefix) {
			return nil, nil
		}
		w.sent[k] = own
		return &wire.NamespaceMsg{TrackNamespaceSuffix: own[len(w.prefix):]}, nil
	})
}

// Done withdraws ns (NAMESPACE_DONE, §9.17), on a SUBSCRIBE_NAMESPACE: it
// is sent only if the NAMESPACE was, and ns is no longer offered.
func (w *NamespaceWriter) Done(ns wire.Namespace) error {
	return w.changeNamespace(ns, func(k wire.NamespaceKey) (wire.Message, error) {
		if ns, ok := w.offered[k]; ok {
			size := offeredSize(ns)
			w.srv.offered -= size
			w.srv.sess.backlog.Release(size)
			delete(w.offered, k)
		}
		sent, was := w.sent[k]
		if !was {
			return nil, nil
		}
		delete(w.sent, k)
		return &wire.NamespaceDone{TrackNamespaceSuffix: sent[len(w.prefix):]}, nil
	})
}

// Skip reports that no PUBLISH will come for track (PUBLISH_SKIPPED,
// §9.19), on a SUBSCRIBE_TRACKS; track must be under the prefix.
func (w *NamespaceWriter) Skip(track wire.FullTrackName) error {
	if !w.tracks {
		return errNotTracks
	}
	if err := track.Namespace.Validate(len(track.Name)); err != nil {
		return err
	}
	return w.change(func() (wire.Message, error) {
		if !track.Namespace.HasPrefix(w.prefix) {
			return nil, fmt.Errorf("moqt: track %s is not under the prefix %s", track, w.prefix)
		}
		own := cloneNamespace(track.Namespace)
		return &wire.PublishSkipped{TrackNamespaceSuffix: own[len(w.prefix):], TrackName: slices.Clone(track.Name)}, nil
	})
}

// changeNamespace is change for a NAMESPACE or NAMESPACE_DONE about ns,
// which only a SUBSCRIBE_NAMESPACE carries.
func (w *NamespaceWriter) changeNamespace(ns wire.Namespace, f func(wire.NamespaceKey) (wire.Message, error)) error {
	if w.tracks {
		return errNotNamespace
	}
	if err := ns.Validate(0); err != nil {
		return err
	}
	k := ns.Key()
	return w.change(func() (wire.Message, error) { return f(k) })
}

// change runs f under the writer's lock, unless the request is over, and
// queues the message f returns, if any. A full queue means the requester
// is too far behind: the request ends.
func (w *NamespaceWriter) change(f func() (wire.Message, error)) error {
	w.srv.mu.Lock()
	if err := w.srv.usableLocked(); err != nil {
		w.srv.mu.Unlock()
		return err
	}
	m, err := f()
	ok := err != errOfferRefused && (err != nil || m == nil || w.srv.pushLocked(m))
	w.srv.mu.Unlock()
	if !ok {
		w.srv.behind(errNamespaceQueueFull)
		return errNamespaceQueueFull
	}
	return err
}

// End ends the request by resetting its stream with code (§6.4.2.3).
func (w *NamespaceWriter) End(code wire.ResetCode) {
	w.srv.terminate(fmt.Errorf("%w: namespace request ended by this end (%v)", ErrCancelled, code), code)
}

// updatePrefix applies a TRACK_NAMESPACE_PREFIX (§9.5.2), under srv.mu:
// the new prefix must not overlap another open request of the type; what
// was sent and is not under it is forgotten (the requester drops it too),
// and what is offered and falls under it follows the REQUEST_OK.
func (w *NamespaceWriter) updatePrefix(u *wire.RequestUpdate) ([]wire.Message, *RequestError) {
	p := u.Parameters.TrackNamespacePrefix
	if !p.Set {
		return nil, nil
	}
	np := cloneNamespace(p.Value)
	if !w.srv.sess.nsPrefixes.claim(w.tracks, w.srv.rs, np) {
		return nil, &RequestError{Code: wire.ReqPrefixOverlap, Reason: "prefix overlaps another request's"}
	}
	w.prefix = np
	for k, ns := range w.sent {
		if !ns.HasPrefix(np) {
			delete(w.sent, k)
		}
	}
	var now []wire.Namespace
	for k, ns := range w.offered {
		if _, sent := w.sent[k]; !sent && ns.HasPrefix(np) {
			now = append(now, ns)
		}
	}
	slices.SortFunc(now, compareNamespaces)
	out := make([]wire.Message, 0, len(now))
	for _, ns := range now {
		w.sent[ns.Key()] = ns
		out = append(out, &wire.NamespaceMsg{TrackNamespaceSuffix: ns[len(np):]})
	}
	return out, nil
}

// serveSubscribeNamespace hands a SUBSCRIBE_NAMESPACE to the Handler.
func serveSubscribeNamespace(s *Session, rs *requestStream, m *wire.SubscribeNamespace, toks []AuthToken) error {
	return serveNamespaceSubscription(s, rs, m.TrackNamespacePrefix, m.Parameters, toks, false)
}

// serveSubscribeTracks hands a SUBSCRIBE_TRACKS to the Handler.
func serveSubscribeTracks(s *Session, rs *requestStream, m *wire.SubscribeTracks, toks []AuthToken) error {
	return serveNamespaceSubscription(s, rs, m.TrackNamespacePrefix, m.Parameters, toks, true)
}

// serveNamespaceSubscription claims the request's prefix, refusing one
// that overlaps with PREFIX_OVERLAP (§9.15, §9.18), and hands it to the
// Handler. The prefix's field count was checked as it was read.
func serveNamespaceSubscription(s *Session, rs *requestStream, prefix wire.Namespace, params wire.Params,
	toks []AuthToken, tracks bool) error {
	if err := checkRanges(&params, s.cfg.MaxFilterRanges); err != nil {
		rs.reject(asRequestError(err)) // §3.3.2: this end's MAX_FILTER_RANGES
		return rs.drain()
	}
	if tracks && params.FillParameters != nil {
		// Served without its fills, it would drop them; none can be
		// made (namespace_tracks.go).
		rs.reject(fillOnTracksRefusal())
		return rs.drain()
	}
	if !s.nsPrefixes.claim(tracks, rs, prefix) {
		rs.reject(&RequestError{Code: wire.ReqPrefixOverlap, Reason: "prefix overlaps another request's"})
		return rs.drain()
	}
	defer s.nsPrefixes.release(tracks, rs)
	kind := wire.MsgSubscribeNamespace
	if tracks {
		kind = wire.MsgSubscribeTracks
	}
	req := &SubscribeNamespaceRequest{
		RequestCommon: newIncoming(rs, toks, prefix),
		Prefix:        prefix,
		Params:        params,
		Tracks:        tracks,
	}
	srv := newNSServed(&req.RequestCommon, kind)
	w := &NamespaceWriter{srv: srv, tracks: tracks, prefix: prefix, params: ownParams(params),
		offered: make(map[wire.NamespaceKey]wire.Namespace), sent: make(map[wire.NamespaceKey]wire.Namespace)}
	w.hooks.setFilters(params.RangeFilters)
	srv.update = w.update
	srv.onEnd = func() { s.nsPrefixes.release(tracks, rs) }
	req.w = w
	req.rejected = srv.rejected
	req.unclaim = srv.onEnd
	s.handOff(req)
	return rs.serve(srv)
}
