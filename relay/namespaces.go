package relay

// The router's records (router.go): what it keeps of each namespace and
// namespace request, all guarded by router.mu.

import (
	"bytes"
	"context"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// KindSubscribeTracks is the Metrics kind of a SUBSCRIBE_TRACKS.
const KindSubscribeTracks = "subscribe_tracks"

// defaultMaxNamespaceMatches is Config.MaxNamespaceMatches's default.
const defaultMaxNamespaceMatches = 1024

// nsEntry is one namespace the relay offers, with where it comes from.
type nsEntry struct {
	ns     wire.Namespace
	local  map[*localAnn]struct{}
	remote map[*upDisc]*moqt.Session // the upstream session that reported it
	subs   map[*nsSub]struct{}       // the subscribers it is offered to
	// outside counts the offers of Relay.OfferNamespace.
	outside int
	// fwd forwards the announcement upstream while a local announcer
	// exists (Config.Upstream only).
	fwd *upForward
}

// localAnn is an accepted PUBLISH_NAMESPACE.
type localAnn struct {
	s   *moqt.Session
	ann *moqt.Announcement
	e   *nsEntry
}

// nsSub is an accepted SUBSCRIBE_NAMESPACE.
type nsSub struct {
	s     *moqt.Session
	w     *moqt.NamespaceWriter
	limit int
	// ref.prefix is the current prefix as the relay follows it
	// (followPrefix); offered the namespaces under it offered to w.
	ref     *discRef
	offered map[*nsEntry]struct{}
}

// discRef is a downstream request's share of an upstream one: its prefix,
// as requested and then updated, and the upstream request covering it.
type discRef struct {
	prefix wire.Namespace
	disc   *upDisc
	// owner is the session whose share of the discovery limits the
	// request holds, nil when it does not discover upstream; pending
	// that it holds one of the relay's upstream requests it has not
	// made yet (admitDiscLocked).
	owner   *moqt.Session
	pending bool
}

// namespaceKind names the kind of a namespace request for Metrics.
func namespaceKind(req moqt.Request) string {
	switch r := req.(type) {
	case *moqt.PublishNamespaceRequest:
		return KindPublishNamespace
	case *moqt.SubscribeNamespaceRequest:
		if r.Tracks {
			return KindSubscribeTracks
		}
		return KindSubscribeNamespace
	}
	return KindOther
}

// sessionLevel reports a namespace of the .session space (§6.5), which a
// relay never forwards to another session. The library refuses requests
// for them before they reach the relay; namespaces learned upstream are
// filtered here.
func sessionLevel(ns wire.Namespace) bool {
	return len(ns) > 0 && bytes.Equal(ns[0], []byte(".session"))
}

// visibleTo reports whether e is offered to a SUBSCRIBE_NAMESPACE
// subscriber on s. A namespace s itself published here is, "echoing back
// Track Namespaces under the prefix that have been published to it"
// (§4.1); one only an upstream s told the relay of is not sent back to s.
func (e *nsEntry) visibleTo(s *moqt.Session) bool {
	if e.outside > 0 || len(e.local) > 0 {
		return true
	}
	for _, from := range e.remote {
		if from != s {
			return true
		}
	}
	return false
}

// tooLarge is the refusal of a request, or of a prefix update, that
// matches more than Config.MaxNamespaceMatches (§4.3.1).
func tooLarge() *moqt.RequestError {
	return &moqt.RequestError{Code: wire.ReqNamespaceTooLarge, Reason: "too many matches under the prefix"}
}

// subKey is the index key of a subscriber's prefix: its first field, or
// "" for the empty prefix, which every namespace falls under.
func subKey(p wire.Namespace) string {
	if len(p) == 0 {
		return ""
	}
	return "\x01" + string(p[0])
}

// tracksSub is an accepted SUBSCRIBE_TRACKS. Guarded by router.mu.
type tracksSub struct {
	s *moqt.Session
	w *moqt.NamespaceWriter
	// ctx ends with the request, by endTracks: no PUBLISH once it ended.
	ctx   context.Context
	stop  context.CancelFunc
	limit int
	ended bool
	ref   *discRef
	// offered are the tracks with a PUBLISH in flight or Established, and
	// those skipped: a skipped track gets no PUBLISH on this request
	// again (§4.1).
	offered map[wire.TrackKey]*trackOffer
}

type trackOffer struct {
	skipped bool
}

// excessiveLoad refuses a discovery past Config.MaxSessionDiscoveries or
// Config.MaxDiscoveries.
func excessiveLoad(reason string) *moqt.RequestError {
	return &moqt.RequestError{Code: wire.ReqExcessiveLoad, Reason: reason, RetryInterval: moqt.LoadRetryInterval()}
}
