package moqt

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/moqt-go/moqt/internal/malformed"
	"github.com/moqt-go/moqt/wire"
)

// Malformed Track detection on the subscriber (§12.1, C022, C023). The
// checks live in internal/malformed; this file holds what only a session
// knows: whether a subscription's FINs prove where its subgroups end, and
// the *MalformedTrackError the application sees. Each Subscription checks
// the objects it receives and cancels itself at the first contradiction
// (Subscription.malformedTrack). Objects are checked as the application
// reads them (SubgroupReader.Next), as datagrams arrive and as fetch
// streams, a FETCH's or a fill's, are read (fetchCheck). The publishing
// side refuses what its receivers would take for malformed, before
// anything is sent (checkSent, FetchWriter.checkProperties).

// trackCheck is what a subscription has seen of its track.
type trackCheck struct {
	track malformed.Track
	// partialFins is set once a FIN may have ended a subgroup early: the
	// subscription's filter cuts subgroups short (§3.3, §11.3.2), or it
	// shares its alias with another (§3.1.2). It is never cleared.
	partialFins atomic.Bool
}

// datagram checks an object received in an OBJECT_DATAGRAM.
func (t *trackCheck) datagram(d *wire.ObjectDatagram) *MalformedTrackError {
	return trackError(t.track.Datagram(d))
}

// streamCheck follows one subgroup stream through its trackCheck. It is
// owned by the stream's SubgroupReader.
type streamCheck struct{ stream malformed.Stream }

// started reports whether the stream's first object has been checked.
func (c *streamCheck) started() bool { return c.stream.Started() }

// object checks the next object of the stream.
func (c *streamCheck) object(t *trackCheck, loc wire.Location, subgroup uint64, priority uint8, status wire.ObjectStatus, props []byte) *MalformedTrackError {
	return trackError(c.stream.Object(&t.track, loc, subgroup, priority, status, props))
}

// fin checks the stream's FIN. partial says the FIN may have come before
// the subgroup's last object; the caller reads it from
// Subscription.partialFins, which includes trackCheck.partialFins.
func (c *streamCheck) fin(group uint64, endOfGroup, partial bool) *MalformedTrackError {
	return trackError(c.stream.Fin(group, endOfGroup, partial))
}

// trackError turns the checks' verdict into the error the application
// sees; nil stays nil.
func trackError(e *malformed.Error) *MalformedTrackError {
	if e == nil {
		return nil
	}
	return &MalformedTrackError{Reason: e.Reason}
}

// fetchCheck follows a fetch stream (§11.4.1) for the Prior Group ID Gap
// and Prior Object ID Gap rules (§10.8, §10.9), and checks each object's
// properties. It is owned by the stream's reader.
type fetchCheck struct {
	stream malformed.Fetch
	// track is the subscription's, for a fill stream: the rules span the
	// track, the subscription's streams and datagrams included. Nil for a
	// FETCH's.
	track *trackCheck
}

// object checks the stream's next object, which follows the entries
// before it in the stream's order (fetchStream.checkEntry), and records it.
func (c *fetchCheck) object(loc wire.Location, props []byte, descending bool) *MalformedTrackError {
	gaps, e := c.stream.Check(loc, props, descending)
	if e != nil {
		return trackError(e)
	}
	c.stream.Record(loc, gaps)
	if c.track != nil {
		return trackError(c.track.track.Fetched(loc, gaps))
	}
	return nil
}

// ErrMalformingObject is wrapped by the error of a publishing call refused
// because every receiver would take the track for malformed (§12.1): an
// object contradicting what the track published before, or properties no
// object may carry. A relay that gets it for an object from upstream has a
// Malformed Track to report, such as two publishers of the track whose
// objects contradict each other.
var ErrMalformingObject = errors.New("it makes the track malformed")

// sentError is the error a publishing path returns for an object it
// refuses, since every receiver would take its track for malformed
// (§12.1).
func sentError(e *malformed.Error) error {
	if e == nil {
		return nil
	}
	return fmt.Errorf("moqt: %s, which %w", e.Reason, ErrMalformingObject)
}

// checkSent refuses an object the track is about to publish at loc, in
// subgroup subgroup or as a datagram, that would make every receiver take
// the track for malformed (§12.1), and records the rest: a Mandatory
// Track Property as an Object Property, which has Track scope only (§3.6,
// C005), directly or inside IMMUTABLE_PROPERTIES; an IMMUTABLE_PROPERTIES
// that nests another or cannot be parsed, or that comes twice (§10.7); a
// Prior Group ID Gap or Prior Object ID Gap twice, larger than its ID, or
// contradicting what the track sent, as §10.8 and §10.9 list. The
// publishing paths call it last, before anything is sent or recorded.
func (t *LocalTrack) checkSent(loc wire.Location, subgroup uint64, datagram bool, props []byte) error {
	return sentError(t.sent.objects.Object(loc, subgroup, datagram, props))
}

// sentCheck is what a LocalTrack published, for checkSent.
type sentCheck struct{ objects malformed.Sent }

// malformedTrack cancels every subscription to track and every FETCH of
// it, except the ones that found the Malformed Track (§12.1: "it MUST
// cancel any corresponding subscription or fetches for that Track from
// that publisher").
func (s *Session) malformedTrack(track wire.FullTrackName, e *MalformedTrackError, bySub *Subscription, byFetch *Fetch) {
	for _, sub := range s.routes.boundTo(track) {
		if sub != bySub {
			sub.cancelMalformed(e)
		}
	}
	for _, f := range s.fetches.fetchesOf(track) {
		if f != byFetch {
			f.cancelWith(e, wire.ResetMalformedTrack)
		}
	}
}
