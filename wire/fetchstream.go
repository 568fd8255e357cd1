package wire

import (
	"fmt"
	"io"
)

// FetchHeader is the FETCH_HEADER that starts a FETCH data stream
// (§11.4.1). RequestID is the FETCH's, or for a fill fetch stream that of
// the SUBSCRIBE or REQUEST_UPDATE that asked for it (§3.4.1).
type FetchHeader struct {
	RequestID uint64
}

// Append appends the FETCH_HEADER, type included, to b.
func (h FetchHeader) Append(b []byte) []byte {
	return AppendVarint(AppendVarint(b, FetchStreamType), h.RequestID)
}

// ParseFetchHeader decodes a FETCH_HEADER, type included, from b and returns
// the number of bytes used.
func ParseFetchHeader(b []byte) (FetchHeader, int, error) {
	s := source{c: cursor{b}}
	h, err := s.fetchHeaderWithType()
	return h, len(b) - len(s.c.b), err
}

// ReadFetchHeader reads a FETCH_HEADER, type included, from r. It returns
// io.EOF if r ends before the first byte.
func ReadFetchHeader(r io.ByteReader) (FetchHeader, error) {
	s := source{r: r}
	return s.fetchHeaderWithType()
}

func (s *source) fetchHeaderWithType() (FetchHeader, error) {
	t, err := s.start("FETCH_HEADER type")
	if err != nil {
		return FetchHeader{}, err
	}
	if t != FetchStreamType {
		return FetchHeader{}, violation("FETCH_HEADER type is 0x%x, not 0x05", t)
	}
	return s.fetchHeader()
}

// fetchHeader reads the FETCH_HEADER fields after its type.
func (s *source) fetchHeader() (FetchHeader, error) {
	id, err := s.varint("FETCH_HEADER request ID")
	return FetchHeader{RequestID: id}, err
}

// EndOfRange is a Serialization Flags value of 128 or more that ends a range
// of Objects the FETCH stream will not carry (§11.4.1, §11.4.1.2).
type EndOfRange uint64

// End of Range markers (§11.4.1, Table 7). Every other Serialization Flags
// value of 128 or more is a PROTOCOL_VIOLATION.
const (
	EndOfNonExistentRange EndOfRange = 0x8C  // the Objects do not exist
	EndOfUnknownRange     EndOfRange = 0x10C // their status is unknown
	EndOfTimedOutRange    EndOfRange = 0x20C // a fill timed out (§9.20.6); draft 20 on (Profile.TimedOutRange)
)

func (e EndOfRange) String() string {
	switch e {
	case 0:
		return "OBJECT"
	case EndOfNonExistentRange:
		return "END_OF_NON_EXISTENT_RANGE"
	case EndOfUnknownRange:
		return "END_OF_UNKNOWN_RANGE"
	case EndOfTimedOutRange:
		return "END_OF_TIMED_OUT_RANGE"
	}
	return fmt.Sprintf("EndOfRange(0x%x)", uint64(e))
}

// validIn reports whether e is an End of Range marker of the draft of prof.
func (e EndOfRange) validIn(prof *Profile) bool {
	return e == EndOfNonExistentRange || e == EndOfUnknownRange || e == EndOfTimedOutRange && prof.TimedOutRange
}

// Serialization Flags (§11.4.1.1).
const (
	fetchSubgroupMask  = 0x03 // 0: zero, 1: prior, 2: prior + 1, 3: present
	fetchObjectDelta   = 0x04
	fetchGroupDelta    = 0x08
	fetchPriority      = 0x10
	fetchProperties    = 0x20
	fetchDatagram      = 0x40
	fetchSubgroupZero  = 0x00
	fetchSubgroupPrior = 0x01
	fetchSubgroupNext  = 0x02
	fetchSubgroupField = 0x03
)

