package wire

import (
	"net/netip"
	"strings"
)

// Syntax checks for the PATH and AUTHORITY Setup Options, which follow the
// URI rules of RFC 3986 (§6.1, §9.1.1, §9.1.2).

// ValidPath reports whether s is a path-abempty optionally followed by "?"
// and a query, the form of the PATH option (§9.1.2).
func ValidPath(s string) bool {
	path, query, hasQuery := strings.Cut(s, "?")
	if path != "" && path[0] != '/' {
		return false
	}
	return uriChars(path, ":@/") && (!hasQuery || uriChars(query, ":@/?"))
}

// ValidAuthority reports whether s is an RFC 3986 authority,
// [userinfo "@"] host [":" port], with a non-empty host (§6.1).
func ValidAuthority(s string) bool {
	if userinfo, rest, ok := strings.Cut(s, "@"); ok {
		if !uriChars(userinfo, ":") {
			return false
		}
		s = rest
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 || !validIPLiteral(s[1:end]) {
			return false
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if port[0] != ':' {
				return false
			}
			port = port[1:]
		}
	} else {
		if i := strings.IndexByte(s, ':'); i >= 0 {
			host, port = s[:i], s[i+1:]
		}
		if host == "" || !uriChars(host, "") {
			return false
		}
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return false
		}
	}
	return true
}

// validIPLiteral reports whether s, the text between "[" and "]", is an
// IPv6address or an IPvFuture.
func validIPLiteral(s string) bool {
	if len(s) > 1 && (s[0] == 'v' || s[0] == 'V') {
		ver, rest, ok := strings.Cut(s[1:], ".")
		if !ok || ver == "" || rest == "" || strings.IndexByte(rest, '%') >= 0 {
			return false
		}
		for i := 0; i < len(ver); i++ {
			if _, ok := hexVal(ver[i]); !ok {
				return false
			}
		}
		return uriChars(rest, ":")
	}
	if strings.IndexByte(s, '%') >= 0 {
		return false // zone identifiers are not part of RFC 3986
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}

// uriChars reports whether s holds only unreserved characters,
// percent-encodings, sub-delims and the bytes in extra.
func uriChars(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%':
			if i+2 >= len(s) {
				return false
			}
			if _, ok := hexVal(s[i+1]); !ok {
				return false
			}
			if _, ok := hexVal(s[i+2]); !ok {
				return false
			}
			i += 2
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			strings.IndexByte("-._~!$&'()*+,;=", c) >= 0,
			strings.IndexByte(extra, c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hexVal decodes one hexadecimal digit of either case.
func hexVal(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
