package wire

import "errors"

// MaxKVBytesLen is the largest Length of an odd-typed Key-Value-Pair (§8.3).
const MaxKVBytesLen = 1<<16 - 1

// KeyValue is one Key-Value-Pair (§8.3). An even Type carries Value (one
// vi64); an odd Type carries Bytes (at most 65535 of them).
type KeyValue struct {
	Type  uint64
	Value uint64
	Bytes []byte
}

// KVList is a sequence of Key-Value-Pairs, used for Setup Options, Track
// Properties and Object Properties. Types are delta-encoded on the wire, so
// a list is encoded in the order given and that order must be non-decreasing
// by Type; a Type may repeat.
type KVList []KeyValue

// Get returns the first pair of type t in l itself. The value of a Track or
// Object Property is Lookup's to find: it may sit inside
// IMMUTABLE_PROPERTIES (§10.7).
func (l KVList) Get(t uint64) (KeyValue, bool) {
	for _, kv := range l {
		if kv.Type == t {
			return kv, true
		}
	}
	return KeyValue{}, false
}

// Property lookups (§10.7): "When looking for the value of a property,
// processors MUST search both the mutable properties and the contents of
// Immutable Properties." Only one level is searched: an
// IMMUTABLE_PROPERTIES inside another makes the track malformed (§10.7),
// which the data plane reports. Pairs inside IMMUTABLE_PROPERTIES after
// one that does not parse are not searched, nor, in an encoded block,
// pairs after one that does not parse. None of these allocates.

// Lookup returns the value of property t in Track or Object Properties l:
// the first instance inside IMMUTABLE_PROPERTIES, else the first among the
// properties themselves. §10.7 does not say which applies when a property
// with one value appears in both places; the immutable one is taken, as
// the Original Publisher set it and no relay can have changed it (§10.7),
// while the mutable list may be changed on the way.
func (l KVList) Lookup(t uint64) (KeyValue, bool) {
	var p propertyPick
	l.EachProperty(t, p.take)
	return p.kv, p.ok
}

// LookupProperty is Lookup over an encoded block of Key-Value-Pairs, such
// as an object's Object Properties.
func LookupProperty(block []byte, t uint64) (KeyValue, bool) {
	var p propertyPick
	EachProperty(block, t, p.take)
	return p.kv, p.ok
}

// propertyPick keeps the instance Lookup returns.
type propertyPick struct {
	kv KeyValue
	ok bool
}

// take keeps kv if it is the first instance, or the first immutable one,
// which ends the search.
func (p *propertyPick) take(kv KeyValue, immutable bool) bool {
	if immutable || !p.ok {
		p.kv, p.ok = kv, true
	}
	return !immutable
}

// EachProperty calls fn with each instance of property t in l, in order,
// those inside an IMMUTABLE_PROPERTIES at its place, with immutable set,
// until fn returns false. For a property that allows several values, each
// is one instance (§10.7).
func (l KVList) EachProperty(t uint64, fn func(kv KeyValue, immutable bool) bool) {
	for _, kv := range l {
		if !visitProperty(kv, t, fn) {
			return
		}
	}
}

// EachProperty is KVList.EachProperty over an encoded block of
// Key-Value-Pairs, such as an object's Object Properties. Types ascend in
// a block (§8.3), so the walk ends past both t and IMMUTABLE_PROPERTIES.
func EachProperty(block []byte, t uint64, fn func(kv KeyValue, immutable bool) bool) {
	_ = WalkKV(block, func(kv KeyValue) error {
		if !visitProperty(kv, t, fn) || (kv.Type > t && kv.Type > PropImmutableProperties) {
			return errStopWalk
		}
		return nil
	})
}

