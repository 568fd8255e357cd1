package wire

import "strings"

// Version is a negotiated MoQT draft. It is chosen by the transport (ALPN on
// native QUIC, WT-Available-Protocols on WebTransport, §6.2) and passed to
// the codec, so that a later draft is a small delta rather than a second
// codec.
type Version uint8

// The drafts this package speaks. Draft 20 and draft 21 share one wire format
// (draft 21 only restructured the text); 18 and 19 differ as
// docs/drafts.md lists, and Profile describes.
const (
	Draft18 Version = 18
	Draft19 Version = 19
	Draft20 Version = 20
	Draft21 Version = 21
)

// Versions lists the supported drafts in preference order, newest first.
var Versions = []Version{Draft21, Draft20, Draft19, Draft18}

// ALPN returns the protocol identifier of v: "moqt-" and the draft number.
func (v Version) ALPN() string {
	switch v {
	case Draft18:
		return "moqt-18"
	case Draft19:
		return "moqt-19"
	case Draft20:
		return "moqt-20"
	case Draft21:
		return "moqt-21"
	}
	return ""
}

func (v Version) String() string {
	if s := v.ALPN(); s != "" {
		return s
	}
	return "moqt-unknown"
}

// Supported reports whether the codec speaks v.
func (v Version) Supported() bool { return v.ALPN() != "" }

// ParseALPN returns the Version named by a protocol identifier such as
// "moqt-21".
func ParseALPN(s string) (Version, bool) {
	if !strings.HasPrefix(s, "moqt-") {
		return 0, false
	}
	for _, v := range Versions {
		if v.ALPN() == s {
			return v, true
		}
	}
	return 0, false
}

// ALPNs returns the protocol identifiers of Versions, newest first.
func ALPNs() []string {
	out := make([]string, len(Versions))
	for i, v := range Versions {
		out[i] = v.ALPN()
	}
	return out
}
