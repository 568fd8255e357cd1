package moqt

import (
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
// reads them (SubgroupReader.Next) and as datagrams arrive.

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

// checkSentProperties refuses Object Properties that would make every
// receiver take the track for malformed (§12.1): a Mandatory Track
// Property, which has Track scope only (§3.6, C005), directly or inside
// IMMUTABLE_PROPERTIES, and an IMMUTABLE_PROPERTIES that nests another or
// cannot be parsed (§10.7). The publishing paths call it before anything
// is sent or recorded.
func checkSentProperties(loc wire.Location, props []byte) error {
	if len(props) == 0 {
		return nil
	}
	if e := malformed.ObjectProperties(loc, props); e != nil {
		return fmt.Errorf("moqt: %s, which makes the track malformed", e.Reason)
	}
	return nil
}
