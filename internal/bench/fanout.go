package bench

// Fan-out: one publisher, many subscribers, each on its own connection,
// all in this process. What is compared is CPU time, not rate: the
// process's user and system time over a batch divided by the objects
// delivered (objects × subscribers), since on a shared machine the
// delivery rate of a hundred readers measures the scheduler more than the
// library.
//
//   - raw-quic: the publisher opens one unidirectional stream on each of
//     the subscribers' connections and writes every object (a 4-byte
//     length and the payload) to each stream in turn, then finishes them;
//     each subscriber reads its stream as RawQUIC's does.
//   - moqt: one LocalTrack serves a subscription from each subscriber's
//     session; each batch is one subgroup written with
//     SubgroupWriter.WriteObject and Close, read by each subscriber as
//     MoQT's does.

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// FanoutSubscribers is the fan-out scenario's subscriber count.
const FanoutSubscribers = 100

// Fanout moves objects from one publisher to many subscribers. It is not
// safe for concurrent use.
type Fanout interface {
	// Move publishes n objects of size bytes to every subscriber and
	// returns once each has read all of them and the stream's end.
	Move(ctx context.Context, n, size int) error
	// Close closes every connection and waits for their goroutines.
	Close() error
}

// FanoutKind is one way of fanning out.
type FanoutKind struct {
	Name string
	New  func(ctx context.Context, subscribers int) (Fanout, error)
}

// FanoutKinds are the fan-outs compared: a bare quic-go one first.
var FanoutKinds = []FanoutKind{
	{Name: "raw-quic", New: func(ctx context.Context, n int) (Fanout, error) { return NewRawFanout(ctx, n) }},
	{Name: "moqt", New: func(ctx context.Context, n int) (Fanout, error) { return NewMoQTFanout(ctx, n) }},
}

// CPUTime is the process's user and system CPU time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// gather runs f for each of n subscribers at once and returns the first
// error.
func gather(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RawFanout is the ceiling: quic-go with nothing on top.
type RawFanout struct {
	ln      *quic.Listener
	servers []*quic.Conn
	clients []*quic.Conn
	pay     payload
	rbufs   [][]byte
}

// NewRawFanout connects subscribers clients to one quic-go listener on
// 127.0.0.1, with the transport settings RawQUIC uses.
func NewRawFanout(ctx context.Context, subscribers int) (_ *RawFanout, err error) {
	ln, ctls, err := rawListen()
	if err != nil {
		return nil, err
	}
	p := &RawFanout{ln: ln}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	for range subscribers {
		c, err := quic.DialAddr(ctx, ln.Addr().String(), ctls, &quic.Config{EnableDatagrams: true})
		if err != nil {
			return nil, err
		}
		p.clients = append(p.clients, c)
		s, err := ln.Accept(ctx)
		if err != nil {
			return nil, err
		}
		p.servers = append(p.servers, s)
	}
	p.rbufs = make([][]byte, subscribers)
	return p, nil
}

// Move writes each object to every subscriber's stream in turn.
func (p *RawFanout) Move(ctx context.Context, n, size int) error {
	done := make(chan error, 1)
	go func() {
		done <- gather(len(p.clients), func(i int) error {
			if cap(p.rbufs[i]) < size {
				p.rbufs[i] = make([]byte, size)
			}
			_, err := readRaw(ctx, p.clients[i], n, size, false, p.rbufs[i], nil)
			return err
		})
	}()
	fail := func(err error) error {
		for _, c := range p.clients {
			_ = c.CloseWithError(1, "writer failed")
		}
		return fmt.Errorf("bench: raw fan-out writer: %w (readers: %v)", err, <-done)
	}
	frame := p.pay.get(4, size)
	binary.BigEndian.PutUint32(frame, uint32(size))
	body := frame[4:]
	strs := make([]*quic.SendStream, len(p.servers))
	for i, s := range p.servers {
		str, err := s.OpenUniStreamSync(ctx)
		if err != nil {
			return fail(err)
		}
		strs[i] = str
	}
	for i := range n {
		stamp(body, i)
		for _, str := range strs {
			if _, err := str.Write(frame); err != nil {
				return fail(err)
			}
		}
	}
	for _, str := range strs {
		if err := str.Close(); err != nil {
			return fail(err)
		}
	}
	return <-done
}

// Close closes every connection and the listener.
func (p *RawFanout) Close() error {
	for _, c := range p.clients {
		_ = c.CloseWithError(0, "")
	}
	for _, c := range p.servers {
		_ = c.CloseWithError(0, "")
	}
	for _, c := range append(p.clients, p.servers...) {
		<-c.Context().Done()
	}
	return p.ln.Close()
}

// MoQTFanout is one LocalTrack serving many sessions.
type MoQTFanout struct {
	srv   *moqt.Server
	track *moqt.LocalTrack
	sessions
	subs  []*moqt.Subscription
	group uint64
	pay   payload
	rbufs [][]byte
}

// NewMoQTFanout starts a moqt Server on 127.0.0.1 serving one LocalTrack
// and subscribes to it from subscribers sessions. The subscribers may
// queue up to the whole of a batch: on a shared machine a hundred readers
// fall behind in turn, and the scenario measures cost, not cut-offs.
func NewMoQTFanout(ctx context.Context, subscribers int) (_ *MoQTFanout, err error) {
	srv, track, ctls, err := trackServer(fanoutConfig(), &moqt.ServerOptions{MaxPendingSessions: subscribers + 1})
	if err != nil {
		return nil, err
	}
	p := &MoQTFanout{srv: srv, track: track}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if err := p.dial(ctx, srv, ctls, subscribers); err != nil {
		return nil, err
	}
	if p.subs, err = p.subscribe(ctx, 1); err != nil {
		return nil, err
	}
	p.rbufs = make([][]byte, subscribers)
	return p, nil
}

// fanoutConfig is the configuration of a publisher serving many
// subscribers: they may queue up to a whole batch and lag for seconds.
func fanoutConfig() *moqt.Config {
	return &moqt.Config{MaxSubscriberBacklog: 64 << 20, SubscriberGrace: 30 * time.Second}
}

// Move writes one subgroup of n objects to every subscription.
func (p *MoQTFanout) Move(ctx context.Context, n, size int) error {
	group := p.group
	p.group++
	done := make(chan error, 1)
	go func() {
		done <- gather(len(p.subs), func(i int) error {
			if cap(p.rbufs[i]) < size {
				p.rbufs[i] = make([]byte, size)
			}
			_, err := readMoQT(ctx, p.subs[i], group, n, size, false, p.rbufs[i], nil)
			return err
		})
	}()
	fail := func(err error) error {
		for _, c := range p.clients {
			_ = c.CloseWithError(wire.InternalError, "writer failed")
		}
		return fmt.Errorf("bench: moqt fan-out writer: %w (readers: %v)", err, <-done)
	}
	body := p.pay.get(0, size)
	w := p.track.OpenSubgroup(group, 0, moqt.SubgroupOptions{})
	for i := range n {
		stamp(body, i)
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: group, Object: uint64(i)}, Payload: body}); err != nil {
			w.Reset(wire.ResetCancelled)
			return fail(err)
		}
	}
	if err := w.Close(); err != nil {
		return fail(err)
	}
	return <-done
}

