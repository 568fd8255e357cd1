package moqt

import (
	"bytes"
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// FuzzSession's local application: the Handler serving the peer's
// requests, and the operations of a program that act as the application
// on the local session (its track, its own requests).

// handler is the local session's Handler: a ServeMux, as an application
// with tracks and peers of several namespaces would route them. (live)
// is the local track's (serveLive), (peer) the peer's (servePeer), and
// the empty prefix takes the namespace requests for everything.
//
// The session recovers a Handler's panic, as net/http does, which would
// hide one in the library code the Handler calls (LocalTrack.Accept and
// Fetch, Subscription.ReadObject, …) from the fuzzer: the panic fails the
// input here instead.
func (r *fuzzRun) handler() Handler {
	h := r.routes()
	return HandlerFunc(func(req Request) {
		defer func() {
			if v := recover(); v != nil {
				r.t.Errorf("the Handler panicked serving %T: %v\n%s", req, v, debug.Stack())
			}
		}()
		h.ServeMOQT(req)
	})
}

// routes is the Handler that handler guards: DefaultHandler when the
// program's flags say to refuse everything.
func (r *fuzzRun) routes() Handler {
	if r.refuse {
		return DefaultHandler
	}
	mux := NewServeMux()
	mux.HandleFunc(wire.NewNamespace("live"), r.serveLive)
	mux.HandleFunc(wire.NewNamespace("peer"), r.servePeer)
	mux.HandleFunc(wire.Namespace{}, func(req Request) {
		if sn, ok := req.(*SubscribeNamespaceRequest); ok {
			r.serveNamespaces(sn)
			return
		}
		DefaultHandler.ServeMOQT(req)
	})
	return mux
}

// serveLive serves the local track: SUBSCRIBE, FETCH from its cache,
// TRACK_STATUS, and namespace requests under (live).
func (r *fuzzRun) serveLive(req Request) {
	switch req := req.(type) {
	case *SubscribeRequest:
		_, _ = r.track.Accept(req, AcceptOptions{})
	case *FetchRequest:
		if req.Track.Namespace.Equal(fuzzLocalTrack.Namespace) && string(req.Track.Name) == "audio" {
			r.serveFetchByHand(req)
			return
		}
		_ = r.track.Fetch(req)
	case *TrackStatusRequest:
		if !req.Track.Equal(fuzzLocalTrack) {
			_ = req.Reject(wire.ReqDoesNotExist, "no such track")
			return
		}
		_ = r.track.Status(req)
	case *SubscribeNamespaceRequest:
		r.serveNamespaces(req)
	default:
		DefaultHandler.ServeMOQT(req)
	}
}

// serveNamespaces accepts a SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS and
// offers what falls under its prefix, again after each update that
// changes it, until the request ends, as NamespaceWriter.Changed
// suggests: for SUBSCRIBE_NAMESPACE the local track's namespace, and
// (live, b), withdrawn at once; for SUBSCRIBE_TRACKS a PUBLISH of the
// local track if it passes the request's filters, and PUBLISH_SKIPPED
// for (live, a)/audio.
func (r *fuzzRun) serveNamespaces(req *SubscribeNamespaceRequest) {
	w, err := req.Accept(wire.Params{})
	if err != nil {
		return
	}
	skipped := wire.FullTrackName{Namespace: fuzzLocalTrack.Namespace, Name: []byte("audio")}
	other := wire.NewNamespace("live", "b")
	published := false
	for {
		changed, prefix := w.Changed(), w.Prefix()
		switch {
		case !req.Tracks:
			_ = w.Publish(fuzzLocalTrack.Namespace)
			_ = w.Publish(other)
			_ = w.Done(other)
		case fuzzLocalTrack.Namespace.HasPrefix(prefix):
			_ = w.Skip(skipped)
			if !published && w.Wants(nil) {
				published = true
				_, _ = r.track.Publish(req.Context(), req.Session(), wire.Params{}, AcceptOptions{})
			}
		}
		select {
		case <-changed:
		case <-req.Context().Done():
			return
		}
	}
}

// serveFetchByHand answers a FETCH of (live, a)/audio as an application
// with storage of its own does: objects of groups 0 and 1 in the range on
// the data stream, FETCH_OK, then FIN; or the refusal Window gives.
func (r *fuzzRun) serveFetchByHand(req *FetchRequest) {
	start, end, err := req.Window(wire.Some(wire.Location{Group: 1, Object: 1}))
	if err != nil {
		code, reason := wire.ReqInternalError, err.Error()
		if re, ok := errors.AsType[*RequestError](err); ok {
			code, reason = re.Code, re.Reason
		}
		_ = req.Reject(code, reason)
		return
	}
	w := req.Objects()
	for g := start.Group; g <= min(end.Group, 1); g++ {
		for o := range uint64(2) {
			loc := wire.Location{Group: g, Object: o}
			if loc.Less(start) || end.Less(loc) {
				continue
			}
			if err := w.WriteObject(Object{Location: loc, Payload: fuzzZeros[:20]}); err != nil {
				w.Reset(wire.ResetInternalError)
				return
			}
		}
	}
	if err := req.Accept(false, end, nil); err != nil {
		w.Reset(wire.ResetInternalError)
		return
	}
	_ = w.Close()
}

// servePeer takes the peer's PUBLISHes, reading what they bring until
// they end, and its PUBLISH_NAMESPACEs.
func (r *fuzzRun) servePeer(req Request) {
	switch req := req.(type) {
	case *PublishRequest:
		sub, err := req.Accept(wire.Params{})
		if err != nil {
			return
		}
		// Read until the subscription ends: the session's end must end it.
		for {
			if _, err := sub.ReadObject(context.Background()); err != nil {
				return
			}
		}
	case *PublishNamespaceRequest:
		_, _ = req.Accept(wire.Params{})
	case *SubscribeNamespaceRequest:
		r.serveNamespaces(req)
	default:
		DefaultHandler.ServeMOQT(req)
	}
}

// miss is the local track's CacheLimits.Miss: it fetches what the cache
// does not know from the peer, as a relay fetches upstream.
func (r *fuzzRun) miss(ctx context.Context, start, end wire.Location) (*Fetch, error) {
	return r.s.Fetch(ctx, fuzzPeerTrack, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(start, end))})
}

