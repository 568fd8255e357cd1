package wire

import (
	"fmt"
	"io"
)

// Unidirectional stream type code points (§6.4.1). SUBGROUP_HEADER has no
// single code point: its type is a set of flags (see SubgroupHeader).
const (
	FetchStreamType   uint64 = 0x05       // FETCH_HEADER (§11.4.1)
	ControlStreamType uint64 = 0x2F00     // SETUP; its Type doubles as the stream type (§6.3, §9.1)
	PaddingStreamType uint64 = 0x132B3E28 // PADDING (§11.5.1)
)

// StreamType classifies a unidirectional stream by the vi64 it starts with
// (§6.4.1), so the session can dispatch the rest of the stream.
type StreamType uint8

// Stream classes (§6.4.1).
const (
	StreamControl  StreamType = iota + 1 // 0x2F00: the peer's control stream
	StreamSubgroup                       // 0b0XX1XXXX: a subgroup data stream
	StreamFetch                          // 0x05: a FETCH (or fill fetch) data stream
	StreamPadding                        // 0x132B3E28: padding to discard
)

func (t StreamType) String() string {
	switch t {
	case StreamControl:
		return "CONTROL"
	case StreamSubgroup:
		return "SUBGROUP_HEADER"
	case StreamFetch:
		return "FETCH_HEADER"
	case StreamPadding:
		return "PADDING"
	}
	return fmt.Sprintf("StreamType(%d)", uint8(t))
}

// ClassifyStream returns the class of a unidirectional stream whose first
// vi64 is v. An unknown type MUST close the session (§6.4.1), so it is a
// PROTOCOL_VIOLATION. A value in the SUBGROUP_HEADER space (below 128 with
// bit 0x10 set) classifies as StreamSubgroup even when its flags are invalid;
// parsing the header then rejects it.
func ClassifyStream(v uint64) (StreamType, error) {
	switch {
	case v == FetchStreamType:
		return StreamFetch, nil
	case v == ControlStreamType:
		return StreamControl, nil
	case v == PaddingStreamType:
		return StreamPadding, nil
	case v < 128 && v&subgroupBit4 != 0:
		return StreamSubgroup, nil
	}
	return 0, violation("unknown unidirectional stream type 0x%x", v)
}

// StreamHeader is the start of a unidirectional stream: its class and, for a
// data stream, its header. For StreamControl only the type has been read; the
// SETUP message's length and body follow. For StreamPadding the rest of the
// stream is padding (see DiscardPadding).
type StreamHeader struct {
	Type     StreamType
	Subgroup SubgroupHeader // when Type == StreamSubgroup
	Fetch    FetchHeader    // when Type == StreamFetch
}

// ParseStreamHeader decodes the start of a unidirectional stream from b and
// returns the number of bytes used. It fails with an error wrapping
// ErrTruncated when b ends inside the header.
func ParseStreamHeader(b []byte) (StreamHeader, int, error) {
	s := source{c: cursor{b}}
	h, err := s.streamHeader()
	return h, len(b) - len(s.c.b), err
}

// ReadStreamHeader reads the start of a unidirectional stream from r,
// without reading past it. It returns io.EOF if the stream ends before its
// first byte, and a PROTOCOL_VIOLATION wrapping ErrTruncated if it ends
// inside the header.
func ReadStreamHeader(r io.ByteReader) (StreamHeader, error) {
	s := source{r: r}
	return s.streamHeader()
}

func (s *source) streamHeader() (StreamHeader, error) {
	v, err := s.start("stream type")
	if err != nil {
		return StreamHeader{}, err
	}
	t, err := ClassifyStream(v)
	if err != nil {
		return StreamHeader{}, err
	}
	h := StreamHeader{Type: t}
	switch t {
	case StreamSubgroup:
		h.Subgroup, err = s.subgroupHeader(v)
	case StreamFetch:
		h.Fetch, err = s.fetchHeader()
	}
	return h, err
}

