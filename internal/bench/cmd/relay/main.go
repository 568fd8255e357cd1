// Command relay measures one publisher → forwarder → N subscribers over
// loopback QUIC, in one run, for a bare quic-go forwarder, a hand-written
// moqt hop and the relay package, and prints five tables. Throughput: per
// subscriber count and object size, delivered objects a second and process
// CPU time per delivered object of each, and the ratios to the bare
// forwarder (rate: at least 0.85 at 100 subscribers is the relay's
// target). Latency from publish to subscriber read at a media-like pace (30
// groups a second of 10 objects of 1200 B), p50 and p99. Memory and
// goroutines per idle subscription, on the relay and on a LocalTrack
// serving directly. Holding a paced track (30 objects a second of 1200 B)
// at 1000 subscribers with the default configuration, directly and
// through the relay: subscriptions cut, peak live heap and its ratio to
// direct's, how long publishing and delivering everything took.
//
//	go run ./internal/bench/cmd/relay -d 1s -rounds 3
//
// The forwarders alone, after the throughput table: the bare quic-go
// forwarder and the relay each run in a process of their own (this
// program, started again), the publisher and subscribers staying in this
// one, and the forwarder process's CPU time per delivered object is
// compared, round by round (-forwarder-subscribers; -forwarder-cpuprofile
// profiles the forwarder processes). The relay's target: at most 1.05x.
//
// Each count and size measures the chains in alternating rounds of -d and
// reports the median round of each and the median per-round ratio.
// Absolute figures on a shared machine are noise; the ratios are the
// numbers to quote.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/moqt-go/moqt/internal/bench"
)

func main() {
	bench.RunForwarderChild()
	d := flag.Duration("d", time.Second, "how long each chain runs per round")
	rounds := flag.Int("rounds", 3, "rounds per count and size, alternating the chains' order")
	subs := flag.String("subscribers", "1,10,100,1000", "subscriber counts of the throughput table; empty for none")
	sizes := flag.String("sizes", "100,1200", "object sizes in bytes of the throughput table")
	latSubs := flag.String("latency-subscribers", "1,10,100", "subscriber counts of the latency table; empty for none")
	latFor := flag.Duration("latency-d", 3*time.Second, "how long each latency run publishes")
	idle := flag.Int("idle", 1000, "idle subscriptions of the memory table; 0 for none")
	hold := flag.Int("hold", 1000, "subscribers of the paced hold table; 0 for none")
	holdRate := flag.Int("hold-rate", 30, "objects a second the hold table publishes")
	holdSize := flag.Int("hold-size", 1200, "object size in bytes of the hold table")
	holdGroup := flag.Int("hold-group", 30, "objects to a group in the hold table")
	holdFor := flag.Duration("hold-d", 20*time.Second, "how long each hold run publishes")
	holdProfile := flag.String("hold-profile", "", "directory for a CPU profile of the hold table and a heap profile at the end of each run's publishing")
	holdRounds := flag.Int("hold-rounds", 2, "hold runs of each kind, alternating their order")
	cpuProfile := flag.String("cpuprofile", "", "file for a CPU profile of the throughput table, each chain's samples labelled path=<chain>")
	fwdSubs := flag.String("forwarder-subscribers", "1,10,100", "subscriber counts of the table of forwarders in processes of their own; empty for none")
	flag.StringVar(&bench.ForwarderProfile, "forwarder-cpuprofile", "", "file name prefix for CPU profiles of the forwarder processes: <prefix>-<kind>-<subscribers>.pprof, with their allocation profiles in <...>.pprof.allocs")
	flag.Parse()
	bench.QuietQUIC()
	if *rounds < 1 {
		*rounds = 1
	}
	failed := false
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "relay: "+format+"\n", args...)
		failed = true
	}
	kinds := bench.ChainKinds

	if list := parseList(*subs); len(list) > 0 {
		stop := func() {}
		if *cpuProfile != "" {
			var err error
			if stop, err = profileCPU(*cpuProfile); err != nil {
				fmt.Fprintf(os.Stderr, "relay: %v\n", err)
				os.Exit(2)
			}
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprint(tw, "subs\tsize\t")
		for _, k := range kinds {
			fmt.Fprintf(tw, "%s obj/s\t%s CPU/obj\t", k.Name, k.Name)
		}
		for _, k := range kinds[1:] {
			fmt.Fprintf(tw, "%s rate/bare\t%s CPU/bare\t", k.Name, k.Name)
		}
		fmt.Fprintln(tw)
		for _, n := range list {
			fmt.Fprintf(os.Stderr, "relay: throughput, %d subscribers\n", n)
			budget := time.Duration(len(kinds)*(*rounds+1)*len(parseList(*sizes)))*(*d)*4 + 3*time.Minute
			ctx, cancel := context.WithTimeout(context.Background(), budget)
			rows, err := bench.CompareChains(ctx, kinds, n, parseList(*sizes), *rounds, *d)
			cancel()
			if err != nil {
				fail("%d subscribers: %v", n, err)
			}
			for _, r := range rows {
				fmt.Fprintf(tw, "%d\t%s\t", r.Subscribers, bench.SizeName(r.Size))
				for i := range kinds {
					fmt.Fprintf(tw, "%.0f\t%v\t", r.PerSec[i], r.PerObject[i].Round(10*time.Nanosecond))
				}
				for i := range kinds[1:] {
					fmt.Fprintf(tw, "%.2f\t%.2f\t", r.RateRatio[i+1], r.CPURatio[i+1])
				}
				fmt.Fprintln(tw)
			}
		}
		stop()
		tw.Flush()
		fmt.Println()
	}

	if list := parseList(*fwdSubs); len(list) > 0 {
		if !forwarderTable(list, parseList(*sizes), *rounds, *d) {
			failed = true
		}
	}

	if list := parseList(*latSubs); len(list) > 0 {
		groups := max(int(latFor.Seconds()*bench.MediaGroupsPerSec), 1)
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "latency\tsubs\tsamples\tp50\tp99\tmax\t\n")
		for _, n := range list {
			fmt.Fprintf(os.Stderr, "relay: latency, %d subscribers\n", n)
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(kinds))*(*latFor)*4+3*time.Minute)
			rows, err := bench.CompareLatency(ctx, kinds, n, groups)
			cancel()
			if err != nil {
				fail("latency, %d subscribers: %v", n, err)
			}
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%v\t%v\t\n", r.Kind, r.Subscribers, r.Samples,
					r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond))
			}
		}
		tw.Flush()
		fmt.Println()
	}

	if *hold > 0 {
		fmt.Fprintf(os.Stderr, "relay: hold, %d subscribers\n", *hold)
		if *holdProfile != "" {
			stop := profileHold(*holdProfile)
			defer stop()
		}
		pace := bench.HoldPace{Rate: *holdRate, Size: *holdSize, GroupObjects: *holdGroup, Duration: *holdFor}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2**holdRounds)*(*holdFor+2*time.Minute))
		rows, err := bench.CompareHold(ctx, *hold, pace, *holdRounds)
		cancel()
		if err != nil {
			fail("hold: %v", err)
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "hold %d obj/s of %d B\tround\tsubs\tpublished\tcut\tshort\tpeak live heap MiB\theap/direct\tCPU s\tpublish s\tdelivered s\twhy\t\n", *holdRate, *holdSize)
		for _, kind := range rows {
			for r, row := range kind {
				ratio := 0.0
				if r < len(rows[0]) && rows[0][r].HeapPeak > 0 {
					ratio = float64(row.HeapPeak) / float64(rows[0][r].HeapPeak)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%v\t\n", row.Kind, r, row.Subscribers, row.Published,
					row.Cut, row.Short, float64(row.HeapPeak)/(1<<20), ratio, row.CPU.Seconds(), row.Elapsed.Seconds(), row.Delivered.Seconds(), row.Why)
			}
		}
		tw.Flush()
		fmt.Println()
	}

	if *idle > 0 {
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "idle subscriptions\tcount\theap B/sub\tlive B/sub\tstack B/sub\tgoroutines/sub\t\n")
		for _, k := range bench.IdleKinds {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			r, err := bench.MeasureIdle(ctx, k, *idle)
			cancel()
			if err != nil {
				fail("idle: %v", err)
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.2f\t\n", r.Kind, r.Subscriptions, r.HeapInuse, r.HeapAlloc, r.Stack, r.Goroutines)
		}
		tw.Flush()
	}
	if failed {
		os.Exit(1)
	}
}

