package moqt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// These tests put the data plane's promise under concurrency, over real
// QUIC and WebTransport: a subscription receives every object its filter
// and its reported Largest Object promise, none missing, none twice, none
// outside the filter, and a FIN only ends a stream that carried every
// object of its subgroup from the Start Location on (§11.3.2).

// stressObjects is the number of objects in each group the stress
// publisher writes, all on subgroup 0, one stream per group.
const stressObjects = 4

// stressPayload names its object, so a copy that reached the wrong place
// shows.
func stressPayload(l wire.Location) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, l.Group), l.Object)
}

// livePublisher writes groups of stressObjects objects to a LocalTrack
// without pause until stopped, as a live source does. Its writes must
// all succeed.
type livePublisher struct {
	track *LocalTrack
	stop  chan struct{}
	once  sync.Once
	done  chan struct{}
	err   error
	// slowest is the longest a single WriteObject or Close took.
	slowest time.Duration
}

func startLivePublisher(track *LocalTrack, pace time.Duration) *livePublisher {
	p := &livePublisher{track: track, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		timed := func(f func() error) error {
			start := time.Now()
			err := f()
			p.slowest = max(p.slowest, time.Since(start))
			return err
		}
		for g := uint64(0); ; g++ {
			w := track.OpenSubgroup(g, 0, SubgroupOptions{EndOfGroup: true})
			for o := uint64(0); o < stressObjects; o++ {
				select {
				case <-p.stop:
					w.Reset(wire.ResetCancelled)
					return
				case <-time.After(pace):
				}
				if err := timed(func() error { return writeObject(w, o, nil, stressPayload(wire.Location{Group: g, Object: o})) }); err != nil {
					p.err = fmt.Errorf("WriteObject {%d, %d}: %w", g, o, err)
					return
				}
			}
			if err := timed(w.Close); err != nil {
				p.err = fmt.Errorf("Close group %d: %w", g, err)
				return
			}
		}
	}()
	return p
}

// halt stops the publisher and returns its error.
func (p *livePublisher) halt() error {
	p.once.Do(func() { close(p.stop) })
	<-p.done
	return p.err
}

// trackHandler serves track to every SUBSCRIBE for it.
func trackHandler(track *LocalTrack) Handler {
	return HandlerFunc(func(r Request) {
		if sr, ok := r.(*SubscribeRequest); ok && sr.Track.Equal(track.Name()) {
			_, _ = track.Accept(sr, AcceptOptions{})
			return
		}
		DefaultHandler.ServeMOQT(r)
	})
}

// stressReceived is what one subscription got.
type stressReceived struct {
	mu      sync.Mutex
	objects map[wire.Location]int
	// fins are the objects of each stream that ended with a FIN.
	fins    map[uint64][]uint64
	bad     []string
	resets  []string      // how streams that did not end with a FIN ended
	changed chan struct{} // signalled on each object
}

func (r *stressReceived) add(h Object, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objects[h.Location]++
	if want := stressPayload(h.Location); string(payload) != string(want) {
		r.bad = append(r.bad, fmt.Sprintf("object %v carries the payload of another", h.Location))
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// has reports whether every Location in want has arrived.
func (r *stressReceived) has(want []wire.Location) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range want {
		if r.objects[l] == 0 {
			return false
		}
	}
	return true
}

// readStream reads one subgroup stream to its end, recording its objects
// and, if it ends with a FIN, which objects it carried.
func (r *stressReceived) readStream(sr *SubgroupReader) {
	var ids []uint64
	g := sr.Header().GroupID
	for {
		h, err := sr.Next()
		if errors.Is(err, io.EOF) {
			r.mu.Lock()
			r.fins[g] = ids
			r.mu.Unlock()
			return
		}
		if err != nil {
			// Reset, or the subscription was closed.
			r.mu.Lock()
			r.resets = append(r.resets, fmt.Sprintf("group %d after %v: %v", g, ids, err))
			r.mu.Unlock()
			return
		}
		p, err := sr.readPayload(64)
		if err != nil {
			return
		}
		ids = append(ids, h.Location.Object)
		r.add(h, p)
	}
}

// readEveryStream accepts every subgroup stream of sub until ctx ends and
// reads each with read in a goroutine of its own, counted in wg, which
// already counts this call.
func readEveryStream(ctx context.Context, sub *Subscription, wg *sync.WaitGroup, read func(*SubgroupReader)) {
	defer wg.Done()
	for {
		r, err := sub.AcceptSubgroup(ctx)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			read(r)
		}()
	}
}