// FetchObject is one entry of a FETCH stream (§11.4.1, Figure 28) with its
// IDs resolved: either an Object's header, whose PayloadLength payload bytes
// follow it on the stream, or an End of Range marker.
type FetchObject struct {
	// EndOfRange is 0 for an Object. Otherwise the entry is an End of Range
	// marker (§11.4.1.2): all Objects after the previous entry up to and
	// including {GroupID, ObjectID} do not exist, are unknown or timed out,
	// and no other field is used.
	EndOfRange EndOfRange
	GroupID    uint64
	ObjectID   uint64
	// Datagram reports an Object whose Forwarding Preference is Datagram
	// (flag 0x40). It has no Subgroup ID (§11.4.1.1): SubgroupID is not
	// sent, and decodes as 0.
	Datagram   bool
	SubgroupID uint64
	Priority   uint8
	// Properties is the raw Object Properties block (§11.1.3); nil when
	// empty or absent. It is kept as bytes so a relay forwards it unmodified.
	Properties    []byte
	PayloadLength uint64
}

// Location returns {GroupID, ObjectID}.
func (o FetchObject) Location() Location { return Location{Group: o.GroupID, Object: o.ObjectID} }

// fetchPrior holds the "prior Object" fields that Serialization Flags refer
// to (§11.4.1.1, §11.4.1.2).
type fetchPrior struct {
	hasLocation bool // an Object or End of Range has been sent: the next entry is not the first
	group       uint64
	object      uint64
	hasSubgroup bool // an Object with a Subgroup ID has been sent
	subgroup    uint64
	hasPriority bool // an Object has been sent
	priority    uint8
}

// FetchEncoder writes the entries of one FETCH stream after its
// FETCH_HEADER, choosing for each Object the most compact Serialization
// Flags given the prior one. The first entry always carries absolute Group
// and Object IDs (§11.4.1.1). Set Descending to the FETCH's Group Order
// before the first entry, and Version to the session's draft (zero means
// the newest). It is not safe for concurrent use.
type FetchEncoder struct {
	Descending bool
	Version    Version

	prior fetchPrior
}

// AppendObject appends the entry o to b; for an Object the caller writes the
// PayloadLength payload bytes after it. Groups must follow the Group Order;
// within a group, Object IDs must not decrease. It fails, appending nothing,
// if o cannot be expressed after the prior entry.
func (e *FetchEncoder) AppendObject(b []byte, o FetchObject) ([]byte, error) {
	p := e.prior
	if o.EndOfRange != 0 {
		if prof := latest(e.Version); !o.EndOfRange.validIn(prof) {
			if o.EndOfRange == EndOfTimedOutRange {
				return b, prof.notIn("End of Timed-Out Range")
			}
			return b, violation("invalid End of Range value 0x%x", uint64(o.EndOfRange))
		}
		p.hasLocation, p.group, p.object = true, o.GroupID, o.ObjectID
		e.prior = p
		return o.Location().Append(AppendVarint(b, uint64(o.EndOfRange))), nil
	}
	var flags, groupDelta, objectDelta uint64
	newGroup := !p.hasLocation || o.GroupID != p.group
	if newGroup {
		flags |= fetchGroupDelta
		switch {
		case !p.hasLocation:
			groupDelta = o.GroupID
		case !e.Descending && o.GroupID > p.group:
			groupDelta = o.GroupID - p.group - 1
		case e.Descending && o.GroupID < p.group:
			groupDelta = p.group - o.GroupID - 1
		default:
			return b, violation("group %d cannot follow group %d in this group order", o.GroupID, p.group)
		}
	}
	if o.Datagram {
		flags |= fetchDatagram // the low two bits stay 0 (§11.4.1.1)
	} else {
		switch {
		case o.SubgroupID == 0:
			flags |= fetchSubgroupZero
		case p.hasSubgroup && o.SubgroupID == p.subgroup:
			flags |= fetchSubgroupPrior
		case p.hasSubgroup && p.subgroup < MaxVarint && o.SubgroupID == p.subgroup+1:
			flags |= fetchSubgroupNext
		default:
			flags |= fetchSubgroupField
		}
	}
	if !p.hasLocation || p.object == MaxVarint || o.ObjectID != p.object+1 {
		flags |= fetchObjectDelta
		switch {
		case newGroup:
			objectDelta = o.ObjectID
		case o.ObjectID >= p.object:
			objectDelta = o.ObjectID - p.object
		default:
			return b, violation("object %d cannot follow object %d in group %d", o.ObjectID, p.object, o.GroupID)
		}
	}
	if !p.hasPriority || o.Priority != p.priority {
		flags |= fetchPriority
	}
	if len(o.Properties) > 0 {
		if err := checkProperties(o.Properties); err != nil {
			return b, err
		}
		flags |= fetchProperties
	}

	b = AppendVarint(b, flags)
	if flags&fetchGroupDelta != 0 {
		b = AppendVarint(b, groupDelta)
	}
	if flags&(fetchDatagram|fetchSubgroupMask) == fetchSubgroupField {
		b = AppendVarint(b, o.SubgroupID)
	}
	if flags&fetchObjectDelta != 0 {
		b = AppendVarint(b, objectDelta)
	}
	if flags&fetchPriority != 0 {
		b = append(b, o.Priority)
	}
	if flags&fetchProperties != 0 {
		b = appendLenBytes(b, o.Properties)
	}
	b = AppendVarint(b, o.PayloadLength)

	p.hasLocation, p.group, p.object = true, o.GroupID, o.ObjectID
	if !o.Datagram {
		p.hasSubgroup, p.subgroup = true, o.SubgroupID
	}
	p.hasPriority, p.priority = true, o.Priority
	e.prior = p
	return b, nil
}

