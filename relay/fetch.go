package relay

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// FETCH (§9.11, §7.4, §7.5). A track the relay has an entry for answers
// from its LocalTrack: its cache, and for the ranges the cache does not
// know, an upstream FETCH to one of the track's publishers (fetchMiss,
// wired as the track's CacheLimits.Miss), so fills of downstream
// SUBSCRIBEs take the same path. A FETCH for a track the relay has no
// entry for, or keeps no cache of, is forwarded whole to a publisher
// (forwardFetch).

// fetchState is what the FETCH routing keeps: the forwarded fetches in
// progress, so that Relay.Close ends them.
type fetchState struct {
	mu      sync.Mutex
	closed  bool
	running map[*forwarded]struct{}
}

// forwarded is one FETCH forwarded upstream.
type forwarded struct {
	cancel context.CancelFunc
}

// errNoPublisher reports a FETCH no publisher can answer.
var errNoPublisher = &moqt.RequestError{Code: wire.ReqDoesNotExist, Reason: "no publisher for the track"}

// serveFetch answers a FETCH, authorized already.
func (rl *Relay) serveFetch(r *moqt.FetchRequest) {
	track, pubs, err := rl.fetchSources(r.Context(), r.Track)
	if track != nil && !rl.cfg.NoCache {
		if _, known := track.Largest(); known {
			rl.reqDone(KindFetch, fetchOutcome(track.Fetch(r)))
			return
		}
	}
	if err != nil {
		rl.log.Warn("relay: upstream", "event", "unavailable", "track", r.Track.String(), "err", err)
	}
	pubs = withoutSession(pubs, r.Session())
	if len(pubs) == 0 {
		_ = r.Reject(wire.ReqDoesNotExist, "no publisher for the track")
		rl.reqDone(KindFetch, OutcomeNotFound)
		return
	}
	rl.reqDone(KindFetch, rl.forwardFetch(r, pubs))
}

// fetchOutcome is the Metrics outcome of a FETCH that ended with err.
func fetchOutcome(err error) string {
	var re *moqt.RequestError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &re) && re.Code == wire.ReqDoesNotExist:
		return OutcomeNotFound
	case errors.As(err, &re):
		return OutcomeRefused
	}
	return OutcomeCancelled
}

// withoutSession returns pubs without s: a FETCH is not sent back to its
// requester.
func withoutSession(pubs []*moqt.Session, s *moqt.Session) []*moqt.Session {
	out := pubs[:0:0]
	for _, p := range pubs {
		if p != s {
			out = append(out, p)
		}
	}
	return out
}

// upstreamFetch sends FETCH for name with params to the first of pubs
// that accepts it (§7.5: at least one of them is asked), and returns its
// Fetch, or the last refusal.
func upstreamFetch(ctx context.Context, pubs []*moqt.Session, name wire.FullTrackName, params wire.Params) (*moqt.Fetch, error) {
	var last error = errNoPublisher
	for _, s := range pubs {
		f, err := s.Fetch(ctx, name, params)
		if err == nil {
			return f, nil
		}
		last = err
		var re *moqt.RequestError
		if ctx.Err() != nil || (errors.As(err, &re) && re.Code == wire.ReqUnsupportedExtension) {
			// Over, or a track this relay must not forward (§3.6):
			// another publisher of the same track would not change it.
			break
		}
	}
	return nil, last
}

// fetchMiss is the CacheLimits.Miss of the relay's track name: a FETCH of
// the range to the track's publishers (§9.11, C055 of §7.5).
func (rl *Relay) fetchMiss(name wire.FullTrackName) func(ctx context.Context, start, end wire.Location) (*moqt.Fetch, error) {
	return func(ctx context.Context, start, end wire.Location) (*moqt.Fetch, error) {
		_, pubs, err := rl.fetchSources(ctx, name)
		if err != nil {
			return nil, err
		}
		return upstreamFetch(ctx, pubs, name, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(start, end))})
	}
}

// forwardParams are the parameters of the FETCH forwarded for one with p:
// what selects and orders the objects. The requester's authorization
// tokens were for this relay; upstream, the relay speaks for itself.
func forwardParams(p wire.Params) wire.Params {
	return wire.Params{
		LocationFilter:     p.LocationFilter,
		GroupOrder:         p.GroupOrder,
		SubscriberPriority: p.SubscriberPriority,
		RangeFilters:       p.RangeFilters,
		FillTimeout:        p.FillTimeout,
		IncludeProperties:  p.IncludeProperties,
	}
}