// Close ends every session and the server.
func (p *MoQTFanout) Close() error {
	p.sessions.close()
	return p.srv.Close()
}

// sessions are client sessions of one Server, each with its own
// connection, and their server ends.
type sessions struct {
	clients, servers []*moqt.Session
}

// dial connects n more client sessions to srv, whose certificate ctls
// trusts, and accepts them. On failure those connected so far stay, for
// close.
func (ss *sessions) dial(ctx context.Context, srv *moqt.Server, ctls *tls.Config, n int) error {
	for range n {
		if err := ss.dialTo(ctx, srv.Addr().String(), ctls, 1); err != nil {
			return err
		}
		s, err := srv.Accept(ctx)
		if err != nil {
			return err
		}
		ss.servers = append(ss.servers, s)
	}
	return nil
}

// dialTo connects n more client sessions to the server at addr, whose
// certificate ctls trusts; their server ends are that server's to accept.
func (ss *sessions) dialTo(ctx context.Context, addr string, ctls *tls.Config, n int) error {
	for range n {
		c, err := moqt.Dial(ctx, "moqt://"+addr+"/bench", &moqt.Config{Logger: quiet, TLSConfig: ctls})
		if err != nil {
			return err
		}
		ss.clients = append(ss.clients, c)
	}
	return nil
}

// subscribe subscribes to benchTrack from every client session, with up
// to parallel SUBSCRIBEs in flight at once.
func (ss *sessions) subscribe(ctx context.Context, parallel int) ([]*moqt.Subscription, error) {
	subs := make([]*moqt.Subscription, len(ss.clients))
	sem := make(chan struct{}, max(parallel, 1))
	err := gather(len(ss.clients), func(i int) error {
		sem <- struct{}{}
		defer func() { <-sem }()
		var err error
		subs[i], err = ss.clients[i].Subscribe(ctx, benchTrack, wire.Params{})
		return err
	})
	return subs, err
}

// close ends every session and waits for each.
func (ss *sessions) close() {
	for _, s := range append(ss.clients, ss.servers...) {
		_ = s.Close()
	}
	for _, s := range append(ss.clients, ss.servers...) {
		<-s.Context().Done()
	}
}

// FanoutBatch is how many objects one fan-out Move carries: about 1 MiB
// per subscriber, at least 4 and at most 2000 objects.
func FanoutBatch(size int) int {
	return min(max((1<<20)/max(size, 1), 4), 2000)
}

// CPUCost is what a fan-out measurement found.
type CPUCost struct {
	Delivered int           // objects delivered, over every subscriber
	CPU       time.Duration // process CPU time spent
	Elapsed   time.Duration
	// Forwarder is the CPU time its forwarder's process spent, when the
	// forwarder runs in a process of its own (CompareForwarders); CPU is
	// then the publisher's and subscribers' alone.
	Forwarder time.Duration
}

// PerSec is the rate of delivered objects.
func (c CPUCost) PerSec() float64 { return float64(c.Delivered) / c.Elapsed.Seconds() }

