package moqt

import (
	"math"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// Checks on the Track Properties a peer sends, in PUBLISH, SUBSCRIBE_OK and
// the REQUEST_OK answering TRACK_STATUS (§10). A value is looked for among
// the properties and inside IMMUTABLE_PROPERTIES alike (§10.7).

// unknownMandatory returns the first Mandatory Track Property in props
// (§3.6). This implementation defines none, so every one is unknown.
func unknownMandatory(props wire.KVList) (uint64, bool) {
	for _, kv := range props {
		if wire.IsMandatoryTrackProperty(kv.Type) {
			return kv.Type, true
		}
	}
	return 0, false
}

// checkTrackProperties closes the session with PROTOCOL_VIOLATION for a
// DEFAULT_PUBLISHER_GROUP_ORDER other than Ascending or Descending (§10.5)
// and a DYNAMIC_GROUPS above 1 (§10.6).
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
