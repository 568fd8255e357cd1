package moqt

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// Checks on the Track Properties a peer sends, in PUBLISH, SUBSCRIBE_OK and
// the REQUEST_OK answering TRACK_STATUS (§10). A value is looked for among
// the properties and inside IMMUTABLE_PROPERTIES alike (§10.7).

// unknownMandatory returns the first Mandatory Track Property in props
// (§3.6), among the properties or inside IMMUTABLE_PROPERTIES, where a
// processor must look too (§10.7). This implementation defines none, so
// every one is unknown. Pairs after an unparseable one inside
// IMMUTABLE_PROPERTIES are not looked at.
func unknownMandatory(props wire.KVList) (uint64, bool) {
	var found uint64
	inner := func(kv wire.KeyValue) error {
		if wire.IsMandatoryTrackProperty(kv.Type) {
			found = kv.Type
			return errFoundMandatory
		}
		return nil
	}
	for _, kv := range props {
		switch {
		case wire.IsMandatoryTrackProperty(kv.Type):
			return kv.Type, true
		case kv.Type == wire.PropImmutableProperties:
			if errors.Is(wire.WalkKV(kv.Bytes, inner), errFoundMandatory) {
				return found, true
			}
		}
	}
	return 0, false
}

// errFoundMandatory stops unknownMandatory's walk at the first one.
var errFoundMandatory = errors.New("mandatory track property")

// checkTrackProperties closes the session with PROTOCOL_VIOLATION for a
// DEFAULT_PUBLISHER_GROUP_ORDER other than Ascending or Descending (§10.5)
// and a DYNAMIC_GROUPS above 1 (§10.6): any instance, among the properties
// or inside IMMUTABLE_PROPERTIES (§10.7).
func checkTrackProperties(props wire.KVList) error {
	badOrder := []wire.Range{{Start: 0, End: 0}, {Start: uint64(wire.GroupOrderDescending) + 1, End: math.MaxUint64}}
	if filter.TrackPropertyIn(props, wire.PropDefaultPublisherGroupOrder, badOrder) {
		return protocolViolation("DEFAULT_PUBLISHER_GROUP_ORDER is neither Ascending nor Descending")
	}
	if filter.TrackPropertyIn(props, wire.PropDynamicGroups, []wire.Range{{Start: 2, End: math.MaxUint64}}) {
		return protocolViolation("DYNAMIC_GROUPS is above 1")
	}
	return nil
}

// localTrackProperties returns props as a LocalTrack sends them: a copy,
// ordered by type, since Key-Value-Pairs are delta-encoded (§8.3) and the
// order carries nothing else (a stable sort keeps repeated types as
// given). What no peer may accept is refused: a value of the wrong form
// for its type or over 65535 bytes (§8.3), an IMMUTABLE_PROPERTIES that
// does not parse or nests another (§10.7), a DEFAULT_PUBLISHER_PRIORITY
// over 255 (§10.4), the values checkTrackProperties refuses (§10.5,
// §10.6), and a list too long for any control message. Values are looked
// for inside IMMUTABLE_PROPERTIES too (§10.7).
func localTrackProperties(props wire.KVList) (wire.KVList, error) {
	if len(props) == 0 {
		return nil, nil
	}
	own := slices.Clone(props)
	for i := range own {
		kv := &own[i]
		switch {
		case kv.Type%2 == 0 && kv.Bytes != nil:
			return nil, fmt.Errorf("moqt: Track Property %#x is even-typed: an integer, not bytes", kv.Type)
		case kv.Type%2 == 1 && kv.Value != 0:
			return nil, fmt.Errorf("moqt: Track Property %#x is odd-typed: bytes, not an integer", kv.Type)
		case kv.Type == wire.PropImmutableProperties:
			if err := checkImmutable(kv.Bytes); err != nil {
				return nil, err
			}
		}
		kv.Bytes = slices.Clone(kv.Bytes)
	}
	// Once every IMMUTABLE_PROPERTIES is known to parse: a value inside
	// one counts as one outside (§10.7).
	if filter.TrackPropertyIn(own, wire.PropDefaultPublisherPriority, []wire.Range{{Start: 256, End: math.MaxUint64}}) {
		return nil, errors.New("moqt: DEFAULT_PUBLISHER_PRIORITY is above 255")
	}
	slices.SortStableFunc(own, func(a, b wire.KeyValue) int { return cmp.Compare(a.Type, b.Type) })
	b, err := own.Append(nil)
	if err != nil {
		return nil, fmt.Errorf("moqt: Track Properties: %w", err)
	}
	if len(b) > math.MaxUint16 {
		return nil, fmt.Errorf("moqt: Track Properties of %d bytes do not fit in a control message", len(b))
	}
	if err := checkTrackProperties(own); err != nil {
		var se *SessionError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("moqt: Track Properties: %s", se.Reason)
		}
		return nil, err
	}
	return own, nil
}

// checkImmutable refuses the contents of an IMMUTABLE_PROPERTIES that
// would make the track malformed (§10.7).
func checkImmutable(inner []byte) error {
	err := wire.WalkKV(inner, func(kv wire.KeyValue) error {
		if kv.Type == wire.PropImmutableProperties {
			return errors.New("nests another")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("moqt: IMMUTABLE_PROPERTIES: %w", err)
	}
	return nil
}
