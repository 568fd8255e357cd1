package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Measuring chains: delivered rate and CPU time per delivered object in
// alternating rounds, and latency at the media-like pace.

// ChainSubscribers are the subscriber counts the chains are measured at.
var ChainSubscribers = []int{1, 10, 100, 1000}

// ChainSizes are the object sizes the chains are measured with.
var ChainSizes = []int{100, 1200}

// ChainBatch is how many objects one chain Move carries to subscribers
// subscribers: about 100,000 deliveries, in whole groups, at least one
// group and at most 2000 objects.
func ChainBatch(subscribers int) int {
	n := 100_000 / max(subscribers, 1) / ChainGroupObjects * ChainGroupObjects
	return min(max(n, ChainGroupObjects), 2000)
}

// ChainRow is one line of the chain throughput table: one subscriber
// count and object size, every kind measured in the same run.
type ChainRow struct {
	Size, Subscribers int
	Kinds             []string
	// PerSec and PerObject are each kind's median round: delivered
	// objects a second, and process CPU time per delivered object.
	PerSec    []float64
	PerObject []time.Duration
	// RateRatio is, for each kind, the median of the per-round ratios of
	// its delivered rate to the first kind's (the bare forwarder's), and
	// CPURatio of its CPU time per delivered object to the first kind's.
	RateRatio, CPURatio []float64
	// When the forwarders run in processes of their own
	// (CompareForwarders), PerObject and CPURatio are this process's, the
	// publisher's and subscribers', and these the forwarder process's:
	// its CPU time per delivered object in its median round, the median
	// of the per-round ratios of it to the first kind's, and those ratios
	// round by round. Otherwise they are nil.
	Forwarder       []time.Duration
	ForwarderRatio  []float64
	ForwarderRounds [][]float64
}

