package relay

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// fetcher serves FETCH (§9.11, §7.4, §7.5). A track the relay has an
// entry for answers from its LocalTrack: its cache, and for the ranges the
// cache does not know, an upstream FETCH to one of the track's publishers
// (fetchMiss, wired as the track's CacheLimits.Miss), so fills of
// downstream SUBSCRIBEs take the same path. A FETCH for a track the relay
// has no entry for, or keeps no cache of, is forwarded whole to a
// publisher (forwardFetch). Its lock is a leaf.
type fetcher struct {
	env
	src fetchSources

	mu     sync.Mutex
	closed bool
	// running are the forwarded fetches in progress, which close ends.
	running map[*forwarded]struct{}
}

// fetchSources finds where a track's objects are: the registry.
type fetchSources interface {
	// fetchSources returns the relay's LocalTrack for name, nil when it
	// has no entry (its cache, Config.Cache, answers with LocalTrack.Fetch
	// what it holds), and the publishers to ask upstream for the rest, in
	// order of preference: those with an Established upstream
	// subscription, then sessions that announced a matching namespace,
	// then Config.Upstream's session (when none of those, or, for an
	// UpstreamSet, its sessions in any case). An error only when
	// Config.Upstream fails with none of the others to ask.
	fetchSources(ctx context.Context, name wire.FullTrackName) (*moqt.LocalTrack, []*moqt.Session, error)
}

func newFetcher(v env, src fetchSources) *fetcher {
	return &fetcher{env: v, src: src, running: map[*forwarded]struct{}{}}
}

// forwarded is one FETCH forwarded upstream.
type forwarded struct {
	cancel context.CancelFunc
}

// errNoPublisher reports a FETCH no publisher can answer.
var errNoPublisher = &moqt.RequestError{Code: wire.ReqDoesNotExist, Reason: "no publisher for the track"}

