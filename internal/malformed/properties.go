package malformed

import (
	"errors"

	"github.com/moqt-go/moqt/wire"
)

// errFound stops a Key-Value-Pair walk once a fault is found.
var errFound = errors.New("malformed: property found")

// Gaps are an Object's Prior Group ID Gap (§10.8) and Prior Object ID Gap
// (§10.9), from its Object Properties or the IMMUTABLE_PROPERTIES among
// them (§10.7).
type Gaps struct {
	Group  wire.Opt[uint64]
	Object wire.Opt[uint64]
}

// any reports whether the object carries either gap.
func (g Gaps) any() bool { return g.Group.Set || g.Object.Set }

// Object Properties faults that make a Track malformed.
const (
	propsOK          = iota
	propsMandatory   // a Mandatory Track Property (§3.6)
	propsNested      // IMMUTABLE_PROPERTIES inside IMMUTABLE_PROPERTIES (§10.7)
	propsUnparseable // IMMUTABLE_PROPERTIES that cannot be parsed (§10.7)
	propsTwice       // IMMUTABLE_PROPERTIES or a Prior ID Gap more than once (§10.7-§10.9)
)

// propScan is what a walk through an Object Properties block found.
type propScan struct {
	gaps       Gaps
	immutables int // IMMUTABLE_PROPERTIES seen
	fault      int
	typ        uint64 // the property at fault
}

// outer looks at a property of the block, inner at one inside its
// IMMUTABLE_PROPERTIES; both stop the walk at a fault.
func (s *propScan) outer(kv wire.KeyValue) error { return s.note(kv, false) }
func (s *propScan) inner(kv wire.KeyValue) error { return s.note(kv, true) }

func (s *propScan) note(kv wire.KeyValue, inside bool) error {
	var gap *wire.Opt[uint64]
	switch {
	case wire.IsMandatoryTrackProperty(kv.Type):
		s.fault, s.typ = propsMandatory, kv.Type
	case kv.Type == wire.PropImmutableProperties && inside:
		s.fault = propsNested
	case kv.Type == wire.PropImmutableProperties:
		s.immutables++
		if s.immutables > 1 {
			s.fault, s.typ = propsTwice, kv.Type
		} else if err := wire.WalkKV(kv.Bytes, s.inner); err != nil && s.fault == propsOK {
			s.fault = propsUnparseable
		}
	case kv.Type == wire.PropPriorGroupIDGap:
		gap = &s.gaps.Group
	case kv.Type == wire.PropPriorObjectIDGap:
		gap = &s.gaps.Object
	}
	if gap != nil {
		// One instance in all, the mutable list and IMMUTABLE_PROPERTIES
		// together (§10.8, §10.9).
		if gap.Set {
			s.fault, s.typ = propsTwice, kv.Type
		}
		*gap = wire.Some(kv.Value)
	}
	if s.fault != propsOK {
		return errFound
	}
	return nil
}

// propertyName names the properties a fault may be about.
func propertyName(t uint64) string {
	switch t {
	case wire.PropImmutableProperties:
		return "IMMUTABLE_PROPERTIES"
	case wire.PropPriorGroupIDGap:
		return "Prior Group ID Gap"
	case wire.PropPriorObjectIDGap:
		return "Prior Object ID Gap"
	}
	return "property"
}

// checkObjectProperties looks through an Object Properties block, and the
// IMMUTABLE_PROPERTIES in it, for what makes a track malformed whatever
// else the track holds:
//
//   - a Mandatory Track Property, which has Track scope only (§3.6, C005);
//   - an IMMUTABLE_PROPERTIES that nests another, or whose Key-Value-Pairs
//     cannot be parsed (§10.7);
//   - more than one IMMUTABLE_PROPERTIES, Prior Group ID Gap or Prior
//     Object ID Gap (§10.7-§10.9). §10.7 lists no Malformed Track for the
//     first; an object that breaks its MUST NOT does not conform all the
//     same, which §12.1 calls malformed, and the publishing side refuses
//     to send it;
//   - a Prior Group ID Gap larger than the Group ID, or a Prior Object ID
//     Gap larger than the Object ID (§10.8, §10.9).
//
// It returns the gaps found, for the rules that need the rest of the
// track (gaps.go). The codec has already parsed the outer block; a
// publisher's block is well-formed, as its encoder requires anyway.
func checkObjectProperties(loc wire.Location, block []byte) (Gaps, *Error) {
	var s propScan
	_ = wire.WalkKV(block, s.outer)
	switch {
	case s.fault == propsMandatory:
		return s.gaps, malformed("object %v carries Mandatory Track Property 0x%x as an Object Property", loc, s.typ) // C005
	case s.fault == propsNested:
		return s.gaps, malformed("object %v has IMMUTABLE_PROPERTIES inside IMMUTABLE_PROPERTIES", loc)
	case s.fault == propsUnparseable:
		return s.gaps, malformed("object %v has IMMUTABLE_PROPERTIES that cannot be parsed", loc)
	case s.fault == propsTwice:
		return s.gaps, malformed("object %v carries %s more than once", loc, propertyName(s.typ))
	case s.gaps.Group.Set && s.gaps.Group.Value > loc.Group:
		return s.gaps, malformed("object %v has Prior Group ID Gap %d, larger than its Group ID", loc, s.gaps.Group.Value)
	case s.gaps.Object.Set && s.gaps.Object.Value > loc.Object:
		return s.gaps, malformed("object %v has Prior Object ID Gap %d, larger than its Object ID", loc, s.gaps.Object.Value)
	}
	return s.gaps, nil
}