// CompareChains sets up a chain of each kind with subscribers
// subscribers, and for each size measures them in rounds rounds of d,
// alternating their order. The first kind is the baseline of the ratios.
func CompareChains(ctx context.Context, kinds []ChainKind, subscribers int, sizes []int, rounds int, d time.Duration) ([]ChainRow, error) {
	// Every subscriber of every kind has a UDP socket of its own, all
	// open at once.
	if err := checkFiles(len(kinds)*(subscribers+4) + 64); err != nil {
		return nil, err
	}
	fans := make([]Fanout, len(kinds))
	names := make([]string, len(kinds))
	var clocks []processClock // each chain's forwarder process's, if any
	defer func() {
		for _, f := range fans {
			if f != nil {
				_ = f.Close()
			}
		}
	}()
	for i, k := range kinds {
		// Labelled, so that a CPU profile tells the chains' goroutines
		// apart: those they start inherit the label.
		var c *Chain
		var err error
		pprof.Do(ctx, pprof.Labels("path", k.Name), func(ctx context.Context) { c, err = k.New(ctx, subscribers) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Name, err)
		}
		fans[i], names[i] = c, k.Name
		if c.forwarder != nil {
			clocks = append(clocks, c.forwarder)
		}
	}
	if clocks != nil && len(clocks) != len(kinds) {
		return nil, errors.New("bench: some forwarders run in this process, some in their own")
	}
	batch := ChainBatch(subscribers)
	var rows []ChainRow
	for _, size := range sizes {
		costs, err := measureRounds(ctx, names, fans, clocks, subscribers, size, batch, rounds, d)
		if err != nil {
			return rows, fmt.Errorf("size %s: %w", SizeName(size), err)
		}
		row := ChainRow{Size: size, Subscribers: subscribers, Kinds: names}
		for i := range kinds {
			var rates, cpus, perSec []float64
			for r := range rounds {
				rates = append(rates, costs[i][r].PerSec()/costs[0][r].PerSec())
				cpus = append(cpus, float64(costs[i][r].PerObject())/float64(costs[0][r].PerObject()))
				perSec = append(perSec, costs[i][r].PerSec())
			}
			row.PerSec = append(row.PerSec, median(perSec))
			row.PerObject = append(row.PerObject, medianCost(costs[i]).PerObject())
			row.RateRatio = append(row.RateRatio, median(rates))
			row.CPURatio = append(row.CPURatio, median(cpus))
			if clocks != nil {
				addForwarder(&row, costs[i], costs[0])
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// addForwarder adds to row the forwarder process's figures of the kind
// whose rounds are costs, against base, the first kind's.
func addForwarder(row *ChainRow, costs, base []CPUCost) {
	var ratios []float64
	per := make([]time.Duration, len(costs))
	for r, c := range costs {
		ratios = append(ratios, float64(c.ForwarderPerObject())/float64(base[r].ForwarderPerObject()))
		per[r] = c.ForwarderPerObject()
	}
	slices.Sort(per)
	row.Forwarder = append(row.Forwarder, per[len(per)/2])
	row.ForwarderRatio = append(row.ForwarderRatio, median(ratios))
	row.ForwarderRounds = append(row.ForwarderRounds, ratios)
}

// ForwarderKinds are the chains CompareForwarders measures, each with its
// forwarder in a process of its own: a bare quic-go forwarder first, as
// the baseline, then the relay package's Relay, each set up as in
// ChainKinds (bare-quic, relay).
var ForwarderKinds = []ChainKind{
	{Name: "bare-quic", New: newBareForwarderProcess},
	{Name: "relay", New: newRelayProcess},
}

// CompareForwarders is CompareChains over ForwarderKinds: the publisher
// and subscribers stay in this process, each forwarder runs in a process
// of its own (this program, started again: see RunForwarderChild), and
// the rows also give each forwarder process's CPU time per delivered
// object, read at the start and end of every round.
func CompareForwarders(ctx context.Context, subscribers int, sizes []int, rounds int, d time.Duration) ([]ChainRow, error) {
	return CompareChains(ctx, ForwarderKinds, subscribers, sizes, rounds, d)
}

// LatencyRow is what Latency found for one kind of chain and subscriber
// count, over every object at every subscriber.
type LatencyRow struct {
	Kind          string
	Subscribers   int
	Samples       int
	P50, P99, Max time.Duration
}

// CompareLatency sets up a chain of each kind, one after the other, with
// subscribers subscribers, warms it up for a few groups, then publishes
// groups groups at the media-like pace and reports the latencies.
func CompareLatency(ctx context.Context, kinds []ChainKind, subscribers, groups int) ([]LatencyRow, error) {
	var rows []LatencyRow
	for _, k := range kinds {
		row, err := measureLatency(ctx, k, subscribers, groups)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", k.Name, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func measureLatency(ctx context.Context, k ChainKind, subscribers, groups int) (LatencyRow, error) {
	if err := checkFiles(subscribers + 68); err != nil {
		return LatencyRow{}, err
	}
	c, err := k.New(ctx, subscribers)
	if err != nil {
		return LatencyRow{}, err
	}
	defer c.Close()
	if _, err := c.Latency(ctx, 3); err != nil { // warm up
		return LatencyRow{}, err
	}
	lat, err := c.Latency(ctx, groups)
	if err != nil {
		return LatencyRow{}, err
	}
	p50, p99 := Percentile(lat, 50), Percentile(lat, 99) // lat is sorted now
	return LatencyRow{Kind: k.Name, Subscribers: subscribers, Samples: len(lat),
		P50: p50, P99: p99, Max: lat[len(lat)-1]}, nil
}

// checkFiles reports whether this process may hold need open files, and
// how to allow it when not. (The Go runtime has already raised the soft
// limit to the hard one.)
func checkFiles(need int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil // unknown: let the sockets tell
	}
	if lim.Cur < uint64(need) {
		return fmt.Errorf("bench: %d open files needed, the limit is %d: raise it (ulimit -n %d)", need, lim.Cur, need)
	}
	return nil
}

// ParseInts reads a comma-separated list of positive integers, as the
// commands take counts and sizes; empty fields are skipped.
func ParseInts(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