// serve answers a FETCH, authorized already, before it returns.
func (f *fetcher) serve(r *moqt.FetchRequest) {
	track, pubs, err := f.src.fetchSources(withRequest(r.Context(), r.Session(), r.Track), r.Track)
	if track != nil && !f.cfg.NoCache {
		if _, known := track.Largest(); known {
			f.reqDone(KindFetch, fetchOutcome(track.Fetch(r)))
			return
		}
	}
	if err != nil {
		f.log.Warn("relay: upstream", "event", "unavailable", "track", r.Track.String(), "err", err)
	}
	pubs = withoutSession(pubs, r.Session())
	if len(pubs) == 0 {
		_ = r.Reject(wire.ReqDoesNotExist, "no publisher for the track")
		f.reqDone(KindFetch, OutcomeNotFound)
		return
	}
	f.reqDone(KindFetch, f.forwardFetch(r, pubs))
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
// Fetch, or the last refusal, and the Range filters the relay must apply
// itself (fetchFrom). A publisher that refuses makes way for the next at
// once; one that has not answered within fetchStagger is kept waiting
// beside the next: asked strictly in turn, a publisher that never answers
// held every FETCH of its namespace for the whole of ctx. The first to
// accept wins; the others' FETCHes are cancelled, or closed if accepted
// too late.
func upstreamFetch(ctx context.Context, pubs []*moqt.Session, name wire.FullTrackName, params wire.Params) (*moqt.Fetch, *filter.RangeMatcher, error) {
	if len(pubs) == 0 {
		return nil, nil, errNoPublisher
	}
	type answer struct {
		f     *moqt.Fetch
		local *filter.RangeMatcher
		err   error
	}
	askCtx, cancel := context.WithCancel(ctx)
	answers := make(chan answer, len(pubs))
	stagger := time.NewTimer(fetchStagger)
	defer stagger.Stop()
	asked, waiting := 0, 0
	askNext := func() {
		s := pubs[asked]
		asked++
		waiting++
		stagger.Reset(fetchStagger)
		go func() {
			f, local, err := fetchFrom(askCtx, s, name, params)
			answers <- answer{f, local, err}
		}()
	}
	// finish cancels the FETCHes still waiting and closes any accepted
	// after the outcome was settled.
	finish := func() {
		cancel()
		for range waiting {
			go func() {
				if a := <-answers; a.err == nil {
					_ = a.f.Close()
				}
			}()
		}
	}
	askNext()
	var last error
	for waiting > 0 {
		select {
		case a := <-answers:
			waiting--
			if a.err == nil {
				finish()
				return a.f, a.local, nil
			}
			last = a.err
			var re *moqt.RequestError
			if ctx.Err() != nil || (errors.As(a.err, &re) && re.Code == wire.ReqUnsupportedExtension) {
				// Over, or a track this relay must not forward (§3.6):
				// another publisher of the same track would not change it.
				finish()
				return nil, nil, last
			}
			if asked < len(pubs) {
				askNext()
			}
		case <-stagger.C:
			if asked < len(pubs) {
				askNext()
			}
		}
	}
	cancel()
	return nil, nil, last
}

// fetchStagger is how long upstreamFetch waits for one publisher's answer
// before asking the next one too.
const fetchStagger = 500 * time.Millisecond

// fetchFrom sends s a FETCH for name with params, fitted to what the
// publisher's session can carry:
//
//   - A relative LOCATION_FILTER (§9.20.10) has no form in the Standalone
//     FETCH of drafts 18 and 19, whose range is absolute (18 §10.12.1),
//     and the session refuses to send one (wire.ErrNotInDraft): it is
//     resolved first against the publisher's Largest Object, asked with
//     TRACK_STATUS, into the range a draft 21 publisher would serve for it
//     (§9.11: from the start through the Largest Object), and a start past
//     that object is INVALID_RANGE, as such a publisher answers.
//   - Range filters (§3.3.2) that draft 18 lacks, or more Ranges than the
//     publisher's MAX_FILTER_RANGES allows (moqt.ErrFilterRanges), are
//     left out upstream and returned, for the relay to apply to what comes
//     (a filtered FETCH's gaps say nothing, §9.11).
func fetchFrom(ctx context.Context, s *moqt.Session, name wire.FullTrackName, params wire.Params) (*moqt.Fetch, *filter.RangeMatcher, error) {
	f, err := s.Fetch(ctx, name, params)
	var local *filter.RangeMatcher
	if len(params.RangeFilters) > 0 && (errors.Is(err, wire.ErrNotInDraft) || errors.Is(err, moqt.ErrFilterRanges)) {
		m := filter.CompileRanges(params.RangeFilters)
		local = &m
		params.RangeFilters = nil
		f, err = s.Fetch(ctx, name, params)
	}
	lf := params.LocationFilter.Value
	if !errors.Is(err, wire.ErrNotInDraft) || !params.LocationFilter.Set || !lf.IsRelative() {
		return f, local, err
	}
	st, err := s.TrackStatus(ctx, name, wire.Params{})
	if err != nil {
		return nil, nil, err
	}
	largest := filter.LargestObject{}
	if st.Largest.Set {
		largest = filter.LargestAt(st.Largest.Value)
	}
	w, err := filter.FetchWindow(lf, largest)
	var fe *filter.Error
	if errors.As(err, &fe) {
		return nil, nil, &moqt.RequestError{Code: fe.Code, Reason: fe.Reason}
	}
	params.LocationFilter = wire.Some(wire.RangeFilterToObject(w.Start, w.End))
	f, err = s.Fetch(ctx, name, params)
	return f, local, err
}

// fetchMiss is the CacheLimits.Miss of the relay's track name: a FETCH of
// the range to the track's publishers (§9.11, C055 of §7.5).
func (f *fetcher) fetchMiss(name wire.FullTrackName) func(ctx context.Context, start, end wire.Location) (*moqt.Fetch, error) {
	return func(ctx context.Context, start, end wire.Location) (*moqt.Fetch, error) {
		_, pubs, err := f.src.fetchSources(withRequest(ctx, nil, name), name)
		if err != nil {
			return nil, err
		}
		f, _, err := upstreamFetch(ctx, pubs, name, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(start, end))})
		return f, err
	}
}