// stressFilter is one of the Location filter forms a subscription uses;
// cur is the track's Largest Object just before subscribing.
type stressFilter struct {
	name string
	make func(cur wire.Location) wire.Opt[wire.LocationFilter]
}

var stressFilters = []stressFilter{
	{"next object", func(wire.Location) wire.Opt[wire.LocationFilter] { return wire.Some(wire.NextObjectFilter()) }},
	{"next group", func(wire.Location) wire.Opt[wire.LocationFilter] { return wire.Some(wire.RelativeFilter(0)) }},
	{"absolute start", func(cur wire.Location) wire.Opt[wire.LocationFilter] {
		return wire.Some(wire.StartFilter(wire.Location{Group: cur.Group + 1, Object: 1}))
	}},
	{"absolute range", func(cur wire.Location) wire.Opt[wire.LocationFilter] {
		return wire.Some(wire.RangeFilterTo(wire.Location{Group: cur.Group + 1, Object: 2}, cur.Group+3))
	}},
	{"none", func(wire.Location) wire.Opt[wire.LocationFilter] { return wire.Opt[wire.LocationFilter]{} }},
}

// subscribeAndCheck subscribes over s with filter f, reads until every
// object its promise covers up to a few groups on has arrived, leaves,
// and returns what broke the promise, if anything.
func subscribeAndCheck(ctx context.Context, s *Session, track *LocalTrack, f stressFilter) []string {
	cur, _ := track.Largest()
	lf := f.make(cur)
	sub, err := s.Subscribe(ctx, track.Name(), wire.Params{LocationFilter: lf})
	if err != nil {
		return []string{fmt.Sprintf("%s: Subscribe: %v", f.name, err)}
	}
	defer sub.Close()
	l, known := sub.Largest()
	if !known {
		return []string{f.name + ": SUBSCRIBE_OK without LARGEST_OBJECT on a live track (C016)"}
	}
	largest := filter.LargestAt(l)
	window := filter.SubscriptionWindow(wire.NoLocationFilter(), largest) // unfiltered (§9.20.10)
	if lf.Set {
		window = filter.SubscriptionWindow(lf.Value, largest)
	}
	// The promise: every object after the reported Largest Object that the
	// filter passes. Read it up to the end of the range, or a few groups
	// past the start.
	last := wire.Location{Group: max(window.Start.Group, l.Group) + 2, Object: stressObjects - 1}
	if window.Bounded {
		last = window.End
		if last.Object > stressObjects-1 {
			last.Object = stressObjects - 1
		}
	}
	var want []wire.Location
	for g := window.Start.Group; g <= last.Group; g++ {
		for o := uint64(0); o < stressObjects; o++ {
			loc := wire.Location{Group: g, Object: o}
			if window.Contains(loc) && l.Less(loc) && !last.Less(loc) {
				want = append(want, loc)
			}
		}
	}

	rcv := &stressReceived{objects: map[wire.Location]int{}, fins: map[uint64][]uint64{}, changed: make(chan struct{}, 1)}
	readCtx, stopReading := context.WithCancel(ctx)
	var readers sync.WaitGroup
	readers.Add(1)
	go readEveryStream(readCtx, sub, &readers, rcv.readStream)
	// Generous: the publisher writes a group every few milliseconds.
	deadline := time.After(10 * time.Second)
wait:
	for !rcv.has(want) {
		select {
		case <-rcv.changed:
		case <-deadline:
			break wait
		case <-ctx.Done():
			break wait
		case <-sub.Done():
			// The publisher ended it (say TOO_FAR_BEHIND): told with a
			// code, yet this test's subscribers read fast and must not
			// be ended.
			if !rcv.has(want) {
				rcv.mu.Lock()
				rcv.bad = append(rcv.bad, fmt.Sprintf("%s: ended before its objects came: %v", f.name, sub.Err()))
				rcv.mu.Unlock()
			}
			break wait
		}
	}
	// Streams that already ended are checked; the rest are cut by leaving.
	_ = sub.Close()
	stopReading()
	readers.Wait()

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	problems := rcv.bad
	desc := fmt.Sprintf("%s (Largest %v, window from %v", f.name, l, window.Start)
	if window.Bounded {
		desc += fmt.Sprintf(" to %v", window.End)
	}
	desc += ")"
	var missing []string
	for _, loc := range want {
		if rcv.objects[loc] == 0 {
			missing = append(missing, loc.String())
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%s: %d missing: %s; streams not finished: %v", desc, len(missing), strings.Join(missing, " "), rcv.resets))
	}
	for loc, n := range rcv.objects {
		if !window.Contains(loc) {
			problems = append(problems, fmt.Sprintf("%s: %v is outside the filter", desc, loc))
		}
		if n > 1 {
			problems = append(problems, fmt.Sprintf("%s: %v received %d times", desc, loc, n))
		}
	}
	// A FIN says the stream carried every object of its subgroup from the
	// Start Location on, up to the end of the window (C019, C020).
	for g, ids := range rcv.fins {
		var full []uint64
		for o := uint64(0); o < stressObjects; o++ {
			if window.Contains(wire.Location{Group: g, Object: o}) {
				full = append(full, o)
			}
		}
		if !slices.Equal(ids, full) {
			problems = append(problems, fmt.Sprintf("%s: group %d's stream ended with a FIN after objects %v, not %v", desc, g, ids, full))
		}
	}
	return problems
}

// TestStressJoinLeave: a publisher writes continuously while 100
// subscriptions, in 4 sessions, join and leave concurrently with every
// Location filter form. Each must receive exactly what its filter and the
// Largest Object its SUBSCRIBE_OK reported promise.
func TestStressJoinLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			track, err := NewLocalTrack(testTrack, nil)
			require.NoError(t, err)
			p := newPair(t, tr.scheme, &Config{Handler: trackHandler(track)}, nil)
			sessions := []*Session{p.client}
			for range 3 {
				sessions = append(sessions, p.connect(t, tr.scheme, nil).client)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pub := startLivePublisher(track, time.Millisecond)
			defer pub.halt()
			// The track is live before anyone joins: a SUBSCRIBE answered
			// before the first object rightly has no LARGEST_OBJECT.
			require.Eventually(t, func() bool { _, ok := track.Largest(); return ok }, 10*time.Second, time.Millisecond)

			const subscriptions = 100
			var mu sync.Mutex
			var problems []string
			var wg sync.WaitGroup
			for i := range subscriptions {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Joins spread over a few seconds, at random points of
					// the groups being written.
					time.Sleep(rand.N(3 * time.Second))
					f := stressFilters[i%len(stressFilters)]
					got := subscribeAndCheck(ctx, sessions[i%len(sessions)], track, f)
					mu.Lock()
					problems = append(problems, got...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			require.NoError(t, pub.halt())
			kinds := map[string]int{}
			for _, p := range problems {
				for _, k := range []string{"missing", "received", "outside", "FIN", "payload", "Subscribe", "LARGEST"} {
					if strings.Contains(p, k) {
						kinds[k]++
					}
				}
			}
			if len(problems) > 0 {
				t.Logf("broken promises by kind: %v", kinds)
			}
			if len(problems) > 10 {
				problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
			}
			assert.Empty(t, problems, "subscriptions whose promise was broken")
		})
	}
}
