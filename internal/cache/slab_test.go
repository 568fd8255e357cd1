package cache

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Caching an object in order allocates nothing of its own on the steady
// path, without an age limit reading the clock: entries and payloads come
// from blocks.
func TestCacheAddAllocations(t *testing.T) {
	c := New(Limits{Objects: 1000}, wire.Opt[wire.Location]{})
	payload := make([]byte, 100)
	i := uint64(0)
	allocs := testing.AllocsPerRun(5000, func() {
		l := wire.Location{Group: i / 10, Object: i % 10}
		i++
		c.Begin(l)
		c.Add(Object{Location: l, Priority: 1, Payload: payload})
	})
	assert.Zero(t, allocs)
}

// Objects sharing a block are kept apart: a slice a Cursor returns cannot
// be appended into its neighbour, and each holds what was added.
func TestCacheSlabObjectsApart(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	for i := range uint64(3) {
		l := wire.Location{Object: i}
		c.Begin(l)
		c.Add(Object{Location: l, Properties: []byte{byte(i)}, Payload: []byte{byte(10 + i), byte(20 + i)}})
	}
	cu := c.Cursor(wire.Location{}, wire.Location{Object: 2}, false)
	var got []Object
	for range 3 {
		o, err := cu.Next(t.Context())
		require.NoError(t, err)
		got = append(got, o)
	}
	for i, o := range got {
		assert.Equal(t, []byte{byte(i)}, o.Properties)
		assert.Equal(t, []byte{byte(10 + i), byte(20 + i)}, o.Payload)
		assert.Equal(t, len(o.Payload), cap(o.Payload))
		assert.Equal(t, len(o.Properties), cap(o.Properties))
	}
	_ = append(got[0].Payload, 0xff)
	o, err := c.Cursor(wire.Location{Object: 1}, wire.Location{Object: 1}, false).Next(t.Context())
	require.NoError(t, err)
	assert.Equal(t, []byte{1}, o.Properties, "untouched by an append to the object before")
}