// forwardParams are the parameters of the FETCH forwarded for one with p:
// what selects and orders the objects. The requester's authorization
// tokens were for this relay; upstream, the relay speaks for itself. Its
// INCLUDE_PROPERTIES stays here too: the relay needs the upstream's Track
// Properties to refuse a track with a Mandatory Track Property it does not
// understand (§3.6), its own FETCH_OK leaves them out as the requester
// asked (§9.20.22), and drafts 18 and 19 have no such parameter.
func forwardParams(p wire.Params) wire.Params {
	return wire.Params{
		LocationFilter:     p.LocationFilter,
		GroupOrder:         p.GroupOrder,
		SubscriberPriority: p.SubscriberPriority,
		RangeFilters:       p.RangeFilters,
		FillTimeout:        p.FillTimeout,
	}
}

// forwardFetch serves r with a FETCH to one of pubs: FETCH_OK only once
// the upstream's came (§7.4), with its End, End Of Track and every Track
// Property (§7.6), then the upstream's entries copied in order. It returns
// the Metrics outcome.
func (f *fetcher) forwardFetch(r *moqt.FetchRequest, pubs []*moqt.Session) string {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	fw := &forwarded{cancel: cancel}
	if !f.add(fw) {
		_ = r.Reject(wire.ReqGoingAway, "relay closed")
		return OutcomeRefused
	}
	defer f.remove(fw)

	up, local, err := upstreamFetch(ctx, pubs, r.Track, forwardParams(r.Params))
	if err != nil {
		var re *moqt.RequestError
		switch {
		case errors.As(err, &re):
			// The upstream's refusal, UNSUPPORTED_EXTENSION for a
			// Mandatory Track Property this relay does not understand
			// included (§3.6).
			rejectWith(r, requestErrorOf(err))
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
			f.log.Warn("relay: upstream fetch", "event", "malformed", "track", r.Track.String(), "err", err)
			return OutcomeOK
		case errors.As(err, &se) && se.Remote:
			w.Reset(se.Code) // the upstream's reason, passed on
			return OutcomeOK
		case err != nil:
			code := wire.ResetInternalError
			if r.Context().Err() != nil || f.ctx.Err() != nil {
				code = wire.ResetCancelled
			}
			w.Reset(code)
			return OutcomeOK
		}
		if o.EndOfRange == 0 {
			f.met.ObjectsIn(1, len(o.Payload))
			if local != nil && !local.Match(&filter.Object{Location: o.Location, SubgroupID: o.SubgroupID,
				Datagram: o.Datagram, PublisherPriority: o.Priority.Value, Properties: o.Properties}) {
				continue // the requester's Range filters, which the publisher could not take
			}
		}
		if err := w.WriteObject(o); err != nil {
			return OutcomeOK // the requester is gone; the upstream is cancelled
		}
		if o.EndOfRange == 0 {
			f.met.ObjectsOut(1, len(o.Payload))
		}
	}
}

// add registers fw, unless the relay is closed.
func (f *fetcher) add(fw *forwarded) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.running[fw] = struct{}{}
	return true
}

func (f *fetcher) remove(fw *forwarded) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, fw)
}

// close ends the forwarded fetches and refuses new ones (Relay.Close).
// Fetches served from a track end with their sessions.
func (f *fetcher) close() {
	f.mu.Lock()
	f.closed = true
	list := make([]*forwarded, 0, len(f.running))
	for fw := range f.running {
		list = append(list, fw)
	}
	f.mu.Unlock()
	for _, fw := range list {
		fw.cancel()
	}
}

// empty reports that no fetch is left (tests).
func (f *fetcher) empty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running) == 0
}