// FetchDecoder reads the entries of one FETCH stream after its FETCH_HEADER
// and resolves their delta-encoded fields (§11.4.1.1, §11.4.1.2). Set
// Descending to the FETCH's Group Order before the first entry, and Version
// to the session's draft (zero means the newest; 0x20C is an End of Range
// only from draft 20). It is not safe for concurrent use.
type FetchDecoder struct {
	Descending bool
	Version    Version
	// MaxPropertiesLen bounds an Object Properties block read by Read;
	// 0 means DefaultMaxPropertiesLen. A larger block is a local limit, not
	// a peer error: Read reports it as INTERNAL_ERROR.
	MaxPropertiesLen int

	prior fetchPrior
}

// Parse decodes the next entry from b and returns the number of bytes used;
// an Object's payload starts at b[n:]. Properties alias b. If b ends inside
// the entry, the error wraps ErrTruncated and the decoder's state is
// unchanged, so the caller can retry with more bytes. Parsing allocates
// nothing.
func (d *FetchDecoder) Parse(b []byte) (FetchObject, int, error) {
	s := source{c: cursor{b}}
	o, err := d.next(&s, nil)
	return o, len(b) - len(s.c.b), err
}

// Read reads the next entry from r, leaving r at an Object's first payload
// byte. Properties are read into props' storage as in SubgroupDecoder.Read.
// It returns io.EOF when r ends exactly between entries, the normal end of
// the stream; an end inside an entry is a PROTOCOL_VIOLATION wrapping
// ErrTruncated. Other read errors are returned unchanged.
func (d *FetchDecoder) Read(r io.ByteReader, props []byte) (FetchObject, error) {
	s := source{r: r}
	return d.next(&s, props)
}