// visitProperty calls fn with kv if it is property t, or with each
// instance of t inside it if it is IMMUTABLE_PROPERTIES. It returns false
// once fn has.
func visitProperty(kv KeyValue, t uint64, fn func(kv KeyValue, immutable bool) bool) bool {
	switch kv.Type {
	case t:
		return fn(kv, false)
	case PropImmutableProperties:
		more := true
		_ = WalkKV(kv.Bytes, func(in KeyValue) error {
			if in.Type == t {
				more = fn(in, true)
			}
			if !more || in.Type > t {
				return errStopWalk
			}
			return nil
		})
		return more
	}
	return true
}

// errStopWalk ends a WalkKV early.
var errStopWalk = errors.New("wire: walk stopped")

// Append appends the encoded list to b. It fails if the types decrease or an
// odd-typed value is longer than 65535 bytes.
func (l KVList) Append(b []byte) ([]byte, error) {
	var prev uint64
	for _, kv := range l {
		if kv.Type < prev {
			return b, violation("key-value types not in ascending order (%d after %d)", kv.Type, prev)
		}
		b = AppendVarint(b, kv.Type-prev)
		prev = kv.Type
		if kv.Type%2 == 0 {
			b = AppendVarint(b, kv.Value)
			continue
		}
		if len(kv.Bytes) > MaxKVBytesLen {
			return b, violation("key-value type %d: %d bytes, more than %d", kv.Type, len(kv.Bytes), MaxKVBytesLen)
		}
		b = appendLenBytes(b, kv.Bytes)
	}
	return b, nil
}

// ParseKVList decodes a whole buffer of Key-Value-Pairs. Bytes fields alias
// b. A delta that overflows 2^64-1 or an odd length over 65535 is a
// PROTOCOL_VIOLATION (§8.3).
func ParseKVList(b []byte) (KVList, error) {
	var l KVList
	err := WalkKV(b, func(kv KeyValue) error {
		l = append(l, kv)
		return nil
	})
	return l, err
}

// WalkKV decodes the Key-Value-Pairs in b one at a time without allocating,
// calling fn for each; it stops at the first error from the encoding or from
// fn. Bytes fields alias b.
func WalkKV(b []byte, fn func(KeyValue) error) error {
	c := cursor{b}
	var typ uint64
	for i := 0; !c.empty(); i++ {
		d, err := c.varint("key-value type")
		if err != nil {
			return err
		}
		if i > 0 && d > MaxVarint-typ {
			return violation("key-value type delta overflows")
		}
		typ += d
		kv := KeyValue{Type: typ}
		if typ%2 == 0 {
			if kv.Value, err = c.varint("key-value value"); err != nil {
				return err
			}
		} else if kv.Bytes, err = c.lenBytes("key-value bytes", MaxKVBytesLen); err != nil {
			return err
		}
		if err := fn(kv); err != nil {
			return err
		}
	}
	return nil
}

// Property types (§10, §16.8). Track Properties ride at the end of SUBSCRIBE_OK,
// PUBLISH, FETCH_OK and TRACK_STATUS_OK; Object Properties in object headers.
const (
	PropObjectDeliveryTimeout      uint64 = 0x02 // Track, Object
	PropMaxCacheDuration           uint64 = 0x04 // Track
	PropSubgroupDeliveryTimeout    uint64 = 0x06 // Track, Object
	PropImmutableProperties        uint64 = 0x0B // Track, Object: nested Key-Value-Pairs
	PropDefaultPublisherPriority   uint64 = 0x0E // Track
	PropDefaultPublisherGroupOrder uint64 = 0x22 // Track
	PropDynamicGroups              uint64 = 0x30 // Track
	PropPriorGroupIDGap            uint64 = 0x3C // Object
	PropPriorObjectIDGap           uint64 = 0x3E // Object
)

// IsMandatoryTrackProperty reports whether t is in the Mandatory Track
// Property range 0x4000–0x7FFF (§3.6): a receiver that does not understand
// one must not process or forward the track.
func IsMandatoryTrackProperty(t uint64) bool { return t >= 0x4000 && t <= 0x7FFF }
