package wire

import "strconv"

// Location identifies an Object within a Track: {Group, Object} (§8.2).
type Location struct {
	Group  uint64
	Object uint64
}

// Less reports whether l < m: l.Group < m.Group, or the groups are equal and
// l.Object < m.Object (§8.2).
func (l Location) Less(m Location) bool {
	return l.Group < m.Group || (l.Group == m.Group && l.Object < m.Object)
}

// Compare returns -1, 0 or +1 as l is less than, equal to or greater than m.
func (l Location) Compare(m Location) int {
	switch {
	case l.Less(m):
		return -1
	case m.Less(l):
		return 1
	}
	return 0
}

// String formats l as {Group, Object}: {5, 2}. A field equal to MaxVarint,
// the open end of a filter or range (the end of a group, the end of the
// track), prints as max: {5, max}, {max, max}. No ID is written max
// otherwise, so the form is unambiguous.
func (l Location) String() string {
	return "{" + locationField(l.Group) + ", " + locationField(l.Object) + "}"
}

func locationField(v uint64) string {
	if v == MaxVarint {
		return "max"
	}
	return strconv.FormatUint(v, 10)
}

// Append appends the Location structure to b.
func (l Location) Append(b []byte) []byte {
	return AppendVarint(AppendVarint(b, l.Group), l.Object)
}

func (c *cursor) location(what string) (Location, error) {
	g, n := ParseVarint(c.b)
	if n == 0 {
		return Location{}, truncated(what + " group")
	}
	o, m := ParseVarint(c.b[n:])
	if m == 0 {
		return Location{}, truncated(what + " object")
	}
	c.b = c.b[n+m:]
	return Location{Group: g, Object: o}, nil
}