// publish writes n objects of size bytes to the local track's subgroup
// (group, subgroup), then closes it, or resets it.
func (r *fuzzRun) publish(group, subgroup uint64, opts SubgroupOptions, n int, size int, close bool) {
	w := r.track.OpenSubgroup(group, subgroup, opts)
	first := uint64(0)
	if opts.SubgroupIDIsFirstObject {
		first = subgroup
	}
	for i := range uint64(n) {
		if err := w.WriteObject(Object{Location: wire.Location{Group: group, Object: first + i},
			SubgroupID: subgroup, Payload: fuzzZeros[:size]}); err != nil {
			break
		}
	}
	if close {
		_ = w.Close()
	} else {
		w.Reset(wire.ResetCancelled)
	}
}

// opLocalTrack: the local track publishes a subgroup, an object streamed
// (and maybe cut short) or a datagram, sets its Largest Object, or ends.
func (r *fuzzRun) opLocalTrack() {
	p := &r.p
	switch p.pick(5) {
	case 0, 1:
		flags := p.u8()
		group, subgroup := p.num(), p.num()
		opts := SubgroupOptions{EndOfGroup: flags&0x01 != 0, SubgroupIDIsFirstObject: flags&0x02 != 0,
			Joined: flags&0x04 != 0}
		if flags&0x08 != 0 {
			opts.Priority = wire.Some(p.u8())
		}
		r.publish(group, subgroup, opts, 1+p.pick(4), int(r.payload()%(8<<10)), flags&0x10 == 0)
	case 2:
		_ = r.track.WriteDatagram(Object{Location: wire.Location{Group: p.num(), Object: p.num()},
			Payload: fuzzZeros[:p.pick(200)]})
	case 3:
		group, length, written, readFrom := p.num(), r.payload(), r.payload(), p.flag()
		w := r.track.OpenSubgroup(group, 0, SubgroupOptions{})
		if ow, err := w.BeginObject(0, length, nil); err == nil {
			if payload := fuzzZeros[:min(written, length)]; readFrom {
				_, _ = ow.ReadFrom(bytes.NewReader(payload))
			} else {
				_, _ = ow.Write(payload)
			}
			_ = ow.Close()
		}
		_ = w.Close()
	default:
		if p.flag() {
			r.track.SetLargest(wire.Location{Group: p.num(), Object: p.num()})
			return
		}
		r.trackEnded = true
		r.track.End(fuzzDoneCodes[p.pick(len(fuzzDoneCodes))], "fuzz")
	}
}