// forwardFetch serves r with a FETCH to one of pubs: FETCH_OK only once
// the upstream's came (§7.4), with its End, End Of Track and every Track
// Property (§7.6), then the upstream's entries copied in order. It returns
// the Metrics outcome.
func (rl *Relay) forwardFetch(r *moqt.FetchRequest, pubs []*moqt.Session) string {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	fw := &forwarded{cancel: cancel}
	if !rl.fetch.add(fw) {
		_ = r.Reject(wire.ReqGoingAway, "relay closed")
		return OutcomeRefused
	}
	defer rl.fetch.remove(fw)

	up, err := upstreamFetch(ctx, pubs, r.Track, forwardParams(r.Params))
	if err != nil {
		var re *moqt.RequestError
		switch {
		case errors.As(err, &re):
			// The upstream's refusal, UNSUPPORTED_EXTENSION for a
			// Mandatory Track Property this relay does not understand
			// included (§3.6). A REDIRECT was for this relay, and a code
			// this draft does not define reads as INTERNAL_ERROR (§13).
			code := re.Code
			if code == wire.ReqRedirect || !code.Known() {
				code = wire.ReqInternalError
			}
			_ = r.Reject(code, re.Reason)
			return fetchOutcome(err)
		case r.Context().Err() != nil:
			return OutcomeCancelled
		}
		_ = r.Reject(wire.ReqInternalError, "upstream FETCH failed")
		return OutcomeRefused
	}
	defer up.Close() // cancels the upstream fetch unless it is complete
	if err := r.Accept(up.EndOfTrack, up.End, up.Properties); err != nil {
		return OutcomeCancelled
	}
	w := r.Objects()
	for {
		o, err := up.ReadObject(ctx)
		var mt *moqt.MalformedTrackError
		var se *moqt.StreamError
		switch {
		case errors.Is(err, io.EOF):
			_ = w.Close()
			return OutcomeOK
		case errors.As(err, &mt):
			// §12.1: what this relay forwards of a Malformed Track ends.
			w.Reset(wire.ResetMalformedTrack)
			rl.log.Warn("relay: upstream fetch", "event", "malformed", "track", r.Track.String(), "err", err)
			return OutcomeOK
		case errors.As(err, &se) && se.Remote:
			w.Reset(se.Code) // the upstream's reason, passed on
			return OutcomeOK
		case err != nil:
			code := wire.ResetInternalError
			if r.Context().Err() != nil || rl.ctx.Err() != nil {
				code = wire.ResetCancelled
			}
			w.Reset(code)
			return OutcomeOK
		}
		if o.EndOfRange == 0 {
			rl.met.ObjectsIn(1, len(o.Payload))
		}
		if err := w.WriteObject(o); err != nil {
			return OutcomeOK // the requester is gone; the upstream is cancelled
		}
		if o.EndOfRange == 0 {
			rl.met.ObjectsOut(1, len(o.Payload))
		}
	}
}

// add registers f, unless the relay is closed.
func (fs *fetchState) add(f *forwarded) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return false
	}
	if fs.running == nil {
		fs.running = map[*forwarded]struct{}{}
	}
	fs.running[f] = struct{}{}
	return true
}

func (fs *fetchState) remove(f *forwarded) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.running, f)
}

// closeFetches ends the forwarded fetches and refuses new ones. Fetches
// served from a track end with their sessions.
func (rl *Relay) closeFetches() {
	rl.fetch.mu.Lock()
	rl.fetch.closed = true
	list := make([]*forwarded, 0, len(rl.fetch.running))
	for f := range rl.fetch.running {
		list = append(list, f)
	}
	rl.fetch.mu.Unlock()
	for _, f := range list {
		f.cancel()
	}
}

// fetchesEmpty reports that no fetch state is left.
func (rl *Relay) fetchesEmpty() bool {
	rl.fetch.mu.Lock()
	defer rl.fetch.mu.Unlock()
	return len(rl.fetch.running) == 0
}
