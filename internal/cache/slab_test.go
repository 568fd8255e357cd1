package cache

import (
	"reflect"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Caching an object in order allocates nothing of its own on the steady
// path, without an age limit reading the clock: payloads come from
// blocks, entries from their group's array.
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

// A block no Cursor read is reused once its entries are gone: a cache
// nobody fetches from allocates little more than its entries.
func TestCacheReusesUnreadBlocks(t *testing.T) {
	c := New(Limits{Objects: 1000}, wire.Opt[wire.Location]{})
	payload := make([]byte, 1000)
	put := func(from, n uint64) {
		for i := from; i < from+n; i++ {
			l := wire.Location{Group: i / 100, Object: i % 100}
			c.Begin(l)
			c.Add(Object{Location: l, Payload: payload})
		}
	}
	put(0, 5000) // full, and the blocks' size settled
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 20_000
	put(5000, n)
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, allocated, uint64(n*len(payload)/4), "payload blocks reused, not allocated afresh")
}

// A block a Cursor returned a slice of is never reused: the slice keeps
// what it held however much is added after.
func TestCacheReadBlocksNeverReused(t *testing.T) {
	c := New(Limits{Objects: 100}, wire.Opt[wire.Location]{})
	put := func(from, n uint64) {
		for i := from; i < from+n; i++ {
			l := wire.Location{Group: i / 10, Object: i % 10}
			c.Begin(l)
			c.Add(Object{Location: l, Payload: []byte{byte(i), byte(i >> 8), 0xaa}})
		}
	}
	put(0, 100)
	cu := c.Cursor(wire.Location{}, wire.Location{Group: 0, Object: 9}, false)
	var got [][]byte
	for range 10 {
		o, err := cu.Next(t.Context())
		require.NoError(t, err)
		got = append(got, o.Payload)
	}
	put(100, 10_000)
	for i, p := range got {
		assert.Equal(t, []byte{byte(i), 0, 0xaa}, p, "object %d", i)
	}
}

// An entry holds no pointer, so that the collector skips a Cache's
// arrays of entries however many it keeps.
func TestEntryHoldsNoPointer(t *testing.T) {
	var check func(reflect.Type, string)
	check = func(ty reflect.Type, path string) {
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				f := ty.Field(i)
				check(f.Type, path+"."+f.Name)
			}
		case reflect.Array:
			check(ty.Elem(), path+"[]")
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Chan, reflect.String,
			reflect.Interface, reflect.Func, reflect.UnsafePointer:
			t.Errorf("%s is a %s", path, ty.Kind())
		}
	}
	check(reflect.TypeFor[entry](), "entry")
}
