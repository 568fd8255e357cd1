package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTrackKeyDistinguishesFieldSplits(t *testing.T) {
	names := []FullTrackName{
		{Namespace: NewNamespace("a"), Name: []byte("bc")},
		{Namespace: NewNamespace("ab"), Name: []byte("c")},
		{Namespace: NewNamespace("a", "b"), Name: []byte("c")},
		{Namespace: NewNamespace("a", "bc")},
		{Namespace: NewNamespace("abc")},
		{Name: []byte("abc")},
		{Namespace: NewNamespace("a", "b", "c")},
		{Namespace: NewNamespace("a"), Name: []byte("b\x01c")},
		{Namespace: NewNamespace("a\x01b"), Name: []byte("c")},
	}
	seen := map[TrackKey]int{}
	for i, n := range names {
		if j, dup := seen[n.Key()]; dup {
			t.Errorf("%v and %v share a key", names[j], n)
		}
		seen[n.Key()] = i
	}
	assert.Len(t, seen, len(names))
}

func TestNamespaceKeyDistinguishesFieldSplits(t *testing.T) {
	spaces := []Namespace{
		nil,
		NewNamespace("a", "bc"),
		NewNamespace("ab", "c"),
		NewNamespace("abc"),
		NewNamespace("a", "b", "c"),
		NewNamespace("a\x01b"),
	}
	seen := map[NamespaceKey]bool{}
	for _, ns := range spaces {
		assert.False(t, seen[ns.Key()], "%v shares a key", ns)
		seen[ns.Key()] = true
	}
}

// TestKeysMatchEqual: over random names from a two-letter alphabet, which
// collide often, keys are equal exactly when Equal says the names are,
// whatever slices hold the bytes. Long names are included, past any
// internal buffer.
func TestKeysMatchEqual(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	field := func() []byte {
		n := rng.IntN(3)
		if rng.IntN(20) == 0 {
			n = 200
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab"[rng.IntN(2)]
		}
		return b
	}
	random := func() FullTrackName {
		var t FullTrackName
		for range rng.IntN(3) {
			t.Namespace = append(t.Namespace, field())
		}
		t.Name = field()
		return t
	}
	for range 20000 {
		x, y := random(), random()
		assert.Equal(t, x.Equal(y), x.Key() == y.Key(), "%q %q / %q %q", x.Namespace, x.Name, y.Namespace, y.Name)
		assert.Equal(t, x.Namespace.Equal(y.Namespace), x.Namespace.Key() == y.Namespace.Key(), "%q / %q", x.Namespace, y.Namespace)
		copied := FullTrackName{Name: bytes.Clone(x.Name)}
		for _, f := range x.Namespace {
			copied.Namespace = append(copied.Namespace, bytes.Clone(f))
		}
		assert.Equal(t, x.Key(), copied.Key())
	}
}

func TestTrackKeyAsMapKey(t *testing.T) {
	m := map[TrackKey]string{}
	m[FullTrackName{Namespace: NewNamespace("live", "cam1"), Name: []byte("video")}.Key()] = "video"
	m[FullTrackName{Namespace: NewNamespace("live", "cam1"), Name: []byte("audio")}.Key()] = "audio"
	assert.Equal(t, "video", m[FullTrackName{Namespace: NewNamespace("live", "cam1"), Name: []byte("video")}.Key()])
	_, ok := m[FullTrackName{Namespace: NewNamespace("live", "cam1video")}.Key()]
	assert.False(t, ok)
}
