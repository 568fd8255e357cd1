package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Holding a paced track: one publisher writes a track at a steady pace to
// many subscribers, each on a connection of its own, each reading with
// Subscription.ReadObject as an application does; every session runs with
// the library's default configuration, so that a subscriber the server
// finds too slow is cut as it would be in use. The track is served
// straight from a LocalTrack (direct) or through the relay package
// (relay), in the same run. What is compared is what the server holds:
// the subscriptions it ended before the track did, and the process's heap.

// HoldKind is one kind of server holding a paced track.
type HoldKind struct {
	Name string
	New  func(ctx context.Context, subscribers int) (*holdTarget, error)
}

// HoldKinds are the servers compared, direct publishing first.
var HoldKinds = []HoldKind{
	{Name: "direct", New: directHold},
	{Name: "relay", New: relayHold},
}

// holdTarget is a server whose LocalTrack publishes benchTrack, directly
// or upstream of a relay, and subscriptions to it.
type holdTarget struct {
	track *moqt.LocalTrack
	ss    sessions
	subs  []*moqt.Subscription
	close func() error // the server's, after the sessions
}

func (t *holdTarget) shut() error {
	t.ss.close()
	return t.close()
}

func defaultConfig() *moqt.Config { return &moqt.Config{} }

func directHold(ctx context.Context, subscribers int) (_ *holdTarget, err error) {
	srv, track, ctls, err := trackServer(defaultConfig(), &moqt.ServerOptions{MaxPendingSessions: subscribers + 1})
	if err != nil {
		return nil, err
	}
	t := &holdTarget{track: track, close: srv.Close}
	return t.connect(ctx, srv, ctls, subscribers)
}

func relayHold(ctx context.Context, subscribers int) (_ *holdTarget, err error) {
	n, err := newRelayNode(subscribers, defaultConfig)
	if err != nil {
		return nil, err
	}
	t := &holdTarget{track: n.track, close: n.close}
	return t.connect(ctx, n.srv, n.ctls, subscribers)
}

// connect dials and subscribes the subscribers; on failure it tears t
// down.
func (t *holdTarget) connect(ctx context.Context, srv *moqt.Server, ctls *tls.Config, subscribers int) (_ *holdTarget, err error) {
	defer func() {
		if err != nil {
			_ = t.shut()
		}
	}()
	if err := t.ss.dial(ctx, srv, ctls, subscribers); err != nil {
		return nil, err
	}
	if t.subs, err = t.ss.subscribe(ctx, 16); err != nil {
		return nil, err
	}
	return t, nil
}

// HoldProfile, if set, is called at the end of each hold run's
// publishing, before anything is torn down, with the kind's name: a
// command may write a heap profile there.
var HoldProfile func(kind string)

// HoldPace is how a hold measurement publishes: Rate objects a second of
// Size bytes, GroupObjects to a group (one stream per group and
// subscriber), for Duration.
type HoldPace struct {
	Rate, Size, GroupObjects int
	Duration                 time.Duration
}

// HoldRow is what MeasureHold found for one kind.
type HoldRow struct {
	Kind                   string
	Subscribers, Published int
	// Cut counts the subscriptions the server ended before the track
	// ended, Why their reasons (a PUBLISH_DONE code or an error), Short
	// the subscriptions that read fewer objects than were published
	// (those cut among them).
	Cut   int
	Why   map[string]int
	Short int
	// HeapPeak is the largest live heap seen from the first object's
	// publication until delivered, HeapBase the live heap before the
	// sessions were set up.
	HeapPeak, HeapBase uint64
	// CPU is the process's CPU time until delivered, Elapsed how long
	// publishing took: longer than the pace's duration when the server
	// held the publisher back.
	CPU, Elapsed time.Duration
	// Delivered is how long it took from the first object's publication
	// until every subscription not cut had read the last one.
	Delivered time.Duration
}

