package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidPath(t *testing.T) {
	for _, p := range []string{"", "/", "/live", "/a/b/", "/.well-known/moqt", "/x?", "/x?a=1&b=%2F",
		"?q", "/a:b@c/!$&'()*+,;=-._~", "/q?x/y?z"} {
		assert.True(t, ValidPath(p), "%q", p)
	}
	for _, p := range []string{"live", "/a b", "/%zz", "/%2", "/a#frag", "/a\x00", "/\u00e9", "//x?y z", "/a[b]"} {
		assert.False(t, ValidPath(p), "%q", p)
	}
}

func TestValidAuthority(t *testing.T) {
	for _, a := range []string{"example.com", "example.com:443", "example.com:", "user:pw@host", "192.0.2.1:4433",
		"[::1]", "[2001:db8::1]:443", "[v1.fe:80]", "%41b.c", "a-b_c~d", "@host"} {
		assert.True(t, ValidAuthority(a), "%q", a)
	}
	for _, a := range []string{"", ":443", "user@", "a b", "host:port", "[::1", "[zz]", "[192.0.2.1]",
		"[::1]x", "[fe80::1%25eth0]", "[v.x]", "[vz.x]", "a@b@c", "host/path", "h\u00e9"} {
		assert.False(t, ValidAuthority(a), "%q", a)
	}
}
