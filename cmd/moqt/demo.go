package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/relayserve"
	"github.com/moqt-go/moqt/wire"
)

var demoCommand = &command{
	name:  "demo",
	args:  "",
	short: "watch a relay, a clock, a subscriber and a late joiner at work, narrated",
	long: `
Runs, in this one process, what the other commands do across several: a
relay, a clock publishing through it, a subscriber that joins while the
clock runs, and a late joiner that asks for the current group from its
start. It tells what happens as it happens, then stops the clock, and both
subscribers are told the track ended. It runs for -duration, or until
Ctrl-C, and exits 0.

-web ADDR serves the web page of moqt relay -web for the demo's relay, such
as -web 127.0.0.1:8080: open it in a browser, type, and see your text come
back through the relay. With -web the relay and the page stay up after the
demo, until Ctrl-C.

The pieces as separate commands, each in a terminal of its own:
  moqt relay
  moqt clock -sha256 PIN moqt://127.0.0.1:4443/
  moqt sub -lines -sha256 PIN https://127.0.0.1:4443/ clock time
  moqt sub -lines -fill 1 -sha256 PIN moqt://127.0.0.1:4443/ clock time`,
	maxArgs: 0,
	setup:   demoSetup,
}

func demoSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	duration := fs.Duration("duration", 10*time.Second, "how long the demo runs (at least 6s)")
	webAddr := fs.String("web", "", "TCP `address` to serve the web page on over HTTP, such as 127.0.0.1:8080; the relay and the page stay up until Ctrl-C")
	return func(ctx context.Context, e *env, _ []string) (err error) {
		if *duration < 6*time.Second {
			return usagef("-duration must be at least 6s")
		}
		var web *webServer
		if *webAddr != "" {
			if web, err = listenWeb(*webAddr); err != nil {
				return err
			}
			defer func() { err = errors.Join(err, web.close()) }()
		}
		return runDemo(ctx, e, *duration, web)
	}
}

// demoTeller writes the demo's narration, each line with the time since
// the start.
type demoTeller struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func (t *demoTeller) say(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "[%4.1fs] "+format+"\n", append([]any{time.Since(t.start).Seconds()}, args...)...)
}

// demoClock is what the clock wrote, for checking what the subscribers got.
type demoClock struct {
	mu      sync.Mutex
	written []wire.Location
	first   chan struct{} // closed at the first object
	once    sync.Once
}

func (c *demoClock) wrote(l wire.Location) {
	c.mu.Lock()
	c.written = append(c.written, l)
	c.mu.Unlock()
	c.once.Do(func() { close(c.first) })
}

// after returns the written objects at or after from.
func (c *demoClock) after(from wire.Location) []wire.Location {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []wire.Location
	for _, l := range c.written {
		if !l.Less(from) {
			out = append(out, l)
		}
	}
	return out
}