func (d *FetchDecoder) next(s *source, props []byte) (FetchObject, error) {
	flags, err := s.start("fetch serialization flags")
	if err != nil {
		return FetchObject{}, err
	}
	p := d.prior
	if flags >= 128 {
		return d.endOfRange(s, EndOfRange(flags))
	}
	first := !p.hasLocation
	var o FetchObject

	if flags&fetchGroupDelta != 0 {
		delta, err := s.varint("fetch group ID delta")
		if err != nil {
			return FetchObject{}, err
		}
		if o.GroupID, err = d.group(p, delta); err != nil {
			return FetchObject{}, err
		}
	} else {
		if first {
			return FetchObject{}, violation("first fetch object has no Group ID Delta")
		}
		o.GroupID = p.group
	}

	if flags&fetchDatagram != 0 {
		o.Datagram = true // the low two bits are ignored (§11.4.1.1)
	} else {
		switch flags & fetchSubgroupMask {
		case fetchSubgroupPrior, fetchSubgroupNext:
			if !p.hasSubgroup {
				return FetchObject{}, violation("fetch object refers to a prior Subgroup ID that does not exist")
			}
			o.SubgroupID = p.subgroup
			if flags&fetchSubgroupMask == fetchSubgroupNext {
				if p.subgroup == MaxVarint {
					return FetchObject{}, violation("subgroup ID %d + 1 overflows", p.subgroup)
				}
				o.SubgroupID++
			}
		case fetchSubgroupField:
			if o.SubgroupID, err = s.varint("fetch subgroup ID"); err != nil {
				return FetchObject{}, err
			}
		}
	}

	switch {
	case flags&fetchObjectDelta == 0:
		if first {
			return FetchObject{}, violation("first fetch object has no Object ID Delta")
		}
		if p.object == MaxVarint {
			return FetchObject{}, violation("object ID %d + 1 overflows", p.object)
		}
		o.ObjectID = p.object + 1
	default:
		delta, err := s.varint("fetch object ID delta")
		if err != nil {
			return FetchObject{}, err
		}
		o.ObjectID = delta
		if !first && flags&fetchGroupDelta == 0 {
			if delta > MaxVarint-p.object {
				return FetchObject{}, violation("object ID %d + delta %d overflows", p.object, delta)
			}
			o.ObjectID = p.object + delta
		}
	}

	if flags&fetchPriority != 0 {
		if o.Priority, err = s.uint8("fetch publisher priority"); err != nil {
			return FetchObject{}, err
		}
	} else {
		if !p.hasPriority {
			return FetchObject{}, violation("fetch object refers to a prior Priority that does not exist")
		}
		o.Priority = p.priority
	}

	if flags&fetchProperties != 0 {
		if o.Properties, err = s.properties(props, d.MaxPropertiesLen); err != nil {
			return FetchObject{}, err
		}
	}
	if o.PayloadLength, err = s.varint("fetch object payload length"); err != nil {
		return FetchObject{}, err
	}

	p.hasLocation, p.group, p.object = true, o.GroupID, o.ObjectID
	if !o.Datagram {
		p.hasSubgroup, p.subgroup = true, o.SubgroupID
	}
	p.hasPriority, p.priority = true, o.Priority
	d.prior = p
	return o, nil
}

// group resolves a Group ID Delta (§11.4.1.1): on the first entry it is the
// absolute Group ID; after that it moves by delta + 1 in the Group Order,
// and leaving 0..2^64-1 is a PROTOCOL_VIOLATION.
func (d *FetchDecoder) group(p fetchPrior, delta uint64) (uint64, error) {
	switch {
	case !p.hasLocation:
		return delta, nil
	case d.Descending:
		if delta >= p.group {
			return 0, violation("group ID %d - (delta %d + 1) is below 0", p.group, delta)
		}
		return p.group - delta - 1, nil
	default:
		if delta >= MaxVarint-p.group {
			return 0, violation("group ID %d + delta %d + 1 overflows", p.group, delta)
		}
		return p.group + delta + 1, nil
	}
}

// endOfRange reads the fields of an End of Range marker (§11.4.1.2): an
// absolute Group ID and Object ID, and nothing else. Its location becomes
// the prior Group and Object ID; the prior Subgroup ID and Priority stay
// those of the last Object.
func (d *FetchDecoder) endOfRange(s *source, e EndOfRange) (FetchObject, error) {
	if !e.validIn(latest(d.Version)) {
		return FetchObject{}, violation("invalid fetch serialization flags 0x%x", uint64(e))
	}
	g, err := s.varint("end of range group ID")
	if err != nil {
		return FetchObject{}, err
	}
	obj, err := s.varint("end of range object ID")
	if err != nil {
		return FetchObject{}, err
	}
	d.prior.hasLocation, d.prior.group, d.prior.object = true, g, obj
	return FetchObject{EndOfRange: e, GroupID: g, ObjectID: obj}, nil
}
