// Command pubsub compares publisher → subscriber throughput of moqt with
// raw quic-go over loopback QUIC, in one run, and prints the tables that
// are reported: per object size, the object and byte rates of each, the
// ratio moqt/raw and the ratio of their CPU time per object (steadier on
// a shared machine); then, for a fan-out to many subscribers, the process CPU
// time per delivered object of each and the ratio moqt/raw.
//
//	go run ./internal/bench/cmd/pubsub -d 2s -rounds 3
//
// Each size measures both paths in alternating rounds of -d and reports
// the median round of each and the median per-round ratio. Absolute rates
// on a shared machine are noise; the ratio is the number to quote.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"text/tabwriter"
	"time"

	"github.com/moqt-go/moqt/internal/bench"
)

func main() {
	d := flag.Duration("d", 2*time.Second, "how long each path runs per round")
	rounds := flag.Int("rounds", 3, "rounds per size, alternating which path goes first")
	sizes := flag.String("sizes", "", "comma-separated object sizes in bytes (default 100,1024,65536,1048576)")
	fanSizes := flag.String("fanout-sizes", "100,1024", "object sizes of the fan-out scenario; empty for none")
	subscribers := flag.Int("subscribers", bench.FanoutSubscribers, "subscribers of the fan-out scenario")
	cpuProfile := flag.String("cpuprofile", "", "file for a CPU profile of the whole run")
	flag.Parse()
	bench.QuietQUIC()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "pubsub: %v\n", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}

	list := bench.Sizes
	if *sizes != "" {
		list = parseSizes(*sizes)
	}
	var fanList []int
	if *fanSizes != "" {
		fanList = parseSizes(*fanSizes)
	}
	if *rounds < 1 {
		*rounds = 1
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\traw objects/s\traw MB/s\tmoqt objects/s\tmoqt MB/s\tmoqt/raw\tCPU raw/moqt\t")
	failed := false
	for _, size := range list {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*rounds)*(*d)*4+time.Minute)
		row, err := bench.Compare(ctx, size, *rounds, *d)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pubsub: size %s: %v\n", bench.SizeName(size), err)
			failed = true
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%.0f\t%.1f\t%.2f\t%.2f\t\n", bench.SizeName(size),
			row.Raw.ObjectsPerSec(), row.Raw.MBPerSec(),
			row.MoQT.ObjectsPerSec(), row.MoQT.MBPerSec(), row.Ratio, row.CPURatio)
	}
	tw.Flush()

	if len(fanList) > 0 {
		fmt.Println()
		tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "fan-out to %d\traw CPU/object\tmoqt CPU/object\tmoqt/raw\t\n", *subscribers)
	}
	for _, size := range fanList {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*rounds)*(*d)*4+2*time.Minute)
		row, err := bench.CompareFanout(ctx, *subscribers, size, *rounds, *d)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pubsub: fan-out size %s: %v\n", bench.SizeName(size), err)
			failed = true
			continue
		}
		fmt.Fprintf(tw, "%s\t%v\t%v\t%.2f\t\n", bench.SizeName(size), row.Raw.PerObject(), row.MoQT.PerObject(), row.Ratio)
	}
	tw.Flush()
	if failed {
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// parseSizes reads a comma-separated list of sizes in bytes.
func parseSizes(list string) []int {
	out, err := bench.ParseInts(list)
	if err != nil || len(out) == 0 {
		fmt.Fprintf(os.Stderr, "pubsub: bad sizes %q: %v\n", list, err)
		os.Exit(2)
	}
	return out
}
