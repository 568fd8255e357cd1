package cache

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"

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
