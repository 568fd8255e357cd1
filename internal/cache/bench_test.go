package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// BenchmarkMemoryPerByte reports the heap a cache of 1 KiB objects holds
// per payload byte (heap-B/B; 1 would be the payloads alone), and what one
// Add costs once the cache is full and each Add evicts.
func BenchmarkMemoryPerByte(b *testing.B) {
	const n, size = 10000, 1024
	payload := make([]byte, size)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := New(Limits{Objects: n}, wire.Opt[wire.Location]{})
	for i := range uint64(n) {
		l := wire.Location{Group: i / 32, Object: i % 32}
		c.Begin(l)
		c.Add(Object{Location: l, SubgroupID: 0, Priority: 1, Payload: payload})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perByte := float64(after.HeapAlloc-before.HeapAlloc) / float64(n*size)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range uint64(b.N) {
		l := wire.Location{Group: (n + i) / 32, Object: (n + i) % 32}
		c.Begin(l)
		c.Add(Object{Location: l, Priority: 1, Payload: payload})
	}
	b.StopTimer()
	runtime.KeepAlive(c)
	b.ReportMetric(perByte, "heap-B/B")
}

// BenchmarkCursorWalk walks 1,000 cached 1 KiB objects.
func BenchmarkCursorWalk(b *testing.B) {
	const n, size = 1000, 1024
	c := New(Limits{Objects: n}, wire.Opt[wire.Location]{})
	payload := make([]byte, size)
	for i := range uint64(n) {
		l := wire.Location{Group: i / 100, Object: i % 100}
		c.Begin(l)
		c.Add(Object{Location: l, Payload: payload})
	}
	ctx := context.Background()
	end := wire.Location{Group: n/100 - 1, Object: 99}
	b.ReportAllocs()
	b.SetBytes(n * size)
	for b.Loop() {
		cu := c.Cursor(wire.Location{}, end, false)
		count := 0
		for {
			o, err := cu.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil || o.EndOfRange != 0 {
				b.Fatalf("entry %v, %v", o, err)
			}
			count++
		}
		if count != n {
			b.Fatalf("%d objects", count)
		}
	}
}

// BenchmarkSubgroupPut is a relay's cache on the path of every object: one
// Subgroup.Put per object, groups of 100 objects, with the relay's default
// limits (8 MiB, 30 s) and a Budget, the cache full (each Put evicts). In
// "interleaved", ten groups are written at once, an object to each in
// turn, as a relay forwarding ten upstream streams does; in "sequential"
// one after the other.
func BenchmarkSubgroupPut(b *testing.B) {
	for _, open := range []int{1, 10} {
		for _, size := range []int{100, 1200} {
			name := fmt.Sprintf("sequential/%dB", size)
			if open > 1 {
				name = fmt.Sprintf("interleaved/%dB", size)
			}
			b.Run(name, func(b *testing.B) { benchSubgroupPut(b, open, size) })
		}
	}
}

func benchSubgroupPut(b *testing.B, open, size int) {
	const perGroup = 100
	c := New(Limits{Bytes: 8 << 20, Duration: 30 * time.Second, Budget: NewBudget(256 << 20), Relayed: true},
		wire.Opt[wire.Location]{})
	payload := make([]byte, size)
	subs := make([]*Subgroup, open)
	// Object i goes to slot i%open; each slot's groups follow one another
	// and the slots' groups interleave: slot k writes groups k, k+open, …
	put := func(i uint64) {
		k, n := i%uint64(open), i/uint64(open)
		g, id := k+uint64(open)*(n/perGroup), n%perGroup
		if id == 0 {
			if subs[k] != nil {
				subs[k].Finish(false)
			}
			subs[k] = c.OpenSubgroup(g, 0)
		}
		subs[k].Put(Object{Location: wire.Location{Group: g, Object: id}, Priority: 1, Payload: payload}, int64(i))
	}
	n := uint64(8<<20) / uint64(size+EntryOverhead) * 2 // full
	for i := range n {
		put(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range uint64(b.N) {
		put(n + i)
	}
}