// forwarderTable measures and prints the forwarders in processes of their
// own at each of counts subscribers, and reports whether every count was
// measured.
func forwarderTable(counts, sizes []int, rounds int, d time.Duration) bool {
	kinds := bench.ForwarderKinds
	ok := true
	fmt.Println("forwarders alone, each in a process of its own; fwd: that process's CPU, ends: this one's (publisher, subscribers)")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "subs\tsize\t")
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s obj/s\t%s fwd CPU/obj\t%s ends CPU/obj\t", k.Name, k.Name, k.Name)
	}
	for _, k := range kinds[1:] {
		fmt.Fprintf(tw, "%s rate/bare\t%s fwd CPU/bare\tper round\t%s ends CPU/bare\t", k.Name, k.Name, k.Name)
	}
	fmt.Fprintln(tw)
	for _, n := range counts {
		fmt.Fprintf(os.Stderr, "relay: forwarders alone, %d subscribers\n", n)
		budget := time.Duration(len(kinds)*(rounds+1)*len(sizes))*d*4 + 3*time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		rows, err := bench.CompareForwarders(ctx, n, sizes, rounds, d)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "relay: forwarders alone, %d subscribers: %v\n", n, err)
			ok = false
		}
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%s\t", r.Subscribers, bench.SizeName(r.Size))
			for i := range kinds {
				fmt.Fprintf(tw, "%.0f\t%v\t%v\t", r.PerSec[i], r.Forwarder[i].Round(10*time.Nanosecond), r.PerObject[i].Round(10*time.Nanosecond))
			}
			for i := range kinds[1:] {
				var each []string
				for _, x := range r.ForwarderRounds[i+1] {
					each = append(each, fmt.Sprintf("%.2f", x))
				}
				fmt.Fprintf(tw, "%.2f\t%.2f\t%s\t%.2f\t", r.RateRatio[i+1], r.ForwarderRatio[i+1], strings.Join(each, " "), r.CPURatio[i+1])
			}
			fmt.Fprintln(tw)
		}
	}
	tw.Flush()
	fmt.Println()
	return ok
}

// parseList reads a comma-separated list of positive integers.
func parseList(list string) []int {
	out, err := bench.ParseInts(list)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: %v\n", err)
		os.Exit(2)
	}
	return out
}

// profileHold starts a CPU profile in dir, writes a heap profile there at
// the end of each hold run's publishing, and returns what stops the CPU
// profile.
func profileHold(dir string) func() {
	runs := 0
	bench.HoldProfile = func(kind string) {
		runs++
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pprof", kind, runs)))
		if err != nil {
			fmt.Fprintf(os.Stderr, "relay: %v\n", err)
			return
		}
		defer f.Close()
		_ = pprof.Lookup("heap").WriteTo(f, 0)
	}
	f, err := os.Create(filepath.Join(dir, "cpu-hold.pprof"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "relay: %v\n", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// profileCPU starts a CPU profile into file and returns what stops it.
func profileCPU(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
