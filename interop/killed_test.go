package interop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// The track of browser-killed: one group of liveObjects objects every
// livePeriod.
const (
	liveObjects    = 4
	liveObjectSize = 1024
	livePeriod     = 20 * time.Millisecond
	// liveBacklog is the server's Config.MaxSubscriberBacklog: small, so
	// that the dead browser's subscription passes it soon after the kill.
	liveBacklog = 256 << 10
	// stallGrace bounds how long one write, or the wait between two
	// groups at the Go subscriber, may take whatever the browser does.
	stallGrace = 5 * time.Second
	// liveIdle is the server's Config.MaxIdleTimeout: a killed browser's
	// session ends after it (keep-alive only helps a live peer).
	liveIdle = 4 * time.Second
	// idleBound bounds how long the server keeps a killed browser's
	// session: the idle timeout and slack.
	idleBound = liveIdle + 10*time.Second
)

// livePayload is object o of group g in browser-killed.
func livePayload(g, o uint64) []byte {
	b := make([]byte, liveObjectSize)
	binary.BigEndian.PutUint64(b, g)
	binary.BigEndian.PutUint64(b[8:], o)
	for i := 16; i < len(b); i++ {
		b[i] = byte(g*31 + o*7 + uint64(i))
	}
	return b
}

// livePublisher writes the browser-killed track until stopped, timing
// every write.
type livePublisher struct {
	mu        sync.Mutex
	published []time.Time // when each group was closed, by Group ID
	slowest   time.Duration
	errs      []error
	writing   time.Time // when the write in progress began, zero if none
	done      chan struct{}
}