// PerObject is the CPU time per delivered object.
func (c CPUCost) PerObject() time.Duration {
	if c.Delivered == 0 {
		return 0
	}
	return c.CPU / time.Duration(c.Delivered)
}

// ForwarderPerObject is the forwarder process's CPU time per delivered
// object, when it runs in a process of its own.
func (c CPUCost) ForwarderPerObject() time.Duration {
	if c.Delivered == 0 {
		return 0
	}
	return c.Forwarder / time.Duration(c.Delivered)
}

// MeasureFanout runs Moves of FanoutBatch(size) objects on f, which has
// subscribers subscribers, until d has passed.
func MeasureFanout(ctx context.Context, f Fanout, subscribers, size int, d time.Duration) (CPUCost, error) {
	return measureBatches(ctx, f, subscribers, size, FanoutBatch(size), d, nil)
}

// processClock reads a forwarder process's CPU time so far.
type processClock func() (time.Duration, error)

// measureBatches runs Moves of batch objects on f until d has passed;
// fwd, if not nil, is its forwarder process's clock.
func measureBatches(ctx context.Context, f Fanout, subscribers, size, batch int, d time.Duration, fwd processClock) (CPUCost, error) {
	var c CPUCost
	var fwdStart time.Duration
	if fwd != nil {
		var err error
		if fwdStart, err = fwd(); err != nil {
			return c, err
		}
	}
	start, cpu := time.Now(), CPUTime()
	for c.Elapsed < d {
		if err := f.Move(ctx, batch, size); err != nil {
			return c, err
		}
		c.Delivered += batch * subscribers
		c.Elapsed = time.Since(start)
	}
	c.CPU = CPUTime() - cpu
	if fwd != nil {
		end, err := fwd()
		if err != nil {
			return c, err
		}
		c.Forwarder = end - fwdStart
	}
	return c, nil
}

// FanoutRow is one line of the fan-out table.
type FanoutRow struct {
	Size, Subscribers int
	Raw, MoQT         CPUCost // the median rounds
	// Ratio is the median of the per-round ratios of moqt's CPU time per
	// delivered object to raw quic-go's: at most 1.05 is the target.
	Ratio float64
}

// CompareFanout measures both fan-outs for size, in alternating rounds of
// d as Compare does, and reports the medians.
func CompareFanout(ctx context.Context, subscribers, size, rounds int, d time.Duration) (FanoutRow, error) {
	fans := make([]Fanout, len(FanoutKinds))
	names := make([]string, len(FanoutKinds))
	defer func() {
		for _, f := range fans {
			if f != nil {
				_ = f.Close()
			}
		}
	}()
	for i, k := range FanoutKinds {
		f, err := k.New(ctx, subscribers)
		if err != nil {
			return FanoutRow{}, fmt.Errorf("%s fan-out: %w", k.Name, err)
		}
		fans[i], names[i] = f, k.Name+" fan-out"
	}
	costs, err := measureRounds(ctx, names, fans, nil, subscribers, size, FanoutBatch(size), rounds, d)
	if err != nil {
		return FanoutRow{}, err
	}
	var ratios []float64
	for r := range rounds {
		ratios = append(ratios, float64(costs[1][r].PerObject())/float64(costs[0][r].PerObject()))
	}
	return FanoutRow{Size: size, Subscribers: subscribers, Raw: medianCost(costs[0]), MoQT: medianCost(costs[1]),
		Ratio: median(ratios)}, nil
}

// measureRounds warms each of fans (named by names) up with one Move of
// batch objects, then measures each for rounds rounds of d, reversing
// their order every other round so that drift in the machine's load hits
// all alike. It returns the costs by fan-out, then by round. clocks, if
// not nil, has each fan-out's forwarder process's clock, or nil.
func measureRounds(ctx context.Context, names []string, fans []Fanout, clocks []processClock, subscribers, size, batch, rounds int, d time.Duration) ([][]CPUCost, error) {
	for i, f := range fans {
		if err := f.Move(ctx, batch, size); err != nil {
			return nil, fmt.Errorf("%s: %w", names[i], err)
		}
	}
	costs := make([][]CPUCost, len(fans))
	for round := range rounds {
		for j := range fans {
			i := j
			if round%2 == 1 {
				i = len(fans) - 1 - j
			}
			var c CPUCost
			var err error
			var clock processClock
			if clocks != nil {
				clock = clocks[i]
			}
			pprof.Do(ctx, pprof.Labels("path", names[i]), func(ctx context.Context) {
				c, err = measureBatches(ctx, fans[i], subscribers, size, batch, d, clock)
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", names[i], err)
			}
			costs[i] = append(costs[i], c)
		}
	}
	return costs, nil
}

func medianCost(cs []CPUCost) CPUCost {
	cs = append([]CPUCost(nil), cs...)
	for i := 1; i < len(cs); i++ {
		for j := i; j > 0 && cs[j].PerObject() < cs[j-1].PerObject(); j-- {
			cs[j], cs[j-1] = cs[j-1], cs[j]
		}
	}
	return cs[len(cs)/2]
}