// runDemo runs the demo; with web, it serves the page for the demo's relay
// and keeps both up after the demo until ctx ends.
func runDemo(ctx context.Context, e *env, duration time.Duration, web *webServer) error {
	t := &demoTeller{w: e.stdout, start: time.Now()}
	clockStops := t.start.Add(duration - 1500*time.Millisecond)
	quietLog := slog.New(slog.DiscardHandler)

	// The relay.
	relayCtx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	infoCh := make(chan relayserve.Info, 1)
	relayDone := make(chan error, 1)
	go func() {
		relayDone <- relayserve.Run(relayCtx, relayserve.Options{Listen: "127.0.0.1:0", Logger: quietLog, DrainTimeout: time.Second},
			func(i relayserve.Info) { infoCh <- i })
	}()
	var info relayserve.Info
	select {
	case info = <-infoCh:
	case err := <-relayDone:
		return fmt.Errorf("starting the relay: %w", err)
	}
	host := clientHost(info.Addr)
	pin := hex.EncodeToString(info.CertHash[:])
	t.say("relay listening on UDP %s: raw QUIC at moqt://%s/, WebTransport at https://%s/", info.Addr, host, host)
	t.say("its certificate is self-signed: the others trust it by its SHA-256 (%s...), as moqt's -sha256 does", pin[:16])
	if web != nil {
		web.start(info)
		t.say("web page at %s: open it in a browser, type, and see your text come back through the relay (it stays up after the demo, until Ctrl-C)", web.url())
	}
	stopTheRelay := func() error {
		t.say("relay stopping: GOAWAY to every session still open, then it exits")
		stopRelay()
		return <-relayDone
	}

	// The clock.
	name := wire.FullTrackName{Namespace: wire.NewNamespace("clock"), Name: []byte("time")}
	clockCtx, stopClock := context.WithCancel(ctx)
	defer stopClock()
	silent := &narrator{w: io.Discard, quiet: true}
	client := clientFlags{pin: pin}
	p, err := startPublisher(clockCtx, e, silent, &publishFlags{client: client, cacheMB: 8}, "moqt://"+host+"/", name, false)
	if err != nil {
		_ = stopTheRelay()
		return fmt.Errorf("starting the clock: %w", err)
	}
	t.say("clock publishing %q through the relay over raw QUIC: a group each second, numbered by the Unix time, 10 objects a group, each the time as text",
		formatTrack(name))
	clock := &demoClock{first: make(chan struct{})}
	clockDone := make(chan error, 1)
	go func() {
		clockDone <- runClock(clockCtx, p, 10, clockHooks{
			group: func(g uint64) {
				t.say("clock: group %d begins (%s)", g, time.Unix(int64(g), 0).UTC().Format("15:04:05 UTC"))
			},
			object: clock.wrote,
			ending: func() { t.say("clock stopped: it ends the track (TRACK_ENDED) and leaves") },
		})
	}()

	// wait waits until at, unless the user stops the demo first.
	wait := func(at time.Time) bool {
		timer := time.NewTimer(time.Until(at))
		defer timer.Stop()
		select {
		case <-timer.C:
			return true
		case <-clockCtx.Done():
			return false
		}
	}
	fail := func(err error) error {
		stopClock()
		<-clockDone
		_ = stopTheRelay()
		return err
	}
	var subs []*demoSub
	select {
	case <-clock.first:
	case <-clockCtx.Done():
	}
	if wait(time.Now().Add(1200 * time.Millisecond)) {
		s, err := startDemoSub(e, t, clock, client, "subscriber", "https://"+host+"/", name, 0)
		if err != nil {
			return fail(err)
		}
		subs = append(subs, s)
	}
	// The late joiner comes in the middle of a second: the current group
	// has objects before it, which it asks for.
	lateAt := time.Now().Add(800 * time.Millisecond).Truncate(time.Second).Add(time.Second + 450*time.Millisecond)
	if len(subs) > 0 && wait(lateAt) {
		s, err := startDemoSub(e, t, clock, client, "late joiner", "moqt://"+host+"/", name, 1)
		if err != nil {
			return fail(err)
		}
		subs = append(subs, s)
		select {
		case <-s.live:
		case <-s.done:
		case <-clockCtx.Done():
		}
	}
	// The clock stops at the end of the demo's time, and at least a second
	// after the late joiner joined.
	wait(later(clockStops, time.Now().Add(time.Second)))
	stopClock()
	<-clockCtx.Done()
	if ctx.Err() != nil {
		t.say("interrupted")
	}
	if err := <-clockDone; err != nil {
		_ = stopTheRelay()
		return fmt.Errorf("the clock: %w", err)
	}
	ended := 0
	for _, s := range subs {
		if s.report(t, clock) {
			ended++
		}
	}
	switch {
	case ended == 2:
		t.say("both subscribers were told the track ended")
	case len(subs) < 2:
		t.say("(stopped before both subscribers joined)")
	}
	if web != nil && ctx.Err() == nil {
		t.say("the demo is over; the relay and the web page at %s stay up until Ctrl-C", web.url())
		<-ctx.Done()
	}
	if err := stopTheRelay(); err != nil {
		return err
	}
	t.say("done")
	if ended != len(subs) {
		return errors.New("a subscriber did not get the end of the track")
	}
	return nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// demoSub is one of the demo's subscribers.
type demoSub struct {
	who     string
	largest wire.Opt[wire.Location] // from SUBSCRIBE_OK
	fill    uint64
	sess    *moqt.Session

	done chan struct{} // closed when the subscription ended
	live chan struct{} // closed at the first live object
	got  []wire.Location
	err  error // why it ended
}

// startDemoSub subscribes, over url, and reads in the background.
func startDemoSub(e *env, t *demoTeller, clock *demoClock, client clientFlags, who, url string, name wire.FullTrackName, fill uint64) (*demoSub, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := client.dial(ctx, e, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	sub, err := sess.Subscribe(ctx, name, subParams(fill, 0))
	if err != nil {
		_ = sess.Close()
		return nil, fmt.Errorf("%s: subscribing: %w", who, err)
	}
	s := &demoSub{who: who, fill: fill, sess: sess, done: make(chan struct{}), live: make(chan struct{})}
	if l, ok := sub.Largest(); ok {
		s.largest = wire.Some(l)
	}
	transport := transportName(sess)
	l := s.largest.Value
	if fill == 0 {
		t.say("%s joined over %s at group %d, object %d: it gets objects from there on", who, transport, l.Group, l.Object+1)
	} else {
		t.say("%s joined over %s at group %d, object %d, asking for the current group from its start too (a fill)", who, transport, l.Group, l.Object+1)
	}
	go s.read(t, sub)
	return s, nil
}

// read reads until the subscription ends and tells what it gets.
func (s *demoSub) read(t *demoTeller, sub *moqt.Subscription) {
	defer close(s.done)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var fillGot []wire.Location
	live := false
	for {
		obj, err := sub.ReadObject(ctx)
		if err != nil {
			s.err = err
			return
		}
		if obj.Incomplete != nil || obj.EndOfRange != 0 || obj.Status != wire.ObjectNormal {
			continue
		}
		s.got = append(s.got, obj.Location)
		if s.fill > 0 && !live && s.largest.Set && !s.largest.Value.Less(obj.Location) {
			fillGot = append(fillGot, obj.Location)
			continue
		}
		if !live {
			live = true
			close(s.live)
			switch {
			case s.fill == 0:
				t.say("%s got its first object: group %d, object %d, %q", s.who, obj.Location.Group, obj.Location.Object, obj.Payload)
			case len(fillGot) > 0:
				f, l := fillGot[0], fillGot[len(fillGot)-1]
				t.say("%s asked for the current group from its start: it got objects %d..%d of group %d from the relay's cache, then live ones from object %d (%q)",
					s.who, f.Object, l.Object, f.Group, obj.Location.Object, obj.Payload)
			default:
				t.say("%s asked for the current group from its start: it had no objects before, so live ones from object %d", s.who, obj.Location.Object)
			}
		}
	}
}

// report waits for the subscription's end, says what it got, and reports
// whether it was told the track ended.
func (s *demoSub) report(t *demoTeller, clock *demoClock) bool {
	defer s.sess.Close()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.say("%s was not told the track ended", s.who)
		return false
	}
	from := wire.Location{}
	if l := s.largest; l.Set {
		from = wire.Location{Group: l.Value.Group, Object: l.Value.Object + 1}
		if s.fill > 0 {
			from = wire.Location{Group: l.Value.Group}
		}
	}
	want := clock.after(from)
	seen := map[wire.Location]int{}
	twice := 0
	for _, l := range s.got {
		seen[l]++
		if seen[l] == 2 {
			twice++
		}
	}
	missing := 0
	for _, l := range want {
		if seen[l] == 0 {
			missing++
		}
	}
	check := "none missing, none twice"
	if missing > 0 || twice > 0 {
		check = fmt.Sprintf("%d missing, %d twice", missing, twice)
	}
	var done *moqt.DoneError
	if errors.As(s.err, &done) && done.Code == wire.DoneTrackEnded {
		t.say("%s was told the track ended: it got %d objects from group %d object %d on, %s", s.who, len(s.got), from.Group, from.Object, check)
		return true
	}
	t.say("%s's subscription ended otherwise (%v): it got %d objects, %s", s.who, s.err, len(s.got), check)
	return false
}
