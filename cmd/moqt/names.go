package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/moqt-go/moqt/wire"
)

// Names on the command line: a NAMESPACE is its fields separated by '/'
// (live/cam1), a TRACK name is one field; a byte that is not printable
// ASCII, a space, '/' or '%' is written %XX.

// parseNamespace reads a NAMESPACE argument; empty is allowed only when
// allowEmpty (a prefix matching every namespace).
func parseNamespace(s string, allowEmpty bool) (wire.Namespace, error) {
	if s == "" || s == "/" {
		if allowEmpty {
			return wire.Namespace{}, nil
		}
		return nil, usagef("empty namespace: name it, such as live/cam1")
	}
	var ns wire.Namespace
	for f := range strings.SplitSeq(strings.Trim(s, "/"), "/") {
		b, err := unescapeName(f)
		if err != nil {
			return nil, usagef("namespace %q: %v", s, err)
		}
		if len(b) == 0 {
			return nil, usagef("namespace %q has an empty field", s)
		}
		ns = append(ns, b)
	}
	if err := ns.Validate(0); err != nil {
		return nil, usagef("namespace %q: %v", s, err)
	}
	return ns, nil
}

// parseTrack reads NAMESPACE and TRACK arguments.
func parseTrack(ns, name string) (wire.FullTrackName, error) {
	n, err := parseNamespace(ns, false)
	if err != nil {
		return wire.FullTrackName{}, err
	}
	b, err := unescapeName(name)
	if err != nil {
		return wire.FullTrackName{}, usagef("track name %q: %v", name, err)
	}
	t := wire.FullTrackName{Namespace: n, Name: b}
	if err := n.Validate(len(b)); err != nil {
		return wire.FullTrackName{}, usagef("track %s %s: %v", ns, name, err)
	}
	return t, nil
}

// formatNamespace writes ns as parseNamespace reads it.
func formatNamespace(ns wire.Namespace) string {
	var sb strings.Builder
	for i, f := range ns {
		if i > 0 {
			sb.WriteByte('/')
		}
		sb.WriteString(escapeName(f))
	}
	return sb.String()
}

// formatTrack writes a full track name as the two arguments that name it.
func formatTrack(t wire.FullTrackName) string {
	return formatNamespace(t.Namespace) + " " + escapeName(t.Name)
}

func escapeName(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '/' || c == '%' {
			fmt.Fprintf(&sb, "%%%02X", c)
			continue
		}
		sb.WriteByte(c)
	}
	return sb.String()
}

func unescapeName(s string) ([]byte, error) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return nil, fmt.Errorf("%q ends in the middle of a %%XX escape", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("%q: bad escape %q", s, s[i:i+3])
		}
		b = append(b, byte(v))
		i += 2
	}
	return b, nil
}

// parseLocation reads a Location written G:O, or G for object 0 of group G.
func parseLocation(s string) (wire.Location, error) {
	g, o, hasObject := strings.Cut(s, ":")
	gi, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return wire.Location{}, fmt.Errorf("location %q: want GROUP:OBJECT, such as 3:0", s)
	}
	var oi uint64
	if hasObject {
		if oi, err = strconv.ParseUint(o, 10, 64); err != nil {
			return wire.Location{}, fmt.Errorf("location %q: want GROUP:OBJECT, such as 3:0", s)
		}
	}
	return wire.Location{Group: gi, Object: oi}, nil
}

// loc writes a Location as parseLocation reads it.
func loc(l wire.Location) string { return fmt.Sprintf("%d:%d", l.Group, l.Object) }

// rangeEnd writes the Location a FETCH range ends at: the largest Object
// ID, which ends a range through the end of a group (moqt fetch -to G), as
// the end of that group rather than as an Object ID no one publishes.
func rangeEnd(l wire.Location) string {
	if l.Object == math.MaxUint64 {
		return fmt.Sprintf("the end of group %d", l.Group)
	}
	return loc(l)
}