// AppendPaddingStream appends the start of a padding stream (§11.5.1): its
// type and n zero bytes. A sender may keep writing zeros after it.
func AppendPaddingStream(b []byte, n int) []byte {
	b = AppendVarint(b, PaddingStreamType)
	return append(b, make([]byte, n)...)
}

// CheckPadding reports a PROTOCOL_VIOLATION if b, the data of a padding
// stream or datagram, holds a byte other than 0x00 (§11.5.1, §11.5.2).
func CheckPadding(b []byte) error {
	for i, c := range b {
		if c != 0 {
			return violation("padding byte %d is 0x%02x, not 0x00", i, c)
		}
	}
	return nil
}

// DiscardPadding reads the rest of a padding stream and discards it, as the
// receiver MUST (§11.5.1). It returns nil when the stream ends cleanly, a
// PROTOCOL_VIOLATION on a non-zero byte, and any other read error unchanged.
func DiscardPadding(r io.Reader) error {
	var buf [2048]byte
	for {
		n, err := r.Read(buf[:])
		if cerr := CheckPadding(buf[:n]); cerr != nil {
			return cerr
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// SUBGROUP_HEADER Type Flags (§11.3.1).
const (
	subgroupProperties      = 0x01
	subgroupIDModeMask      = 0x06
	subgroupEndOfGroup      = 0x08
	subgroupBit4            = 0x10 // always 1
	subgroupDefaultPriority = 0x20
	subgroupFirstObject     = 0x40
)

// SubgroupIDMode says how a SUBGROUP_HEADER conveys the Subgroup ID: the
// SUBGROUP_ID_MODE field, (Type Flags & 0x06) >> 1 (§11.3.1).
type SubgroupIDMode uint8

// Subgroup ID modes (§11.3.1). Mode 0b11 is reserved and invalid.
const (
	SubgroupIDZero        SubgroupIDMode = 0 // field absent, Subgroup ID is 0
	SubgroupIDFirstObject SubgroupIDMode = 1 // field absent, Subgroup ID is the first Object ID
	SubgroupIDPresent     SubgroupIDMode = 2 // field present
)

func (m SubgroupIDMode) String() string {
	switch m {
	case SubgroupIDZero:
		return "ZERO"
	case SubgroupIDFirstObject:
		return "FIRST_OBJECT_ID"
	case SubgroupIDPresent:
		return "PRESENT"
	}
	return fmt.Sprintf("SubgroupIDMode(%d)", uint8(m))
}

// SubgroupHeader is the SUBGROUP_HEADER that starts a subgroup data stream
// (§11.3.1). The Type Flags are carried as named fields.
type SubgroupHeader struct {
	TrackAlias uint64
	GroupID    uint64
	// SubgroupIDMode selects how SubgroupID is sent. With SubgroupIDZero,
	// SubgroupID must be 0. With SubgroupIDFirstObject, SubgroupID must
	// equal the first Object ID; a decoder learns it from the first object
	// (see SubgroupDecoder.SubgroupID).
	SubgroupIDMode SubgroupIDMode
	SubgroupID     uint64
	// HasProperties (PROPERTIES, 0x01): every object on the stream carries
	// an Object Properties field, possibly empty.
	HasProperties bool
	// EndOfGroup (END_OF_GROUP, 0x08): the subgroup holds the group's
	// largest object, so a FIN ends the group.
	EndOfGroup bool
	// DefaultPriority (DEFAULT_PRIORITY, 0x20): Priority is absent and the
	// subgroup inherits the subscription's publisher priority.
	DefaultPriority bool
	Priority        uint8
	// FirstObject (FIRST_OBJECT, 0x40): the stream's first object is the
	// first ever published in the subgroup. The original publisher MUST
	// set it, and a relay MUST set it when that is true (§2.2).
	FirstObject bool
}

// checkSubgroupType rejects the invalid Type Flags of §11.3.1.
func checkSubgroupType(t uint64) error {
	switch {
	case t >= 128:
		return violation("SUBGROUP_HEADER type 0x%x is 128 or more", t)
	case t&subgroupBit4 == 0:
		return violation("SUBGROUP_HEADER type 0x%x has bit 0x10 clear", t)
	case t&subgroupIDModeMask == subgroupIDModeMask:
		return violation("SUBGROUP_HEADER type 0x%x uses reserved SUBGROUP_ID_MODE 0b11", t)
	}
	return nil
}

// TypeFlags returns the Type Flags that encode h (§11.3.1). It fails if the
// mode is undefined, or if the mode is SubgroupIDZero with a non-zero
// SubgroupID, which the wire could not carry.
func (h SubgroupHeader) TypeFlags() (uint64, error) {
	if h.SubgroupIDMode > SubgroupIDPresent {
		return 0, violation("invalid subgroup ID mode %d", h.SubgroupIDMode)
	}
	if h.SubgroupIDMode == SubgroupIDZero && h.SubgroupID != 0 {
		return 0, violation("subgroup ID %d needs a mode other than ZERO", h.SubgroupID)
	}
	t := uint64(subgroupBit4) | uint64(h.SubgroupIDMode)<<1
	if h.HasProperties {
		t |= subgroupProperties
	}
	if h.EndOfGroup {
		t |= subgroupEndOfGroup
	}
	if h.DefaultPriority {
		t |= subgroupDefaultPriority
	}
	if h.FirstObject {
		t |= subgroupFirstObject
	}
	return t, nil
}

// Append appends the SUBGROUP_HEADER, type included, to b.
func (h SubgroupHeader) Append(b []byte) ([]byte, error) {
	t, err := h.TypeFlags()
	if err != nil {
		return b, err
	}
	b = AppendVarint(b, t)
	b = AppendVarint(b, h.TrackAlias)
	b = AppendVarint(b, h.GroupID)
	if h.SubgroupIDMode == SubgroupIDPresent {
		b = AppendVarint(b, h.SubgroupID)
	}
	if !h.DefaultPriority {
		b = append(b, h.Priority)
	}
	return b, nil
}

// ParseSubgroupHeader decodes a SUBGROUP_HEADER, type included, from b and
// returns the number of bytes used. Invalid Type Flags are a
// PROTOCOL_VIOLATION (§11.3.1).
func ParseSubgroupHeader(b []byte) (SubgroupHeader, int, error) {
	s := source{c: cursor{b}}
	h, err := s.subgroupHeaderWithType()
	return h, len(b) - len(s.c.b), err
}

// ReadSubgroupHeader reads a SUBGROUP_HEADER, type included, from r. It
// returns io.EOF if r ends before the first byte.
func ReadSubgroupHeader(r io.ByteReader) (SubgroupHeader, error) {
	s := source{r: r}
	return s.subgroupHeaderWithType()
}

func (s *source) subgroupHeaderWithType() (SubgroupHeader, error) {
	t, err := s.start("SUBGROUP_HEADER type")
	if err != nil {
		return SubgroupHeader{}, err
	}
	return s.subgroupHeader(t)
}

// subgroupHeader reads the SUBGROUP_HEADER fields after Type Flags t.
func (s *source) subgroupHeader(t uint64) (SubgroupHeader, error) {
	if err := checkSubgroupType(t); err != nil {
		return SubgroupHeader{}, err
	}
	h := SubgroupHeader{
		SubgroupIDMode:  SubgroupIDMode(t & subgroupIDModeMask >> 1),
		HasProperties:   t&subgroupProperties != 0,
		EndOfGroup:      t&subgroupEndOfGroup != 0,
		DefaultPriority: t&subgroupDefaultPriority != 0,
		FirstObject:     t&subgroupFirstObject != 0,
	}
	var err error
	if h.TrackAlias, err = s.varint("SUBGROUP_HEADER track alias"); err != nil {
		return SubgroupHeader{}, err
	}
	if h.GroupID, err = s.varint("SUBGROUP_HEADER group ID"); err != nil {
		return SubgroupHeader{}, err
	}
	if h.SubgroupIDMode == SubgroupIDPresent {
		if h.SubgroupID, err = s.varint("SUBGROUP_HEADER subgroup ID"); err != nil {
			return SubgroupHeader{}, err
		}
	}
	if !h.DefaultPriority {
		if h.Priority, err = s.uint8("SUBGROUP_HEADER publisher priority"); err != nil {
			return SubgroupHeader{}, err
		}
	}
	return h, nil
}

// SubgroupObject is the header of one object on a subgroup stream (§11.3.1,
// Figure 26): everything but the payload, whose PayloadLength bytes follow
// it on the stream. The Group ID, Subgroup ID and priority come from the
// stream's SubgroupHeader.
type SubgroupObject struct {
	ObjectID uint64
	// Properties is the raw Object Properties block (§11.1.3): Key-Value-
	// Pairs, kept as bytes so a relay forwards them unmodified. It is nil
	// when empty. Build one with KVList.Append; read one with WalkKV.
	Properties    []byte
	PayloadLength uint64
	// Status is sent only when PayloadLength is 0 (§11.3.1). Only Normal
	// may have a payload or properties (§11.1.2, §11.1.3).
	Status ObjectStatus
}

// SubgroupEncoder writes the object headers of one subgroup stream. It
// delta-encodes Object IDs (§11.3.1), so it must see every object of the
// stream in order. Set Header before the first object; the zero state is
// "no object written yet". It is not safe for concurrent use.
type SubgroupEncoder struct {
	Header SubgroupHeader

	prev    uint64 // Object ID of the last object written
	started bool   // an object has been written
	ended   bool   // an End of Group or End of Track object has been written
}

// AppendObject appends the header of o to b; the caller writes the
// PayloadLength payload bytes after it. Object IDs must increase. It fails,
// appending nothing, if o cannot be sent on this stream: properties without
// the header's PROPERTIES flag, a payload or properties on a non-Normal
// status, an object after End of Group or End of Track, or, in mode
// SubgroupIDFirstObject, a first Object ID other than Header.SubgroupID.
func (e *SubgroupEncoder) AppendObject(b []byte, o SubgroupObject) ([]byte, error) {
	if e.ended {
		return b, violation("object %d after an End of Group or End of Track object", o.ObjectID)
	}
	delta := o.ObjectID
	if e.started {
		if o.ObjectID <= e.prev {
			return b, violation("object ID %d does not follow %d", o.ObjectID, e.prev)
		}
		delta = o.ObjectID - e.prev - 1
	} else if e.Header.SubgroupIDMode == SubgroupIDFirstObject && o.ObjectID != e.Header.SubgroupID {
		return b, violation("first object ID %d is not the subgroup ID %d", o.ObjectID, e.Header.SubgroupID)
	}
	if !o.Status.Valid() {
		return b, violation("unknown object status %s", o.Status)
	}
	if o.Status != ObjectNormal && (o.PayloadLength > 0 || len(o.Properties) > 0) {
		return b, violation("object with status %s has a payload or properties", o.Status)
	}
	if len(o.Properties) > 0 {
		if !e.Header.HasProperties {
			return b, violation("object properties on a subgroup without the PROPERTIES flag")
		}
		if err := checkProperties(o.Properties); err != nil {
			return b, err
		}
	}
	b = AppendVarint(b, delta)
	if e.Header.HasProperties {
		b = appendLenBytes(b, o.Properties)
	}
	b = AppendVarint(b, o.PayloadLength)
	if o.PayloadLength == 0 {
		b = AppendVarint(b, uint64(o.Status))
	}
	e.prev, e.started, e.ended = o.ObjectID, true, o.Status != ObjectNormal
	return b, nil
}

// SubgroupDecoder reads the object headers of one subgroup stream, after its
// SUBGROUP_HEADER. It resolves delta-encoded Object IDs (§11.3.1) and, in
// mode SubgroupIDFirstObject, the Subgroup ID. Set Header before the first
// object. It is not safe for concurrent use.
type SubgroupDecoder struct {
	Header SubgroupHeader
	// MaxPropertiesLen bounds an Object Properties block read by Read;
	// 0 means DefaultMaxPropertiesLen. A larger block is a local limit, not
	// a peer error: Read reports it as INTERNAL_ERROR.
	MaxPropertiesLen int

	prev    uint64 // Object ID of the last object read
	started bool   // an object has been read
	ended   bool   // an End of Group or End of Track object has been read
}

// SubgroupID returns the stream's Subgroup ID. In mode SubgroupIDFirstObject
// it is known only once the first object has been read.
func (d *SubgroupDecoder) SubgroupID() (id uint64, known bool) {
	if d.Header.SubgroupIDMode == SubgroupIDFirstObject && !d.started {
		return 0, false
	}
	return d.Header.SubgroupID, true
}

// Parse decodes the next object header from b and returns the number of
// bytes used; the payload starts at b[n:]. Properties alias b. If b ends
// inside the header, the error wraps ErrTruncated and the decoder's state is
// unchanged, so the caller can retry with more bytes. Parsing allocates
// nothing.
func (d *SubgroupDecoder) Parse(b []byte) (SubgroupObject, int, error) {
	s := source{c: cursor{b}}
	o, err := d.next(&s, nil)
	return o, len(b) - len(s.c.b), err
}

// Read reads the next object header from r, leaving r at the first payload
// byte. Properties are read into props' storage, which is grown if too small:
// pass the previous object's Properties[:0], or a buffer of your own, to
// reuse it, so reading allocates nothing.
//
// Read returns io.EOF when r ends exactly at an object boundary, the normal
// end of a subgroup (§11.3.2); an end inside the header is a
// PROTOCOL_VIOLATION wrapping ErrTruncated (§11.3). Other read errors, such
// as a stream reset, are returned unchanged.
func (d *SubgroupDecoder) Read(r io.ByteReader, props []byte) (SubgroupObject, error) {
	s := source{r: r}
	return d.next(&s, props)
}

func (d *SubgroupDecoder) next(s *source, props []byte) (SubgroupObject, error) {
	delta, err := s.start("object ID delta")
	if err != nil {
		return SubgroupObject{}, err
	}
	if d.ended {
		// §11.3.2: objects after End of Group or End of Track would be a
		// protocol violation.
		return SubgroupObject{}, violation("object after an End of Group or End of Track object")
	}
	o := SubgroupObject{ObjectID: delta}
	if d.started {
		if delta >= MaxVarint-d.prev {
			return SubgroupObject{}, violation("object ID %d + delta %d + 1 overflows", d.prev, delta)
		}
		o.ObjectID = d.prev + delta + 1
	}
	if d.Header.HasProperties {
		if o.Properties, err = s.properties(props, d.MaxPropertiesLen); err != nil {
			return SubgroupObject{}, err
		}
	}
	if o.PayloadLength, err = s.varint("object payload length"); err != nil {
		return SubgroupObject{}, err
	}
	if o.PayloadLength == 0 {
		st, err := s.varint("object status")
		if err != nil {
			return SubgroupObject{}, err
		}
		o.Status = ObjectStatus(st)
		if err := checkStatus(o.Status, o.Properties); err != nil {
			return SubgroupObject{}, err
		}
	}
	if !d.started && d.Header.SubgroupIDMode == SubgroupIDFirstObject {
		d.Header.SubgroupID = o.ObjectID
	}
	d.prev, d.started, d.ended = o.ObjectID, true, o.Status != ObjectNormal
	return o, nil
}
