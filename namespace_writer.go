package moqt

import (
	"errors"

	"github.com/moqt-go/moqt/wire"
)

// NamespaceWriter is the responder's end of an accepted
// SUBSCRIBE_NAMESPACE or SUBSCRIBE_TRACKS. Its methods never block on the
// network: messages are queued, within bounds, and written by a goroutine
// of its own; a requester that reads none of them for
// Config.SubscriberGrace gets the stream reset with TOO_FAR_BEHIND (§9.15).
// It is safe for concurrent use, and lasts as long as the request's
// Context.
type NamespaceWriter struct {
	sess *Session
	rs   *requestStream
}

// Prefix is the current prefix: the request's, or that of the requester's
// last TRACK_NAMESPACE_PREFIX update (§9.5.2).
func (w *NamespaceWriter) Prefix() wire.Namespace { return nil }

// Publish reports ns as published (NAMESPACE, §9.16), on a
// SUBSCRIBE_NAMESPACE. ns is remembered: it is sent if it falls under the
// prefix, now or after a prefix update, once. Publishing it again is a
// no-op.
func (w *NamespaceWriter) Publish(ns wire.Namespace) error {
	return errors.New("moqt: not yet implemented")
}

// Done withdraws ns (NAMESPACE_DONE, §9.17), on a SUBSCRIBE_NAMESPACE: it
// is sent only if the NAMESPACE was.
func (w *NamespaceWriter) Done(ns wire.Namespace) error {
	return errors.New("moqt: not yet implemented")
}

// Skip reports that no PUBLISH will come for track (PUBLISH_SKIPPED,
// §9.19), on a SUBSCRIBE_TRACKS; track must be under the prefix.
func (w *NamespaceWriter) Skip(track wire.FullTrackName) error {
	return errors.New("moqt: not yet implemented")
}

// End ends the request by resetting its stream with code (§6.4.2.3).
func (w *NamespaceWriter) End(code wire.ResetCode) {}
