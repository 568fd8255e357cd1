package wire

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf8"
)

// Limits on names and phrases (§8.5, §8.7, §9.2).
const (
	MaxNamespaceFields = 32   // fields in a Track Namespace
	MaxFullNameLen     = 4096 // bytes in a Full Track Name (or a Track Namespace)
	MaxReasonLen       = 1024 // bytes in a Reason Phrase
	MaxURILen          = 8192 // bytes in a GOAWAY New Session URI
)

// Namespace is a Track Namespace: an ordered list of 0–32 fields, each at
// least one byte (§2.4.1, §8.7).
type Namespace [][]byte

// NewNamespace builds a Namespace from strings.
func NewNamespace(fields ...string) Namespace {
	ns := make(Namespace, len(fields))
	for i, f := range fields {
		ns[i] = []byte(f)
	}
	return ns
}

// size is the sum of the field lengths (§8.7).
func (ns Namespace) size() int {
	n := 0
	for _, f := range ns {
		n += len(f)
	}
	return n
}

// Validate checks the rules of §8.7 for a namespace combined with a track
// name of nameLen bytes (pass 0 for a bare namespace).
func (ns Namespace) Validate(nameLen int) error {
	if len(ns) > MaxNamespaceFields {
		return violation("track namespace has %d fields, more than %d", len(ns), MaxNamespaceFields)
	}
	for _, f := range ns {
		if len(f) == 0 {
			return violation("empty track namespace field")
		}
	}
	if n := ns.size() + nameLen; n > MaxFullNameLen {
		return violation("full track name is %d bytes, more than %d", n, MaxFullNameLen)
	}
	return nil
}

// Equal reports whether ns and other have the same fields.
func (ns Namespace) Equal(other Namespace) bool {
	if len(ns) != len(other) {
		return false
	}
	for i := range ns {
		if !bytes.Equal(ns[i], other[i]) {
			return false
		}
	}
	return true
}

// HasPrefix reports whether prefix is a field-wise prefix of ns.
func (ns Namespace) HasPrefix(prefix Namespace) bool {
	return len(prefix) <= len(ns) && ns[:len(prefix)].Equal(prefix)
}

// String renders ns as in §8.8: fields joined by '-'.
func (ns Namespace) String() string {
	var sb strings.Builder
	for i, f := range ns {
		if i > 0 {
			sb.WriteByte('-')
		}
		renderName(&sb, f)
	}
	return sb.String()
}

// Append appends the Track Namespace structure. It fails if ns breaks §8.7.
func (ns Namespace) Append(b []byte) ([]byte, error) {
	if err := ns.Validate(0); err != nil {
		return b, err
	}
	b = AppendVarint(b, uint64(len(ns)))
	for _, f := range ns {
		b = appendLenBytes(b, f)
	}
	return b, nil
}

// namespace parses a Track Namespace. The fields alias the input.
func (c *cursor) namespace() (Namespace, error) {
	n, err := c.varint("track namespace field count")
	if err != nil {
		return nil, err
	}
	if n > MaxNamespaceFields {
		return nil, violation("track namespace has %d fields, more than %d", n, MaxNamespaceFields)
	}
	ns := make(Namespace, n)
	total := 0
	for i := range ns {
		f, err := c.lenBytes("track namespace field", MaxFullNameLen)
		if err != nil {
			return nil, err
		}
		if len(f) == 0 {
			return nil, violation("empty track namespace field")
		}
		total += len(f)
		if total > MaxFullNameLen {
			return nil, violation("track namespace longer than %d bytes", MaxFullNameLen)
		}
		ns[i] = f
	}
	return ns, nil
}

// FullTrackName is a Track Namespace plus a Track Name (§2.4.1).
type FullTrackName struct {
	Namespace Namespace
	Name      []byte
}

// String renders the name as in §8.8: namespace, "--", track name.
func (t FullTrackName) String() string {
	var sb strings.Builder
	sb.WriteString(t.Namespace.String())
	sb.WriteString("--")
	renderName(&sb, t.Name)
	return sb.String()
}