// MeasureHold sets up a server of kind k with subscribers subscriptions,
// publishes at pace p and reports what it held.
func MeasureHold(ctx context.Context, k HoldKind, subscribers int, p HoldPace) (HoldRow, error) {
	if err := checkFiles(subscribers + 68); err != nil {
		return HoldRow{}, err
	}
	row := HoldRow{Kind: k.Name, Subscribers: subscribers, Why: map[string]int{}}
	base, _ := settle()
	row.HeapBase = base.HeapAlloc
	t, err := k.New(ctx, subscribers)
	if err != nil {
		return row, fmt.Errorf("%s: %w", k.Name, err)
	}
	defer t.shut()

	rctx, stop := context.WithCancel(ctx)
	defer stop()
	read := make([]atomic.Int64, subscribers)
	var readers sync.WaitGroup
	for i, sub := range t.subs {
		readers.Go(func() {
			for {
				if _, err := sub.ReadObject(rctx); err != nil {
					return
				}
				read[i].Add(1)
			}
		})
	}
	peak := sampleHeap(rctx)

	cpu, began := CPUTime(), time.Now()
	published, err := publishHold(ctx, t.track, p)
	row.Elapsed = time.Since(began)
	if HoldProfile != nil {
		HoldProfile(k.Name)
	}
	row.Published = published
	if err != nil {
		stop()
		readers.Wait()
		return row, fmt.Errorf("%s: publisher: %w", k.Name, err)
	}
	// The last objects may still be on their way: a server that fell
	// behind the pace delivers them late, which Delivered tells.
	catchUp := time.Now().Add(max(p.Duration, 30*time.Second))
	for i := 0; i < subscribers && time.Now().Before(catchUp); {
		select {
		case <-t.subs[i].Done():
			i++
			continue
		default:
		}
		if read[i].Load() >= int64(published) {
			i++
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
	row.Delivered, row.CPU = time.Since(began), CPUTime()-cpu
	stop()
	readers.Wait()
	row.HeapPeak = <-peak
	for i, sub := range t.subs {
		if read[i].Load() < int64(published) {
			row.Short++
		}
		select {
		case <-sub.Done():
			row.Cut++
			row.Why[reason(sub.Err())]++
		default:
		}
	}
	return row, nil
}

// publishHold writes objects at pace p until its duration has passed, and
// returns how many it wrote.
func publishHold(ctx context.Context, track *moqt.LocalTrack, p HoldPace) (int, error) {
	body := make([]byte, p.Size)
	fillPattern(body)
	gap := time.Second / time.Duration(max(p.Rate, 1))
	n := int(p.Duration / gap)
	start := time.Now()
	var w *moqt.SubgroupWriter
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return i, ctx.Err()
			}
		}
		g, id := uint64(i/p.GroupObjects), uint64(i%p.GroupObjects)
		if id == 0 {
			if w != nil {
				if err := w.Close(); err != nil {
					return i, err
				}
			}
			w = track.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
		}
		stamp(body, i)
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: id}, Payload: body}); err != nil {
			return i, err
		}
	}
	if w != nil {
		return n, w.Close()
	}
	return n, nil
}

// sampleHeap reads the live heap, as the last collection found it, every
// 100 ms until ctx ends, then sends the largest figure seen. The heap in
// use would also count the garbage not yet collected, which follows the
// collector's pacing more than what is held.
func sampleHeap(ctx context.Context) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-tick.C:
			case <-ctx.Done():
				out <- peak
				return
			}
		}
	}()
	return out
}

// reason names why a subscription ended.
func reason(err error) string {
	var done *moqt.DoneError
	if errors.As(err, &done) {
		return done.Code.String() + " (" + done.Reason + ")"
	}
	if err == nil {
		return "none"
	}
	return err.Error()
}

// CompareHold measures every kind of HoldKinds at pace p with subscribers
// subscriptions, rounds times, alternating their order, and returns the
// rows by kind, then by round.
func CompareHold(ctx context.Context, subscribers int, p HoldPace, rounds int) ([][]HoldRow, error) {
	rows := make([][]HoldRow, len(HoldKinds))
	for round := range rounds {
		for j := range HoldKinds {
			i := j
			if round%2 == 1 {
				i = len(HoldKinds) - 1 - j
			}
			r, err := MeasureHold(ctx, HoldKinds[i], subscribers, p)
			if err != nil {
				return rows, err
			}
			rows[i] = append(rows[i], r)
		}
	}
	return rows, nil
}
