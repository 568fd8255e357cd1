package wire

// PaddingDatagramType is the type of a padding datagram (§11.5.2).
const PaddingDatagramType uint64 = 0x132B3E29

// OBJECT_DATAGRAM Type Flags (§11.2.1). Bits above 0x20 have no meaning.
const (
	datagramProperties      = 0x01
	datagramEndOfGroup      = 0x02
	datagramZeroObjectID    = 0x04
	datagramDefaultPriority = 0x08
	datagramReserved        = 0x10 // MUST be 0
	datagramStatus          = 0x20
	datagramKnownFlags      = datagramProperties | datagramEndOfGroup | datagramZeroObjectID |
		datagramDefaultPriority | datagramStatus
)

// ObjectDatagram is an OBJECT_DATAGRAM: one object in one QUIC datagram
// (§11.2.1). Its Forwarding Preference is Datagram. The Type Flags are
// carried as named fields; the encoder derives the field-presence flags
// (ZERO_OBJECT_ID, PROPERTIES) from the values.
type ObjectDatagram struct {
	TrackAlias uint64
	GroupID    uint64
	ObjectID   uint64 // sent with ZERO_OBJECT_ID (0x04) when 0
	// EndOfGroup (END_OF_GROUP, 0x02): no Object with a larger Object ID
	// exists in the group. It cannot be combined with a status.
	EndOfGroup bool
	// DefaultPriority (DEFAULT_PRIORITY, 0x08): Priority is absent and the
	// object inherits the subscription's publisher priority.
	DefaultPriority bool
	Priority        uint8
	// Properties is the raw Object Properties block (§11.1.3); nil when
	// absent. A present block is never empty on the wire (§11.2.1).
	Properties []byte
	// HasStatus (STATUS, 0x20): the datagram carries Status instead of a
	// payload. The encoder also sets it when Status is not Normal.
	HasStatus bool
	Status    ObjectStatus
	// Payload runs to the end of the datagram. A parsed Payload aliases
	// the input.
	Payload []byte
}

// checkDatagramType rejects the invalid Type Flags of §11.2.1.
func checkDatagramType(t uint64) error {
	switch {
	case t&datagramReserved != 0:
		return violation("OBJECT_DATAGRAM type 0x%x has reserved bit 0x10 set", t)
	case t&^datagramKnownFlags != 0:
		return violation("OBJECT_DATAGRAM type 0x%x has undefined bits set", t)
	case t&datagramStatus != 0 && t&datagramEndOfGroup != 0:
		return violation("OBJECT_DATAGRAM type 0x%x sets both STATUS and END_OF_GROUP", t)
	}
	return nil
}

// Append appends the datagram to b. It fails, appending nothing, for a
// combination §11.2.1 forbids: a status with END_OF_GROUP, a status with a
// payload, properties on a non-Normal status, or an unknown status.
func (d ObjectDatagram) Append(b []byte) ([]byte, error) {
	hasStatus := d.HasStatus || d.Status != ObjectNormal
	if hasStatus {
		if err := checkStatus(d.Status, d.Properties); err != nil {
			return b, err
		}
		if len(d.Payload) > 0 {
			return b, violation("OBJECT_DATAGRAM with a status has no payload")
		}
		if d.EndOfGroup {
			return b, violation("OBJECT_DATAGRAM cannot carry both a status and END_OF_GROUP")
		}
	}
	var t uint64
	if len(d.Properties) > 0 {
		if err := checkProperties(d.Properties); err != nil {
			return b, err
		}
		t |= datagramProperties
	}
	if d.EndOfGroup {
		t |= datagramEndOfGroup
	}
	if d.ObjectID == 0 {
		t |= datagramZeroObjectID
	}
	if d.DefaultPriority {
		t |= datagramDefaultPriority
	}
	if hasStatus {
		t |= datagramStatus
	}
	b = AppendVarint(b, t)
	b = AppendVarint(b, d.TrackAlias)
	b = AppendVarint(b, d.GroupID)
	if t&datagramZeroObjectID == 0 {
		b = AppendVarint(b, d.ObjectID)
	}
	if !d.DefaultPriority {
		b = append(b, d.Priority)
	}
	if t&datagramProperties != 0 {
		b = appendLenBytes(b, d.Properties)
	}
	if hasStatus {
		return AppendVarint(b, uint64(d.Status)), nil
	}
	return append(b, d.Payload...), nil
}

// ParseDatagram decodes one QUIC datagram. A padding datagram (§11.5.2)
// returns padding == true and no object; its data must be all zeros. An
// unknown datagram type MUST close the session (§11), so it is a
// PROTOCOL_VIOLATION, as is any datagram breaking §11.2.1. The returned
// Properties and Payload alias b. Parsing allocates nothing.
func ParseDatagram(b []byte) (d ObjectDatagram, padding bool, err error) {
	c := cursor{b}
	t, err := c.varint("datagram type")
	if err != nil {
		return ObjectDatagram{}, false, err
	}
	if t == PaddingDatagramType {
		return ObjectDatagram{}, true, CheckPadding(c.b)
	}
	if err := checkDatagramType(t); err != nil {
		return ObjectDatagram{}, false, err
	}
	d = ObjectDatagram{
		EndOfGroup:      t&datagramEndOfGroup != 0,
		DefaultPriority: t&datagramDefaultPriority != 0,
		HasStatus:       t&datagramStatus != 0,
	}
	if d.TrackAlias, err = c.varint("datagram track alias"); err != nil {
		return ObjectDatagram{}, false, err
	}
	if d.GroupID, err = c.varint("datagram group ID"); err != nil {
		return ObjectDatagram{}, false, err
	}
	if t&datagramZeroObjectID == 0 {
		if d.ObjectID, err = c.varint("datagram object ID"); err != nil {
			return ObjectDatagram{}, false, err
		}
	}
	if !d.DefaultPriority {
		if d.Priority, err = c.uint8("datagram publisher priority"); err != nil {
			return ObjectDatagram{}, false, err
		}
	}
	if t&datagramProperties != 0 {
		s := source{c: c}
		if d.Properties, err = s.properties(nil, 0); err != nil {
			return ObjectDatagram{}, false, err
		}
		if d.Properties == nil {
			return ObjectDatagram{}, false, violation("OBJECT_DATAGRAM has PROPERTIES set and a Properties Length of 0")
		}
		c = s.c
	}
	if !d.HasStatus {
		if len(c.b) > 0 {
			d.Payload = c.b[:len(c.b):len(c.b)]
		}
		return d, false, nil
	}
	st, err := c.varint("datagram object status")
	if err != nil {
		return ObjectDatagram{}, false, err
	}
	d.Status = ObjectStatus(st)
	if err := checkStatus(d.Status, d.Properties); err != nil {
		return ObjectDatagram{}, false, err
	}
	if err := c.done("OBJECT_DATAGRAM with a status"); err != nil {
		return ObjectDatagram{}, false, err
	}
	return d, false, nil
}

// AppendPaddingDatagram appends a padding datagram (§11.5.2): its type and
// n zero bytes.
func AppendPaddingDatagram(b []byte, n int) []byte {
	b = AppendVarint(b, PaddingDatagramType)
	return append(b, make([]byte, n)...)
}
