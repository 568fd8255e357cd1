package wire

import "fmt"

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

func (l Location) String() string { return fmt.Sprintf("{%d, %d}", l.Group, l.Object) }

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