// Equal reports whether t and u name the same track.
func (t FullTrackName) Equal(u FullTrackName) bool {
	return bytes.Equal(t.Name, u.Name) && t.Namespace.Equal(u.Namespace)
}

// Append appends Track Namespace, Track Name Length and Track Name.
func (t FullTrackName) Append(b []byte) ([]byte, error) {
	if err := t.Namespace.Validate(len(t.Name)); err != nil {
		return b, err
	}
	b, err := t.Namespace.Append(b)
	if err != nil {
		return b, err
	}
	return appendLenBytes(b, t.Name), nil
}

func (c *cursor) fullTrackName() (FullTrackName, error) {
	ns, err := c.namespace()
	if err != nil {
		return FullTrackName{}, err
	}
	name, err := c.lenBytes("track name", uint64(MaxFullNameLen-ns.size()))
	if err != nil {
		return FullTrackName{}, err
	}
	return FullTrackName{Namespace: ns, Name: name}, nil
}

// FitReason returns reason cut to MaxReasonLen bytes, at a UTF-8
// character boundary: a Reason Phrase is at most that long (§8.5), and an
// application's error text, which becomes one, may not be.
func FitReason(reason string) string {
	if len(reason) <= MaxReasonLen {
		return reason
	}
	cut := MaxReasonLen
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// appendReason appends a Reason Phrase (§8.5).
func appendReason(b []byte, reason string) ([]byte, error) {
	if len(reason) > MaxReasonLen {
		return b, violation("reason phrase is %d bytes, more than %d", len(reason), MaxReasonLen)
	}
	b = AppendVarint(b, uint64(len(reason)))
	return append(b, reason...), nil
}

func (c *cursor) reason() (string, error) {
	r, err := c.lenBytes("reason phrase", MaxReasonLen)
	return string(r), err
}

// renderName writes b in the §8.8 form: [A-Za-z0-9_] verbatim, every other
// byte as '.' and two lowercase hex digits.
func renderName(sb *strings.Builder, b []byte) {
	const hex = "0123456789abcdef"
	for _, c := range b {
		if isNameLiteral(c) {
			sb.WriteByte(c)
			continue
		}
		sb.WriteByte('.')
		sb.WriteByte(hex[c>>4])
		sb.WriteByte(hex[c&0xf])
	}
}

func isNameLiteral(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

var errBadName = errors.New("moqt: invalid serialized name")

// parseRenderedName reverses renderName, applying the canonical rules of
// §8.8.1: '.' takes exactly two lowercase hex digits and never encodes a byte
// that has a literal form.
func parseRenderedName(s string) ([]byte, error) {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isNameLiteral(c) {
			out = append(out, c)
			continue
		}
		if c != '.' || i+2 >= len(s) {
			return nil, errBadName
		}
		hi, ok1 := lowerHex(s[i+1])
		lo, ok2 := lowerHex(s[i+2])
		if !ok1 || !ok2 {
			return nil, errBadName
		}
		v := hi<<4 | lo
		if isNameLiteral(v) {
			return nil, errBadName
		}
		out = append(out, v)
		i += 2
	}
	return out, nil
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// ParseFullTrackName parses the §8.8 rendering "ns1-ns2--name" back into a
// FullTrackName, rejecting non-canonical forms (§8.8.1).
func ParseFullTrackName(s string) (FullTrackName, error) {
	i := strings.LastIndex(s, "--")
	if i < 0 {
		return FullTrackName{}, errBadName
	}
	name, err := parseRenderedName(s[i+2:])
	if err != nil {
		return FullTrackName{}, err
	}
	var ns Namespace
	if i > 0 {
		for _, part := range strings.Split(s[:i], "-") {
			f, err := parseRenderedName(part)
			if err != nil || len(f) == 0 {
				return FullTrackName{}, errBadName
			}
			ns = append(ns, f)
		}
	}
	return FullTrackName{Namespace: ns, Name: name}, nil
}
