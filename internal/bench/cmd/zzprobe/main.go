package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/moqt-go/moqt/internal/bench"
)

func udp() (in, out uint64) {
	b, _ := os.ReadFile("/proc/net/snmp")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Udp: ") && !strings.Contains(l, "InDatagrams") {
			f := strings.Fields(l)
			in, _ = strconv.ParseUint(f[1], 10, 64)
			out, _ = strconv.ParseUint(f[4], 10, 64)
		}
	}
	return
}

type mover interface {
	Move(ctx context.Context, n, size int, check bool) error
}

func run(name string, m mover, n, size int) {
	ctx := context.Background()
	_ = m.Move(ctx, 1000, size, false)
	_, o0 := udp()
	t := time.Now()
	for range 5 {
		if err := m.Move(ctx, n, size, false); err != nil {
			panic(err)
		}
	}
	el := time.Since(t)
	_, o1 := udp()
	fmt.Printf("%s: %.0f obj/s, datagrams %d, objs/datagram %.2f\n", name, float64(5*n)/el.Seconds(), o1-o0, float64(5*n)/float64(o1-o0))
}

func main() {
	bench.QuietQUIC()
	size, _ := strconv.Atoi(os.Args[1])
	n := 200000
	ctx := context.Background()
	r, err := bench.NewRawQUIC(ctx)
	if err != nil {
		panic(err)
	}
	m, err := bench.NewMoQT(ctx)
	if err != nil {
		panic(err)
	}
	f, _ := os.Create(os.Args[3])
	var mv mover = r
	if os.Args[2] == "moqt" {
		mv = m
	}
	_ = mv.Move(ctx, 1000, size, false)
	pprof.StartCPUProfile(f)
	run(os.Args[2], mv, n*10, size)
	pprof.StopCPUProfile()
}
