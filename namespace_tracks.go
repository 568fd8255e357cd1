package moqt

import (
	"slices"
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// The parameters of a SUBSCRIBE_TRACKS are the initial parameters of the
// subscriptions its PUBLISHes start (§9.18.1), on both ends. PUBLISH
// carries those it may (§9.8); the object Range filters it cannot carry
// (§3.3.2 names SUBSCRIBE, FETCH, SUBSCRIBE_TRACKS and REQUEST_UPDATE only)
// are applied by the publisher all the same (LocalTrack.PublishTracks),
// and the subscriber, who sent them, holds them on its end of each such
// subscription (ownTracksRequests), so that both ends agree on the
// subscription's filters as they do for a SUBSCRIBE: what the subscriber
// checks on receipt, what a REQUEST_UPDATE replaces, and whether a FIN can
// cut a subgroup short (§12.1).
//
// FILL_PARAMETERS are refused on both ends (ErrFillOnTracks): §3.4 has the
// fill fetch stream's FETCH_HEADER carry "the SUBSCRIBE Request ID for the
// initial fill, or the REQUEST_UPDATE Request ID for a subsequent fill",
// and §3.4.1 opens one on a SUBSCRIBE or REQUEST_UPDATE only. A PUBLISH
// cannot carry FILL_PARAMETERS (§9.20.16), so its receiver learns of no
// fill; the SUBSCRIBE_TRACKS's Request ID would name every track it
// matches at once (§11.4.1: "all objects on the stream belong to the track
// requested in the message identified by Request ID"); and the PUBLISH's
// was allocated by the publisher, which a receiver that routes
// FETCH_HEADERs by its own requests' IDs (as this one does, fetch_route.go)
// takes for a protocol violation. A REQUEST_UPDATE with FILL_PARAMETERS on
// each subscription is the defined way (§9.5.1).

// fillOnTracksReason says why FILL_PARAMETERS in SUBSCRIBE_TRACKS are
// refused (see above), and what to do instead.
const fillOnTracksReason = "FILL_PARAMETERS in SUBSCRIBE_TRACKS: no Request ID is defined for the fill of a " +
	"PUBLISH-initiated subscription (§3.4); send REQUEST_UPDATE with FILL_PARAMETERS on the subscription"

// fillOnTracksRefusal is the REQUEST_ERROR a peer's SUBSCRIBE_TRACKS with
// FILL_PARAMETERS gets.
func fillOnTracksRefusal() *RequestError {
	return &RequestError{Code: wire.ReqNotSupported, Reason: fillOnTracksReason}
}

// objectRangeFilters returns a copy of the object Range filters in fs
// (SUBGROUP_, OBJECTID_, PRIORITY_ and OBJECT_PROPERTY_FILTER): those a
// subscription applies to objects. TRACK_PROPERTY_FILTERs chose the
// tracks and removals (Clear) are not filters; nil when none is left.
func objectRangeFilters(fs []wire.RangeFilter) []wire.RangeFilter {
	var out []wire.RangeFilter
	for _, f := range fs {
		if f.Clear || f.Type == wire.ParamTrackPropertyFilter {
			continue
		}
		f.Ranges = slices.Clone(f.Ranges)
		out = append(out, f)
	}
	return out
}

// cloneRangeFilters returns a copy of fs that shares no memory with it.
func cloneRangeFilters(fs []wire.RangeFilter) []wire.RangeFilter {
	if fs == nil {
		return nil
	}
	out := make([]wire.RangeFilter, len(fs))
	for i, f := range fs {
		f.Ranges = slices.Clone(f.Ranges)
		out[i] = f
	}
	return out
}

// maxTracksPrefixes bounds the prefixes remembered per SUBSCRIBE_TRACKS.
const maxTracksPrefixes = 8

// ownTracksRequests are the SUBSCRIBE_TRACKS requests this end has open
// on the session, in the order they were sent, so that a PUBLISH under one
// of their prefixes gets its object Range filters (servePublish). The
// responder refuses a prefix that overlaps another open SUBSCRIBE_TRACKS
// (§9.18), so at most one matches once answered; while two overlapping
// ones await their answer the older one, which the peer took first,
// wins. mu is a leaf.
type ownTracksRequests struct {
	mu   sync.Mutex
	list []*ownTracksRequest
}

// ownTracksRequest is one SUBSCRIBE_TRACKS of ownTracksRequests.
type ownTracksRequest struct {
	ranges []wire.RangeFilter // immutable
	// prefixes are the request's prefix and those of its
	// TRACK_NAMESPACE_PREFIX updates, newest last, at most
	// maxTracksPrefixes: a PUBLISH the peer sent under the old prefix can
	// arrive after the update's answer, and one under a new prefix before
	// it (§9.5.2: an update leaves existing subscriptions as they are).
	// Guarded by ownTracksRequests.mu.
	prefixes []wire.Namespace
}

// add registers a SUBSCRIBE_TRACKS for prefix with params before it is
// sent, so that no PUBLISH it causes can come first.
func (o *ownTracksRequests) add(prefix wire.Namespace, params *wire.Params) *ownTracksRequest {
	r := &ownTracksRequest{ranges: objectRangeFilters(params.RangeFilters), prefixes: []wire.Namespace{cloneNamespace(prefix)}}
	o.mu.Lock()
	o.list = append(o.list, r)
	o.mu.Unlock()
	return r
}

// addPrefix records a prefix r's update asks for, before it is sent.
func (o *ownTracksRequests) addPrefix(r *ownTracksRequest, prefix wire.Namespace) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(r.prefixes) == maxTracksPrefixes {
		r.prefixes = slices.Delete(r.prefixes, 0, 1)
	}
	r.prefixes = append(r.prefixes, cloneNamespace(prefix))
}

// remove forgets r, which has ended.
func (o *ownTracksRequests) remove(r *ownTracksRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i := slices.Index(o.list, r); i >= 0 {
		o.list = slices.Delete(o.list, i, i+1)
	}
}

// rangesFor returns the object Range filters of the SUBSCRIBE_TRACKS a
// PUBLISH in namespace ns answers, nil if none of them has any or none
// matches: a copy, the subscription's own.
func (o *ownTracksRequests) rangesFor(ns wire.Namespace) []wire.RangeFilter {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.list {
		for _, p := range r.prefixes {
			if ns.HasPrefix(p) {
				return objectRangeFilters(r.ranges)
			}
		}
	}
	return nil
}
