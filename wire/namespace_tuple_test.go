package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireProtocolError asserts err is a *ProtocolError with code.
func requireProtocolError(t testing.TB, err error, code SessionErrorCode) {
	t.Helper()
	var pe *ProtocolError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, code, pe.Code, "reason: %s", pe.Reason)
}

func TestNamespaceGolden(t *testing.T) {
	vecs := loadVectors(t, "namespace.txt")
	cases := map[string]FullTrackName{
		"empty-namespace-empty-name": {Namespace: Namespace{}, Name: []byte{}},
		"two-fields":                 {Namespace: NewNamespace("example.net", "team2"), Name: []byte("report")},
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			vec := vecs[name]
			c := cursor{vec.Bytes}
			got, err := c.fullTrackName()
			require.NoError(t, err)
			require.NoError(t, c.done("vector"))
			assert.True(t, want.Equal(got), "got %s", got)
			enc, err := want.Append(nil)
			require.NoError(t, err)
			assert.Equal(t, vec.Bytes, enc)
			for i := range len(vec.Bytes) {
				c := cursor{vec.Bytes[:i]}
				_, err := c.fullTrackName()
				assert.ErrorIs(t, err, ErrTruncated, "prefix %d", i)
			}
		})
	}
}

func TestNamespaceLimits(t *testing.T) {
	fields := func(n int) Namespace {
		ns := make(Namespace, n)
		for i := range ns {
			ns[i] = []byte{'a'}
		}
		return ns
	}
	encode := func(ns Namespace) []byte {
		// Encode by hand so the encoder's own checks do not hide the parser's.
		b := AppendVarint(nil, uint64(len(ns)))
		for _, f := range ns {
			b = appendLenBytes(b, f)
		}
		return b
	}
	t.Run("32 fields ok", func(t *testing.T) {
		c := cursor{encode(fields(32))}
		ns, err := c.namespace()
		require.NoError(t, err)
		assert.Len(t, ns, 32)
	})
	t.Run("33 fields", func(t *testing.T) {
		c := cursor{encode(fields(33))}
		_, err := c.namespace()
		requireProtocolError(t, err, ProtocolViolation)
		_, err = fields(33).Append(nil)
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("empty field", func(t *testing.T) {
		c := cursor{encode(Namespace{[]byte("a"), {}})}
		_, err := c.namespace()
		requireProtocolError(t, err, ProtocolViolation)
		_, err = Namespace{{}}.Append(nil)
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("full track name 4096 ok, 4097 not", func(t *testing.T) {
		ns := Namespace{bytes.Repeat([]byte{'n'}, 4000)}
		ok := appendLenBytes(encode(ns), bytes.Repeat([]byte{'x'}, 96))
		c := cursor{ok}
		_, err := c.fullTrackName()
		require.NoError(t, err)

		long := appendLenBytes(encode(ns), bytes.Repeat([]byte{'x'}, 97))
		c = cursor{long}
		_, err = c.fullTrackName()
		requireProtocolError(t, err, ProtocolViolation)
		_, err = FullTrackName{Namespace: ns, Name: bytes.Repeat([]byte{'x'}, 97)}.Append(nil)
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("namespace alone over 4096", func(t *testing.T) {
		c := cursor{encode(Namespace{bytes.Repeat([]byte{'n'}, 4000), bytes.Repeat([]byte{'m'}, 97)})}
		_, err := c.namespace()
		requireProtocolError(t, err, ProtocolViolation)
	})
	t.Run("huge field length does not allocate", func(t *testing.T) {
		b := AppendVarint(AppendVarint(nil, 1), MaxVarint)
		c := cursor{b}
		_, err := c.namespace()
		requireProtocolError(t, err, ProtocolViolation)
	})
}

func TestNamespacePrefix(t *testing.T) {
	ns := NewNamespace("a", "b", "c")
	assert.True(t, ns.HasPrefix(NewNamespace("a", "b")))
	assert.True(t, ns.HasPrefix(Namespace{}))
	assert.False(t, ns.HasPrefix(NewNamespace("a", "c")))
	assert.False(t, NewNamespace("a").HasPrefix(ns))
}

func TestReasonPhrase(t *testing.T) {
	ok := strings.Repeat("r", MaxReasonLen)
	b, err := appendReason(nil, ok)
	require.NoError(t, err)
	c := cursor{b}
	got, err := c.reason()
	require.NoError(t, err)
	assert.Equal(t, ok, got)

	_, err = appendReason(nil, ok+"r")
	requireProtocolError(t, err, ProtocolViolation)
	c = cursor{appendLenBytes(nil, []byte(ok+"r"))}
	_, err = c.reason()
	requireProtocolError(t, err, ProtocolViolation)
}

// TestNameRendering follows the example of §8.8.1.
func TestNameRendering(t *testing.T) {
	name := FullTrackName{Namespace: NewNamespace("example.net", "team2", "project_x"), Name: []byte("report")}
	assert.Equal(t, "example.2enet-team2-project_x--report", name.String())
	back, err := ParseFullTrackName("example.2enet-team2-project_x--report")
	require.NoError(t, err)
	assert.True(t, name.Equal(back))

	bin := FullTrackName{Namespace: Namespace{{0x00, 0xff, '-'}}, Name: []byte{'.', 'A'}}
	s := bin.String()
	assert.Equal(t, ".00.ff.2d--.2eA", s)
	back, err = ParseFullTrackName(s)
	require.NoError(t, err)
	assert.True(t, bin.Equal(back))

	for _, bad := range []string{
		"ns--a.",   // trailing period
		"ns--a.6",  // one hex digit
		"ns--.2E",  // uppercase hex
		"ns--.61",  // 'a' must be literal
		"ns--a b",  // space is not literal
		"nons",     // no "--"
		"a--b-c",   // '-' inside the track name
		"a---b--c", // empty namespace field
	} {
		_, err := ParseFullTrackName(bad)
		assert.True(t, errors.Is(err, errBadName), "%q parsed", bad)
	}
}

func TestLocationOrder(t *testing.T) {
	a := Location{Group: 1, Object: 5}
	b := Location{Group: 2, Object: 0}
	c := Location{Group: 2, Object: 1}
	assert.True(t, a.Less(b))
	assert.True(t, b.Less(c))
	assert.False(t, c.Less(a))
	assert.False(t, b.Less(b))
	assert.Equal(t, -1, a.Compare(c))
	assert.Equal(t, 1, c.Compare(b))
	assert.Equal(t, 0, b.Compare(b))
	enc := c.Append(nil)
	cur := cursor{enc}
	got, err := cur.location("loc")
	require.NoError(t, err)
	assert.Equal(t, c, got)
}
