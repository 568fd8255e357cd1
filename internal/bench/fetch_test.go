package bench

import (
	"context"
	"testing"
	"time"
)

// fetchKinds are the paths BenchmarkFetch compares: raw quic-go moving
// FetchObjects objects of FetchSize bytes on one stream, with one Write
// per object (raw-quic) and gathered into 16 KiB Writes as the FETCH
// writer gathers what it serves from a cache (raw-quic-coalesced), and
// moqt answering one FETCH of as many cached objects.
var fetchKinds = []Kind{
	{Name: "raw-quic", New: func(ctx context.Context) (Path, error) { return NewRawQUIC(ctx) }},
	{Name: "raw-quic-coalesced", New: func(ctx context.Context) (Path, error) {
		p, err := NewRawQUIC(ctx)
		if p != nil {
			p.Coalesce = 16 << 10
		}
		return p, err
	}},
	{Name: "moqt-fetch", New: func(ctx context.Context) (Path, error) { return NewMoQTFetch(ctx) }},
}

// TestFetchSmoke fetches the cached objects twice and checks every byte.
// It makes no claim about speed.
func TestFetchSmoke(t *testing.T) {
	needsSockets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := NewMoQTFetch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if err := p.Move(ctx, 2*FetchObjects, FetchSize, true); err != nil {
		t.Fatal(err)
	}
	if err := p.Move(ctx, FetchObjects+1, FetchSize, false); err == nil {
		t.Error("a move of a partial fetch was accepted")
	}
}

// BenchmarkFetch measures b.N FETCHes of FetchObjects cached 1 KiB
// objects against raw quic-go moving the same objects on one stream per
// iteration, and reports objects/s: BenchmarkFetch/raw-quic,
// BenchmarkFetch/moqt-fetch. The setup (and the cache's filling) is
// outside the timer.
func BenchmarkFetch(b *testing.B) {
	for _, k := range fetchKinds {
		b.Run(k.Name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			p, err := k.New(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					b.Errorf("close: %v", err)
				}
			}()
			b.ReportAllocs()
			b.SetBytes(FetchObjects * FetchSize)
			b.ResetTimer()
			for range b.N {
				if err := p.Move(ctx, FetchObjects, FetchSize, false); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*FetchObjects)/b.Elapsed().Seconds(), "objects/s")
		})
	}
}