func (p *livePublisher) run(ctx context.Context, track *moqt.LocalTrack) {
	defer close(p.done)
	tick := time.NewTicker(livePeriod)
	defer tick.Stop()
	timed := func(what string, f func() error) {
		start := time.Now()
		p.mu.Lock()
		p.writing = start
		p.mu.Unlock()
		err := f()
		d := time.Since(start)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.writing = time.Time{}
		p.slowest = max(p.slowest, d)
		if err != nil {
			p.errs = append(p.errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	for g := uint64(0); ; g++ {
		w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{EndOfGroup: true})
		for o := range uint64(liveObjects) {
			timed(fmt.Sprintf("group %d object %d", g, o), func() error {
				return w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: livePayload(g, o)})
			})
		}
		timed(fmt.Sprintf("closing group %d", g), w.Close)
		p.mu.Lock()
		p.published = append(p.published, time.Now())
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// stuck reports how long the write in progress has been blocked.
func (p *livePublisher) stuck() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.writing.IsZero() {
		return 0
	}
	return time.Since(p.writing)
}

// liveReceiver is the in-process Go subscriber of browser-killed.
type liveReceiver struct {
	mu       sync.Mutex
	groups   map[uint64][][]byte
	arrivals []time.Time // when each group was complete
	errs     []error
	end      error // why AcceptSubgroup stopped
	done     chan struct{}
}

func (lr *liveReceiver) run(ctx context.Context, sub *moqt.Subscription) {
	defer close(lr.done)
	for {
		r, err := sub.AcceptSubgroup(ctx)
		if err != nil {
			lr.mu.Lock()
			lr.end = err
			lr.mu.Unlock()
			return
		}
		g := r.Header().GroupID
		var objects [][]byte
		var failed error
		for {
			oh, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil && oh.Location.Object != uint64(len(objects)) {
				err = fmt.Errorf("object %d where %d was due", oh.Location.Object, len(objects))
			}
			var payload []byte
			if err == nil {
				payload, err = io.ReadAll(io.LimitReader(r, liveObjectSize+1))
			}
			if err != nil {
				failed = fmt.Errorf("group %d: %w", g, err)
				_ = r.Close()
				break
			}
			objects = append(objects, payload)
		}
		lr.mu.Lock()
		if failed != nil {
			lr.errs = append(lr.errs, failed)
		}
		if _, dup := lr.groups[g]; dup {
			lr.errs = append(lr.errs, fmt.Errorf("group %d arrived twice", g))
		}
		lr.groups[g] = objects
		lr.arrivals = append(lr.arrivals, time.Now())
		lr.mu.Unlock()
	}
}

// count is how many groups have arrived.
func (lr *liveReceiver) count() int {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return len(lr.groups)
}

// longestWait is the longest time between two groups arriving.
func (lr *liveReceiver) longestWait() time.Duration {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(lr.arrivals); i++ {
		longest = max(longest, lr.arrivals[i].Sub(lr.arrivals[i-1]))
	}
	return longest
}

// testBrowserKilled: the server publishes one track continuously to the
// browser and to an in-process Go subscriber over raw QUIC; once the
// browser has read a group it is killed with SIGKILL, so it closes
// nothing. The Go subscriber must keep receiving every object without a
// stall, the publisher's writes must keep returning, and the server must
// end the browser's session (QUIC's idle timeout, at the latest).
func testBrowserKilled(t *testing.T, h *harness) {
	if !canKillTree() {
		t.Skip("interop: browser-killed needs /proc and process groups")
	}
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "live"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)

	// Both subscriptions are Established before anything is published: a
	// SUBSCRIBE_OK with LARGEST_OBJECT would be misread by @moq/net.
	var mu sync.Mutex
	var browserSS, goSS *moqt.ServedSubscription
	var browserEnded time.Time // when the browser's subscription ended
	bothSubscribed := make(chan struct{})
	handler := moqt.HandlerFunc(func(r moqt.Request) {
		sr, ok := r.(*moqt.SubscribeRequest)
		if !ok || !sr.Track.Equal(name) {
			moqt.DefaultHandler.ServeMOQT(r)
			return
		}
		ss, err := track.Accept(sr, moqt.AcceptOptions{})
		if err != nil {
			t.Errorf("go: accepting the SUBSCRIBE of the %s peer: %v", peerKind(sr.Session()), err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		first := browserSS == nil || goSS == nil
		if sr.Session().WebTransport() {
			browserSS = ss
			go func() {
				<-ss.Context().Done()
				mu.Lock()
				browserEnded = time.Now()
				mu.Unlock()
			}()
		} else {
			goSS = ss
		}
		if first && browserSS != nil && goSS != nil {
			close(bothSubscribed)
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := &livePublisher{done: make(chan struct{})}
	pubCtx, stopPublishing := context.WithCancel(ctx)
	go func() {
		select {
		case <-bothSubscribed:
			pub.run(pubCtx, track)
		case <-pubCtx.Done():
			close(pub.done)
		}
	}()
	t.Cleanup(func() {
		stopPublishing()
		select {
		case <-pub.done:
		case <-time.After(closeTimeout):
			t.Error("the publisher is still blocked after the server closed")
		}
	})

	// The browser is killed once it has read a whole group.
	received := h.signals.take("received")
	kill := make(chan struct{})
	go func() {
		select {
		case <-received:
			time.Sleep(200 * time.Millisecond) // let more groups be in flight
			close(kill)
		case <-ctx.Done():
		}
	}()

	recv := &liveReceiver{groups: map[uint64][][]byte{}, done: make(chan struct{})}
	var client *moqt.Session
	var stalled string // why the publisher or the Go subscriber stalled
	var published int  // groups published, once stopped
	var goEnded bool   // the Go subscription ended after the track did
	r := h.runScenario(t, scenario{
		name:       "receive-until-killed",
		namespace:  "moqt-interop/live",
		track:      "video",
		cfg:        moqt.Config{Handler: handler, MaxSubscriberBacklog: liveBacklog, MaxIdleTimeout: liveIdle},
		kill:       kill,
		sessionEnd: idleBound,
		onListen: func(url string, certHash [32]byte) {
			logger := slog.New(slog.NewTextHandler(newLogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo})).
				With("peer", "go-subscriber")
			dialCtx, cancel := context.WithTimeout(ctx, closeTimeout)
			defer cancel()
			var err error
			client, err = moqt.Dial(dialCtx, url, h.goConfig(certHash, logger, nil))
			require.NoError(t, err, "the Go subscriber's Dial")
			t.Cleanup(func() { _ = client.Close() })
			sub, err := client.Subscribe(dialCtx, name, wire.Params{})
			require.NoError(t, err, "the Go subscriber's SUBSCRIBE")
			go recv.run(ctx, sub)
			t.Cleanup(func() {
				_ = client.Close()
				<-recv.done
			})
		},
		beforeClose: func(r *run) {
			// Publish a little longer, then stop; a write stuck for
			// longer than stallGrace is a stall.
			time.Sleep(10 * livePeriod)
			stopPublishing()
			deadline := time.After(stallGrace)
			for done := false; !done; {
				select {
				case <-pub.done:
					done = true
				case <-time.After(50 * time.Millisecond):
					if d := pub.stuck(); d > stallGrace {
						stalled = fmt.Sprintf("a write of the publisher has been blocked for %v", d.Round(time.Millisecond))
						done = true
					}
				case <-deadline:
					stalled = "the publisher did not stop within the grace"
					done = true
				}
			}
			if stalled != "" {
				return
			}
			pub.mu.Lock()
			published = len(pub.published)
			pub.mu.Unlock()
			// The Go subscriber catches up.
			deadline = time.After(stallGrace)
			for recv.count() < published && stalled == "" {
				select {
				case <-recv.done:
					stalled = fmt.Sprintf("the Go subscription ended after %d of %d groups: %v", recv.count(), published, recv.end)
				case <-deadline:
					stalled = fmt.Sprintf("the Go subscriber has %d of %d groups", recv.count(), published)
				case <-time.After(20 * time.Millisecond):
				}
			}
			if stalled != "" {
				return
			}
			// The track ends while the server is up; the Go subscriber sees
			// PUBLISH_DONE TRACK_ENDED.
			track.End(wire.DoneTrackEnded, "interop: track ended")
			select {
			case <-recv.done:
				goEnded = true
			case <-time.After(closeTimeout):
			}
		},
	})

	if stalled == "" && pub.slowest > stallGrace {
		stalled = fmt.Sprintf("a write took %v", pub.slowest.Round(time.Millisecond))
	}
	if stalled == "" && recv.longestWait() > stallGrace {
		stalled = fmt.Sprintf("the Go subscriber waited %v between two groups", recv.longestWait().Round(time.Millisecond))
	}
	// No subscriber, dead or alive, may hold up the publisher or another
	// subscriber beyond a bounded grace (issue 7).
	require.Empty(t, stalled, "the dead browser held up the publisher or the Go subscriber")

	// The browser was killed, and the server ended its session within the
	// idle timeout, reported as what it is: the transport's idle timeout.
	require.False(t, r.killedAt.IsZero(), "the browser was never killed: it did not read a group (js %+v)", r.js)
	require.NotNil(t, r.session, "the server accepted no session from the browser")
	require.False(t, r.endedAt.IsZero(), "the browser's session outlived the idle timeout: %v", r.closed)
	t.Logf("go: the browser's session ended %v after the kill: %v", r.endedAt.Sub(r.killedAt).Round(time.Millisecond), r.closed)
	var te *moqt.TransportError
	if assert.ErrorAs(t, r.closed, &te, "the killed browser's session ends as a transport death") {
		var idle *quic.IdleTimeoutError
		assert.ErrorAs(t, te, &idle, "how the killed browser's session ended: %v", r.closed)
	}
	mu.Lock()
	require.NotNil(t, browserSS, "the browser's subscription")
	require.NotNil(t, goSS, "the Go subscriber's subscription")
	// The dead browser's subscription passed its backlog bound long before
	// the idle timeout, and ended with TOO_FAR_BEHIND: the loser is told,
	// with a code, even if it is not there to hear it.
	assert.Error(t, browserSS.Context().Err(), "the dead browser's subscription is still served")
	assert.True(t, !browserEnded.IsZero() && browserEnded.Before(r.endedAt),
		"the browser's subscription did not end before its session did")
	var de *moqt.DoneError
	if assert.ErrorAs(t, browserSS.Err(), &de, "how the browser's subscription ended") {
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)
	}
	t.Logf("go: the browser's subscription ended %v after the kill: cause %v, Err %v",
		browserEnded.Sub(r.killedAt).Round(time.Millisecond), context.Cause(browserSS.Context()), browserSS.Err())
	mu.Unlock()

	// The publisher's writes kept returning, without error, through the
	// kill and the browser session's end.
	pub.mu.Lock()
	assert.Empty(t, pub.errs, "the publisher's writes")
	require.NotEmpty(t, pub.published)
	last := pub.published[len(pub.published)-1]
	pub.mu.Unlock()
	assert.True(t, last.After(r.endedAt), "the publisher stopped before the browser's session ended")
	t.Logf("go: %d groups published, the slowest write took %v", published, pub.slowest.Round(time.Microsecond))

	// The Go subscriber received every object of every group, byte for
	// byte, and never waited long.
	recv.mu.Lock()
	assert.Empty(t, recv.errs, "the Go subscriber's groups")
	assert.Len(t, recv.groups, published, "groups the Go subscriber received")
	for g := range uint64(published) {
		objects, ok := recv.groups[g]
		if !assert.True(t, ok, "group %d never reached the Go subscriber", g) {
			continue
		}
		want := make([][]byte, liveObjects)
		for o := range want {
			want[o] = livePayload(g, uint64(o))
		}
		assert.True(t, slices.EqualFunc(want, objects, slices.Equal), "group %d differs at the Go subscriber", g)
	}
	recv.mu.Unlock()
	t.Logf("go: the Go subscriber's longest wait between groups was %v", recv.longestWait().Round(time.Millisecond))

	// The track ended; the Go subscriber saw PUBLISH_DONE TRACK_ENDED.
	if assert.True(t, goEnded, "the Go subscription did not end with the track") {
		var de *moqt.DoneError
		if assert.ErrorAs(t, recv.end, &de, "how the Go subscription ended") {
			assert.Equal(t, wire.DoneTrackEnded, de.Code)
		}
	}
}

// peerKind names a session's peer for messages.
func peerKind(s *moqt.Session) string {
	if s.WebTransport() {
		return "browser"
	}
	return "Go"
}
