package bench

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkRelayFanout moves objects from one publisher through each kind
// of chain (bare-quic, moqt-hop, relay) to 1, 10, 100 and 1000
// subscribers, for 100 B and 1200 B objects:
// BenchmarkRelayFanout/subs=100/size=100B/relay, … One op is one batch of
// ChainBatch objects to every subscriber; the custom metrics are what
// counts: delivered objects a second (objects/s) and process CPU time per
// delivered object (cpu-ns/object). The setup is outside the timer; the
// kinds of one count and size run back to back.
func BenchmarkRelayFanout(b *testing.B) {
	for _, subs := range ChainSubscribers {
		for _, size := range ChainSizes {
			for _, k := range ChainKinds {
				b.Run(fmt.Sprintf("subs=%d/size=%s/%s", subs, SizeName(size), k.Name), func(b *testing.B) {
					benchChain(b, k, subs, size)
				})
			}
		}
	}
}

func benchChain(b *testing.B, k ChainKind, subs, size int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := k.New(ctx, subs)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := c.Close(); err != nil {
			b.Errorf("close: %v", err)
		}
	}()
	batch := ChainBatch(subs)
	if err := c.Move(ctx, batch, size); err != nil { // warm up
		b.Fatal(err)
	}
	b.SetBytes(int64(batch) * int64(size) * int64(subs))
	b.ResetTimer()
	cpu := CPUTime()
	delivered := 0
	for b.Loop() {
		if err := c.Move(ctx, batch, size); err != nil {
			b.Fatal(err)
		}
		delivered += batch * subs
	}
	spent := CPUTime() - cpu
	b.ReportMetric(float64(delivered)/b.Elapsed().Seconds(), "objects/s")
	b.ReportMetric(float64(spent.Nanoseconds())/float64(delivered), "cpu-ns/object")
}

// BenchmarkRelayLatency publishes groups at the media-like pace
// (MediaGroupsPerSec groups a second of MediaGroupObjects objects of
// MediaObjectSize bytes) through each kind of chain to 1, 10 and 100
// subscribers and reports the latency from publish to subscriber read
// over every object and subscriber: p50-ns, p99-ns. One op is one group;
// run it with -benchtime=90x (3 s) or so.
func BenchmarkRelayLatency(b *testing.B) {
	for _, subs := range []int{1, 10, 100} {
		for _, k := range ChainKinds {
			b.Run(fmt.Sprintf("subs=%d/%s", subs, k.Name), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				c, err := k.New(ctx, subs)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Latency(ctx, 3); err != nil { // warm up
					b.Fatal(err)
				}
				b.ResetTimer()
				var all []time.Duration
				for b.Loop() {
					lat, err := c.Latency(ctx, 1)
					if err != nil {
						b.Fatal(err)
					}
					all = append(all, lat...)
				}
				b.ReportMetric(float64(Percentile(all, 50).Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(Percentile(all, 99).Nanoseconds()), "p99-ns")
			})
		}
	}
}

// BenchmarkRelayIdleSubscription measures the memory and goroutines that
// 1000 idle subscriptions to one track hold, per subscription, on each
// kind of server (both ends counted, see MeasureIdle): heap-B/sub,
// live-B/sub, stack-B/sub, goroutines/sub. One op is one whole measurement
// of several seconds: run it with -benchtime=1x.
func BenchmarkRelayIdleSubscription(b *testing.B) {
	for _, k := range IdleKinds {
		b.Run(k.Name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var row IdleRow
			for b.Loop() {
				var err error
				if row, err = MeasureIdle(ctx, k, 1000); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(row.HeapInuse, "heap-B/sub")
			b.ReportMetric(row.HeapAlloc, "live-B/sub")
			b.ReportMetric(row.Stack, "stack-B/sub")
			b.ReportMetric(row.Goroutines, "goroutines/sub")
		})
	}
}

// BenchmarkRelayHold publishes a paced track (30 objects a second of
// 1200 B, 30 to a group, for 20 s) to 1000 subscribers with the default
// configuration, served directly and through the relay, and reports the
// subscriptions cut (cut), those that missed objects (short) and the peak
// live heap (peak-live-MiB). One op is one whole measurement of about a
// minute: run it with -benchtime=1x.
func BenchmarkRelayHold(b *testing.B) {
	pace := HoldPace{Rate: 30, Size: 1200, GroupObjects: 30, Duration: 20 * time.Second}
	for _, k := range HoldKinds {
		b.Run(k.Name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var row HoldRow
			for b.Loop() {
				var err error
				if row, err = MeasureHold(ctx, k, 1000, pace); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(row.Cut), "cut")
			b.ReportMetric(float64(row.Short), "short")
			b.ReportMetric(float64(row.HeapPeak)/(1<<20), "peak-live-MiB")
		})
	}
}
