package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	RunForwarderChild() // the forwarder processes of CompareForwarders
	QuietQUIC()
	goleak.VerifyTestMain(m)
}

// needsSockets skips a test of the harness itself, which sets up real
// sessions over loopback, unless MOQT_BENCH is set: the package measures,
// and the default test run (go test -race ./...) has no time to spend
// here. scripts/test.sh runs them once, without -race.
func needsSockets(t *testing.T) {
	t.Helper()
	if os.Getenv("MOQT_BENCH") == "" {
		t.Skip("a harness test over loopback sockets: set MOQT_BENCH=1 to run it")
	}
}

// TestSmoke moves a few objects of every size through both paths, twice
// over one connection, and checks that every byte arrives intact. It makes
// no claim about speed.
func TestSmoke(t *testing.T) {
	needsSockets(t)
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

// TestFanoutSmoke fans a few objects of a few sizes out to a few
// subscribers through both fan-outs, twice over the same connections. It
// makes no claim about cost.
func TestFanoutSmoke(t *testing.T) {
	needsSockets(t)
	for _, k := range FanoutKinds {
		t.Run(k.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			f, err := k.New(ctx, 3)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := f.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}()
			for _, size := range []int{1, 100, 64 << 10} {
				for range 2 {
					if err := f.Move(ctx, 5, size); err != nil {
						t.Fatalf("size %s: %v", SizeName(size), err)
					}
				}
			}
			c, err := MeasureFanout(ctx, f, 3, 100, time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if c.Delivered != 3*FanoutBatch(100) || c.CPU <= 0 {
				t.Errorf("measured %d objects delivered in %v of CPU", c.Delivered, c.CPU)
			}
		})
	}
}

// BenchmarkFanout measures b.N objects of 100 B and of 1 KiB going from
// one publisher to FanoutSubscribers subscribers, bare quic-go and moqt
// side by side, and reports the process CPU time per delivered object
// (cpu-ns/object): BenchmarkFanout/raw-quic/size=100B, …
func BenchmarkFanout(b *testing.B) {
	for _, size := range []int{100, 1 << 10} {
		for _, k := range FanoutKinds {
			b.Run(k.Name+"/size="+SizeName(size), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				f, err := k.New(ctx, FanoutSubscribers)
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					if err := f.Close(); err != nil {
						b.Errorf("close: %v", err)
					}
				}()
				b.SetBytes(int64(size) * FanoutSubscribers)
				b.ResetTimer()
				cpu := CPUTime()
				err = f.Move(ctx, b.N, size)
				spent := CPUTime() - cpu
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N*FanoutSubscribers), "cpu-ns/object")
			})
		}
	}
}
