package relay

import (
	"context"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// The request behind a call of Config.Upstream, carried in its ctx, so
// that an Upstream can route by who asks: a coordinated set of relays
// (a cluster) never sends a request that came from one of its own on to
// another, which could loop.

type requesterKey struct{}

type requester struct {
	s         *moqt.Session
	track     wire.FullTrackName
	set       bool // track is set
	published bool // sessions connected to the relay announced it
}

// withRequest returns ctx telling Upstream that s's request for track
// asks; s nil for the relay's own needs (a cache miss).
func withRequest(ctx context.Context, s *moqt.Session, track wire.FullTrackName) context.Context {
	return context.WithValue(ctx, requesterKey{}, requester{s: s, track: track, set: true})
}

// RequestSession returns the session whose SUBSCRIBE, FETCH or
// TRACK_STATUS made the relay call Config.Upstream with ctx; nil when the
// relay asks for its own needs: to fill a track's cache, to announce a
// namespace or discover namespaces upstream.
func RequestSession(ctx context.Context) *moqt.Session {
	r, _ := ctx.Value(requesterKey{}).(requester)
	return r.s
}

// RequestTrack returns the track whose request made the relay call
// Config.Upstream with ctx; false for a namespace's (announcing,
// discovering).
func RequestTrack(ctx context.Context) (wire.FullTrackName, bool) {
	r, _ := ctx.Value(requesterKey{}).(requester)
	return r.track, r.set
}

// RequestPublished reports whether sessions connected to the relay
// announced a prefix of the namespace of the track whose request made the
// relay call an UpstreamSet with ctx: the relay asks those as well, so
// the UpstreamSet need not wait for publishers it does not know yet.
func RequestPublished(ctx context.Context) bool {
	r, _ := ctx.Value(requesterKey{}).(requester)
	return r.published
}

// withPublished returns ctx telling Upstream that sessions connected to
// the relay announced the requested track's namespace.
func withPublished(ctx context.Context) context.Context {
	r, _ := ctx.Value(requesterKey{}).(requester)
	r.published = true
	return context.WithValue(ctx, requesterKey{}, r)
}
