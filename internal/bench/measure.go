package bench

import (
	"context"
	"fmt"
	"runtime/pprof"
	"sort"
	"sync"
	"time"
)

// Measuring: rates and CPU time over Moves, and the comparison of the
// paths in alternating rounds.

// Rate is one measurement.
type Rate struct {
	Objects int
	Bytes   int64
	Elapsed time.Duration
	CPU     time.Duration // process CPU time spent, both ends included
}

// CPUPerObject is the process CPU time per object moved: on a shared
// machine a steadier figure than the rate.
func (r Rate) CPUPerObject() time.Duration {
	if r.Objects == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Objects)
}

// ObjectsPerSec is the object rate.
func (r Rate) ObjectsPerSec() float64 { return float64(r.Objects) / r.Elapsed.Seconds() }

// MBPerSec is the payload rate in 10^6 bytes per second, as go test -bench
// reports MB/s.
func (r Rate) MBPerSec() float64 { return float64(r.Bytes) / 1e6 / r.Elapsed.Seconds() }

// BatchObjects is how many objects one Move carries when measuring for a
// duration: about 16 MiB, at least 4 and at most 20000 objects.
func BatchObjects(size int) int {
	n := (16 << 20) / max(size, 1)
	return min(max(n, 4), 20000)
}

// Measure runs Moves of BatchObjects(size) objects on p until d has
// passed and returns the rate over them.
func Measure(ctx context.Context, p Path, size int, d time.Duration) (Rate, error) {
	batch := BatchObjects(size)
	var r Rate
	start, cpu := time.Now(), CPUTime()
	for r.Elapsed < d {
		if err := p.Move(ctx, batch, size, false); err != nil {
			return r, err
		}
		r.Objects += batch
		r.Bytes += int64(batch) * int64(size)
		r.Elapsed = time.Since(start)
	}
	r.CPU = CPUTime() - cpu
	return r, nil
}

// Row is one line of the comparison table.
type Row struct {
	Size      int
	Raw, MoQT Rate // the median rounds
	// Ratio is the median of the per-round ratios of moqt's object rate
	// to raw quic-go's.
	Ratio float64
	// CPURatio is the median of the per-round ratios of raw quic-go's CPU
	// time per object to moqt's: like Ratio, 1 when moqt costs nothing.
	CPURatio float64
}

// Compare measures raw quic-go and moqt for size, alternating between them
// for rounds rounds of d each so that drift in the machine's load hits
// both alike, and reports the medians. Each path's connection is set up
// once and warmed up before the first round.
func Compare(ctx context.Context, size, rounds int, d time.Duration) (Row, error) {
	paths := make([]Path, len(Kinds))
	var closeOnce sync.Once
	closeAll := func() {
		closeOnce.Do(func() {
			for _, p := range paths {
				if p != nil {
					_ = p.Close()
				}
			}
		})
	}
	defer closeAll()
	for i, k := range Kinds {
		var p Path
		var err error
		pprof.Do(ctx, pprof.Labels("path", k.Name), func(ctx context.Context) { p, err = k.New(ctx) })
		if err != nil {
			return Row{}, fmt.Errorf("%s: %w", k.Name, err)
		}
		paths[i] = p
		if err := p.Move(ctx, BatchObjects(size), size, false); err != nil { // warm up
			return Row{}, fmt.Errorf("%s: %w", k.Name, err)
		}
	}
	rates := make([][]Rate, len(Kinds))
	var ratios, cpuRatios []float64
	for round := range rounds {
		var this [2]Rate
		for j := range Kinds {
			i := j
			if round%2 == 1 {
				i = len(Kinds) - 1 - j // alternate which goes first
			}
			var r Rate
			var err error
			pprof.Do(ctx, pprof.Labels("path", Kinds[i].Name), func(ctx context.Context) { r, err = Measure(ctx, paths[i], size, d) })
			if err != nil {
				return Row{}, fmt.Errorf("%s: %w", Kinds[i].Name, err)
			}
			rates[i] = append(rates[i], r)
			this[i] = r
		}
		ratios = append(ratios, this[1].ObjectsPerSec()/this[0].ObjectsPerSec())
		cpuRatios = append(cpuRatios, float64(this[0].CPUPerObject())/float64(this[1].CPUPerObject()))
	}
	closeAll()
	return Row{Size: size, Raw: medianRate(rates[0]), MoQT: medianRate(rates[1]), Ratio: median(ratios),
		CPURatio: median(cpuRatios)}, nil
}

func medianRate(rs []Rate) Rate {
	rs = append([]Rate(nil), rs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].ObjectsPerSec() < rs[j].ObjectsPerSec() })
	return rs[len(rs)/2]
}

func median(xs []float64) float64 {
	xs = append([]float64(nil), xs...)
	sort.Float64s(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}