// opLocalRequest: the local session makes a request, updates or closes
// one it made, shuts down or closes. Requests wait for their answers in
// goroutines of the application, which then read what they get.
func (r *fuzzRun) opLocalRequest() {
	p := &r.p
	kind := p.pick(11)
	s := r.s
	// The operands are read whatever happens, so that the program stays
	// in step; the application has no session before SETUP completes.
	app := func(f func()) {
		if r.setupOK {
			r.goApp(f)
		}
	}
	switch kind {
	case 0:
		track, params, read := p.genTrack(fuzzPeerTrack), p.genParams(), p.pick(3)
		app(func() {
			sub, err := s.Subscribe(r.ctx, track, params)
			if err != nil {
				return
			}
			r.addLibRequest(sub.Close, sub.Update)
			r.readSubscription(sub, read)
		})
	case 1:
		track, params := p.genTrack(fuzzPeerTrack), p.genParams()
		app(func() {
			f, err := s.Fetch(r.ctx, track, params)
			if err != nil {
				return
			}
			r.addLibRequest(f.Close, f.Update)
			for {
				if _, err := f.ReadObject(r.ctx); err != nil {
					return
				}
			}
		})
	case 2, 3:
		prefix, params := p.genNamespace(wire.NewNamespace("peer")), p.genParams()
		call := s.SubscribeNamespace
		if kind == 3 {
			call = s.SubscribeTracks
		}
		app(func() {
			ns, err := call(r.ctx, prefix, params)
			if err != nil {
				return
			}
			r.addLibRequest(ns.Close, ns.Update)
			for {
				if _, err := ns.Next(r.ctx); err != nil {
					return
				}
			}
		})
	case 4:
		track, params := p.genTrack(fuzzPeerTrack), p.genParams()
		app(func() { _, _ = s.TrackStatus(r.ctx, track, params) })
	case 5:
		ns, params := p.genNamespace(fuzzLocalTrack.Namespace), p.genParams()
		app(func() {
			a, err := s.PublishNamespace(r.ctx, ns, params)
			if err != nil {
				return
			}
			r.addLibRequest(a.Close, a.Update)
		})
	case 6:
		params := p.genParams()
		app(func() {
			ss, err := r.track.Publish(r.ctx, s, params, AcceptOptions{})
			if err != nil {
				return
			}
			r.addLibRequest(func() error { return ss.End(wire.DoneTrackEnded, "fuzz") },
				func(context.Context, wire.Params) error { return ss.Notify(params) })
		})
	case 7, 8:
		i, params := int(p.u8()), p.genParams()
		r.mu.Lock()
		var req fuzzLibRequest
		if len(r.libReqs) > 0 {
			req = r.libReqs[i%len(r.libReqs)]
		}
		r.mu.Unlock()
		if req.close == nil {
			return
		}
		if kind == 8 {
			// Closing waits for nothing from the peer.
			_ = req.close()
			return
		}
		app(func() { _ = req.update(r.ctx, params) })
	case 9:
		// The application closes the session while the peer may be in
		// the middle of anything.
		code := []wire.SessionErrorCode{wire.NoError, wire.GoawayTimeout}[p.pick(2)]
		app(func() { _ = s.CloseWithError(code, "application") })
	default:
		wait, uri := time.Duration(p.num())*time.Millisecond, p.text()
		app(func() {
			ctx, cancel := context.WithTimeout(r.ctx, wait)
			defer cancel()
			_ = s.Shutdown(ctx, uri)
		})
	}
}

func (r *fuzzRun) addLibRequest(close func() error, update func(context.Context, wire.Params) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.libReqs = append(r.libReqs, fuzzLibRequest{close: close, update: update})
}

// readSubscription reads a subscription's objects as read says: through
// ReadObject, stream by stream through AcceptSubgroup, or not at all.
func (r *fuzzRun) readSubscription(sub *Subscription, read int) {
	switch read {
	case 0:
		for {
			if _, err := sub.ReadObject(r.ctx); err != nil {
				return
			}
		}
	case 1:
		for {
			sr, err := sub.AcceptSubgroup(r.ctx)
			if err != nil {
				return
			}
			r.goApp(func() {
				defer func() { _ = sr.Close() }()
				buf := make([]byte, 1<<10)
				for {
					if _, err := sr.ReadObject(buf); err != nil {
						return
					}
				}
			})
		}
	}
}
