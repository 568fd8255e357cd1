package relay

import "github.com/moqt-go/moqt"

// Metrics receives a relay's counters, to be exported to Prometheus,
// OpenTelemetry or anything else; the relay imports none of them. Every
// method must be quick and safe for concurrent use: they are called on the
// relay's forwarding paths.
type Metrics interface {
	// SessionStarted and SessionEnded bracket each session the relay
	// serves: from its first request, or from its dialing as an upstream.
	SessionStarted(upstream bool)
	SessionEnded(upstream bool)
	// Request counts a request the relay received, once it is answered, by
	// kind (KindSubscribe, ...) and outcome (OutcomeOK, ...).
	Request(kind, outcome string)
	// ObjectsIn counts an object received from an upstream publisher and
	// its payload bytes; ObjectsOut one forwarded to a track's
	// subscribers, written once for all of them.
	ObjectsIn(objects, bytes int)
	ObjectsOut(objects, bytes int)
	// Dropped counts objects received and not forwarded, by reason
	// (DropDuplicate, ...).
	Dropped(reason string, objects int)
}

// Request kinds, as passed to Metrics.Request.
const (
	KindSubscribe          = "subscribe"
	KindPublish            = "publish"
	KindTrackStatus        = "track_status"
	KindFetch              = "fetch"
	KindPublishNamespace   = "publish_namespace"
	KindSubscribeNamespace = "subscribe_namespace"
	KindOther              = "other"
)

// Request outcomes, as passed to Metrics.Request.
const (
	// OutcomeOK: accepted (SUBSCRIBE_OK, PUBLISH_OK, REQUEST_OK, ...).
	OutcomeOK = "ok"
	// OutcomeUnauthorized: refused by Config.Authorize.
	OutcomeUnauthorized = "unauthorized"
	// OutcomeNotFound: no publisher for it (DOES_NOT_EXIST).
	OutcomeNotFound = "not_found"
	// OutcomeTimeout: held for a publisher that did not come (TIMEOUT).
	OutcomeTimeout = "timeout"
	// OutcomeRefused: refused upstream, or by a limit of the relay.
	OutcomeRefused = "refused"
	// OutcomeCancelled: given up by the requester before its answer.
	OutcomeCancelled = "cancelled"
)

// Drop reasons, as passed to Metrics.Dropped.
const (
	// DropDuplicate: an object already forwarded, received again from
	// another publisher of the track (§7.3).
	DropDuplicate = "duplicate"
	// DropWriteFailed: the track refused the object (it contradicts one
	// written before, or the subgroup was closed meanwhile), or the
	// relay did: an object past an End of Group or End of Track object
	// another publisher sent.
	DropWriteFailed = "write_failed"
	// DropDatagram: a datagram the transport could not send.
	DropDatagram = "datagram"
	// DropDatagramQueue: datagrams that arrived faster than the relay
	// forwarded them, dropped by the upstream subscription's queue;
	// counted when it ends.
	DropDatagramQueue = "datagram_queue"
	// DropIncomplete: an upstream subgroup stream reset before its end,
	// one per stream; its downstream stream is reset with the same code.
	DropIncomplete = "incomplete"
	// DropSlowSubscriber: a downstream subscription ended as too far
	// behind (PUBLISH_DONE TOO_FAR_BEHIND, Config.SubscriberGrace), or
	// because its session's queued bytes passed its backlog budget
	// (EXCESSIVE_LOAD, moqt.Config.MaxSessionBacklog and SharedBacklog),
	// one per subscription: the objects it then missed are not counted.
	DropSlowSubscriber = "slow_subscriber"
	// DropMalformed: a duplicate that differs from the object forwarded
	// in its Forwarding Preference, Subgroup ID, Publisher Priority or
	// payload, which ends the track as Malformed (§7.1, §12.1).
	DropMalformed = "malformed"
)

type nopMetrics struct{}

func (nopMetrics) SessionStarted(bool)    {}
func (nopMetrics) SessionEnded(bool)      {}
func (nopMetrics) Request(string, string) {}
func (nopMetrics) ObjectsIn(int, int)     {}
func (nopMetrics) ObjectsOut(int, int)    {}
func (nopMetrics) Dropped(string, int)    {}

// requestKind names req's kind for Metrics and logs.
func requestKind(req moqt.Request) string {
	switch req.(type) {
	case *moqt.SubscribeRequest:
		return KindSubscribe
	case *moqt.PublishRequest:
		return KindPublish
	case *moqt.TrackStatusRequest:
		return KindTrackStatus
	case *moqt.FetchRequest:
		return KindFetch
	}
	return namespaceKind(req)
}
