package bench

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	QuietQUIC()
	goleak.VerifyTestMain(m)
}

// TestSmoke moves a few objects of every size through both paths, twice
// over one connection, and checks that every byte arrives intact. It makes
// no claim about speed.
func TestSmoke(t *testing.T) {
	for _, k := range Kinds {
		t.Run(k.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			p, err := k.New(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := p.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}()
			for _, size := range append([]int{1, 8, 100_000, 3}, Sizes...) {
				n := 5
				if size >= 1<<20 {
					n = 2
				}
				for range 2 {
					if err := p.Move(ctx, n, size, true); err != nil {
						t.Fatalf("size %s: %v", SizeName(size), err)
					}
				}
			}
		})
	}
}

// BenchmarkPubSub measures b.N objects of each size going publisher →
// subscriber over one stream, raw quic-go and moqt side by side:
// BenchmarkPubSub/raw-quic/size=1KiB, BenchmarkPubSub/moqt/size=1KiB, …
// The connection is set up before the timer starts; the timer stops once
// the subscriber has read the last object and the stream's end.
func BenchmarkPubSub(b *testing.B) {
	for _, size := range Sizes {
		// Raw and moqt of one size run back to back, so that the machine's
		// drifting load affects both alike.
		for _, k := range Kinds {
			b.Run(k.Name+"/size="+SizeName(size), func(b *testing.B) {
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
				b.SetBytes(int64(size))
				b.ResetTimer()
				err = p.Move(ctx, b.N, size, false)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "objects/s")
			})
		}
	}
}
