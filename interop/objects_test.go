package interop

import (
	"context"
	"encoding/binary"
	"encoding/hex"
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

// The track of subscribe-objects.
const (
	objectGroups    = 5
	objectsPerGroup = 4
	// doneWait is how long the page watches for the end of the
	// subscription once the server has ended the track.
	doneWait = 2 * time.Second
)

// objectPayload is object o of group g in subscribe-objects: from one byte
// to several QUIC packets, with bytes that depend on the group, the object
// and the offset, so that a swapped, shifted or truncated object shows.
func objectPayload(g, o uint64) []byte {
	sizes := [objectsPerGroup]int{1, 100, 1500, 20000}
	b := make([]byte, sizes[o])
	for i := range b {
		b[i] = byte(g*67 + o*29 + uint64(i)*13 + uint64(i>>8))
	}
	return b
}

// publishObjects writes the subscribe-objects track: objectGroups groups,
// each one subgroup stream of objectsPerGroup objectPayload objects ending
// with a FIN. It returns the writes' errors.
func publishObjects(track *moqt.LocalTrack) []error {
	var errs []error
	for g := range uint64(objectGroups) {
		w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{EndOfGroup: true})
		for o := range uint64(objectsPerGroup) {
			if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: objectPayload(g, o)}); err != nil {
				errs = append(errs, fmt.Errorf("group %d object %d: %w", g, o, err))
			}
		}
		if err := w.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing group %d: %w", g, err))
		}
	}
	return errs
}

// checkJSGroups asserts that the page read groups 0 to objectGroups-1,
// each once, ended by a FIN and holding objectPayload's objects in order,
// byte for byte. Groups are streams of their own, so they may arrive in
// any order (@moq/net hands them out as their streams arrive).
func checkJSGroups(t *testing.T, read []jsGroup) {
	t.Helper()
	var order []uint64
	groups := map[uint64]jsGroup{}
	for _, g := range read {
		order = append(order, g.Sequence)
		_, dup := groups[g.Sequence]
		assert.False(t, dup, "group %d arrived twice", g.Sequence)
		groups[g.Sequence] = g
	}
	t.Logf("js: groups in the order they arrived: %v", order)
	require.Len(t, read, objectGroups, "groups the page read")
	for seq := range uint64(objectGroups) {
		g, ok := groups[seq]
		if !assert.True(t, ok, "group %d is missing", seq) {
			continue
		}
		assert.Nil(t, g.Error, "group %d did not end with a FIN", seq)
		if !assert.Len(t, g.Frames, objectsPerGroup, "objects in group %d", seq) {
			continue
		}
		for o, f := range g.Frames {
			assert.Equal(t, uint64(o), f.Index, "group %d: object %d out of order", seq, o)
			want := hex.EncodeToString(objectPayload(seq, uint64(o)))
			assert.True(t, want == f.Payload, "group %d object %d: payload differs (%d hex digits, want %d)",
				seq, o, len(f.Payload), len(want))
		}
	}
}

// testSubscribeObjects: the browser subscribes to a LocalTrack before
// anything is published, so that SUBSCRIBE_OK carries no LARGEST_OBJECT
// (which @moq/net 0.3.4 reads with a length prefix the spec does not
// have). Once the subscription is Established the server publishes
// objectGroups groups, each one subgroup stream of objectsPerGroup objects
// ending with a FIN, and the page reports each object it read.
func testSubscribeObjects(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "objects"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)

	type subscribe struct {
		params wire.Params
		ss     *moqt.ServedSubscription
		err    error
	}
	subscribed := make(chan subscribe, 1)
	handler := moqt.HandlerFunc(func(r moqt.Request) {
		sr, ok := r.(*moqt.SubscribeRequest)
		if !ok || !sr.Track.Equal(name) {
			moqt.DefaultHandler.ServeMOQT(r)
			return
		}
		ss, err := track.Accept(sr, moqt.AcceptOptions{})
		select {
		case subscribed <- subscribe{params: sr.Params, ss: ss, err: err}:
		default:
			t.Errorf("go: a second SUBSCRIBE for %s", name)
		}
	})

	received := h.signals.take("received")
	var sub subscribe       // set by onAccept
	var publishErrs []error // likewise
	var ended bool          // the server ended the track
	onAccept := func(s *moqt.Session) {
		select {
		case sub = <-subscribed:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		if sub.err != nil {
			return
		}
		// The subscription is Established: everything from here on passes
		// its filter (§9.20.10: StartGroup 1 with no Largest Object yet
		// starts at {0, 0}).
		publishErrs = publishObjects(track)
		// Only once the page has every object does the track end: a
		// PUBLISH_DONE must not race the objects it follows.
		select {
		case <-received:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		track.End(wire.DoneTrackEnded, "interop: track ended")
		ended = true
	}

	r := h.runScenario(t, scenario{
		name:      "subscribe-objects",
		namespace: "moqt-interop/objects",
		track:     "video",
		params:    map[string]any{"groups": objectGroups, "doneWaitMs": doneWait.Milliseconds()},
		cfg:       moqt.Config{Handler: handler},
		onAccept:  onAccept,
	})

	// The SUBSCRIBE @moq/net sent (ietf/subscribe.js joinFilter):
	// LOCATION_FILTER with StartGroup 1 alone, the current group, on
	// draft-20; on 18 the Largest Object filter type (0x2), which the codec
	// reads as draft-21's Next Object; FORWARD 1; no FILL_PARAMETERS and no
	// INCLUDE_PROPERTIES (it only sends the opt-out, and neither on 18).
	require.NotNil(t, r.session, "the server accepted no session")
	require.NotNil(t, sub.ss, "the server accepted no SUBSCRIBE: %v", sub.err)
	require.NoError(t, sub.err, "accepting the SUBSCRIBE")
	t.Logf("go: SUBSCRIBE parameters %+v", sub.params)
	wantFilter := wire.RelativeFilter(1)
	if h.draft.is18() {
		wantFilter = wire.NextObjectFilter()
	}
	assert.Equal(t, wire.Some(wantFilter), sub.params.LocationFilter, "LOCATION_FILTER")
	assert.Equal(t, wire.Some(true), sub.params.Forward, "FORWARD")
	assert.Nil(t, sub.params.FillParameters, "FILL_PARAMETERS")
	assert.False(t, sub.params.IncludeProperties.Set, "INCLUDE_PROPERTIES")
	assert.Empty(t, publishErrs, "the publisher's writes")

	// The browser's view: every group once, every object of each, byte for
	// byte and in order, and each group ended by a FIN.
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")
	checkJSGroups(t, r.js.Groups)

	// The end of the track: the server sent PUBLISH_DONE TRACK_ENDED and a
	// FIN on the request stream. @moq/net 0.3.4 never reads PUBLISH_DONE
	// (ietf/subscriber.js waits for its stream reader to close): the
	// unread message keeps the stream open, so the subscription is not
	// seen to end. The library still sends the spec's message.
	assert.True(t, ended, "the server did not end the track")
	assert.Error(t, sub.ss.Context().Err(), "the served subscription is still live")
	var de *moqt.DoneError
	if assert.ErrorAs(t, sub.ss.Err(), &de, "the served subscription's end") {
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
	}
	assert.False(t, r.js.SubscribeClosed, "@moq/net now notices PUBLISH_DONE (error %v): update the Interop section of README.md",
		r.js.SubscribeError)

	// Then the browser closed the session, without an error.
	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}

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

// testLargestObject: the browser subscribes to a track that already has
// objects, so SUBSCRIBE_OK must carry LARGEST_OBJECT (§9.20.18), a
// Location: two vi64s (§9.20). @moq/net 0.3.4 reads it with a length
// prefix first (ietf/parameters.js, "location"), so it cannot read the
// message. The library sends the spec's encoding regardless; this pins
// what then happens, and fails once @moq/net reads it.
func testLargestObject(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "largest"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	w := track.OpenSubgroup(0, 0, moqt.SubgroupOptions{EndOfGroup: true})
	for o := range uint64(3) {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 0, Object: o}, Payload: objectPayload(0, o)}))
	}
	require.NoError(t, w.Close())
	largest, ok := track.Largest()
	require.True(t, ok)
	require.Equal(t, wire.Location{Group: 0, Object: 2}, largest)

	handler, accepted := acceptOne(t, track)
	r := h.runScenario(t, scenario{
		name:      "subscribe-error", // subscribe, and report how the subscription ends
		namespace: "moqt-interop/largest",
		track:     "video",
		cfg:       moqt.Config{Handler: handler},
	})

	var ss *moqt.ServedSubscription
	select {
	case ss = <-accepted:
	default:
	}
	require.NotNil(t, ss, "the server accepted no SUBSCRIBE")
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.SubscribeClosed, "the subscription did not end: @moq/net now reads LARGEST_OBJECT? Update the Interop section of README.md")
	require.NotNil(t, r.js.SubscribeError, "the subscription ended without an error: @moq/net now reads LARGEST_OBJECT? Update the Interop section of README.md")
	t.Logf("js: @moq/net on a SUBSCRIBE_OK with LARGEST_OBJECT %v: %s", largest, *r.js.SubscribeError)
	// The parameter's value is 00 02: @moq/net takes the 00 (Group 0) for
	// a Length, and finds no bytes for the Location it expects inside.
	assert.Contains(t, *r.js.SubscribeError, "buffer is empty", "how @moq/net fails on LARGEST_OBJECT")

	// @moq/net then cancels the request (STOP_SENDING or a reset), which
	// ends the served subscription; the session survives, and the browser
	// closes it.
	select {
	case <-ss.Context().Done():
	case <-time.After(closeTimeout):
	}
	assert.Error(t, ss.Context().Err(), "the served subscription outlived the browser's cancel")
	t.Logf("go: the served subscription ended: %v", ss.Err())
	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}

// statusGroup is one group of object-status: how it is published and what
// @moq/net 0.3.4 makes of it.
type statusGroup struct {
	endOfGroup bool     // the subgroup's END_OF_GROUP flag (§11.3.1)
	objects    []string // payloads; "" is an empty Normal object
	endStatus  bool     // an End of Group status object follows them (§11.1.2)
	// want is the payloads @moq/net delivers, wantErr part of the error it
	// ends the group with ("" for a clean end).
	want    []string
	wantErr string
}

// statusGroups are object-status' groups. @moq/net reads a zero Payload
// Length's Object Status as moq-lite does (ietf/object.js Frame.decode):
// without END_OF_GROUP, Normal (0) ends the group, so the objects after an
// empty one are lost without an error; with it, the End of Group status is
// refused. The spec has an empty Normal object an object like any other,
// and End of Group valid in any subgroup (§11.1.2).
var statusGroups = []statusGroup{
	{endOfGroup: true, objects: []string{"a", "", "c"}, want: []string{"a", "", "c"}},
	{endOfGroup: false, objects: []string{"a", "", "c"}, want: []string{"a"}},
	{endOfGroup: false, objects: []string{"a", "b"}, endStatus: true, want: []string{"a", "b"}},
	{endOfGroup: true, objects: []string{"a", "b"}, endStatus: true, want: []string{"a", "b"}, wantErr: "Unsupported object status: 3"},
}

// testObjectStatus publishes statusGroups to the browser, as
// subscribe-objects does, and checks what @moq/net delivered of each.
func testObjectStatus(t *testing.T, h *harness) {
	name := wire.FullTrackName{Namespace: wire.NewNamespace("moqt-interop", "status"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	handler, accepted := acceptOne(t, track)
	received := h.signals.take("received")
	var publishErrs []error // set by onAccept
	onAccept := func(s *moqt.Session) {
		select {
		case <-accepted:
		case <-s.Context().Done():
			return
		case <-time.After(scenarioTimeout):
			return
		}
		for g, sg := range statusGroups {
			w := track.OpenSubgroup(uint64(g), 0, moqt.SubgroupOptions{EndOfGroup: sg.endOfGroup})
			for o, p := range sg.objects {
				if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: uint64(g), Object: uint64(o)}, Payload: []byte(p)}); err != nil {
					publishErrs = append(publishErrs, fmt.Errorf("group %d object %d: %w", g, o, err))
				}
			}
			if sg.endStatus {
				if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: uint64(g), Object: uint64(len(sg.objects))}, Status: wire.ObjectEndOfGroup}); err != nil {
					publishErrs = append(publishErrs, fmt.Errorf("group %d end: %w", g, err))
				}
			}
			if err := w.Close(); err != nil {
				publishErrs = append(publishErrs, fmt.Errorf("closing group %d: %w", g, err))
			}
		}
		select {
		case <-received:
		case <-s.Context().Done():
		case <-time.After(scenarioTimeout):
		}
	}
	r := h.runScenario(t, scenario{
		name:      "subscribe-objects",
		namespace: "moqt-interop/status",
		track:     "video",
		params:    map[string]any{"groups": len(statusGroups), "doneWaitMs": 0},
		cfg:       moqt.Config{Handler: handler},
		onAccept:  onAccept,
	})

	assert.Empty(t, publishErrs, "the publisher's writes")
	assert.Nil(t, r.js.Error, "js error")
	got := map[uint64]jsGroup{}
	for _, g := range r.js.Groups {
		got[g.Sequence] = g
	}
	require.Len(t, got, len(statusGroups), "groups the page read")
	for seq, sg := range statusGroups {
		g := got[uint64(seq)]
		var payloads []string
		for _, f := range g.Frames {
			b, err := hex.DecodeString(f.Payload)
			require.NoError(t, err)
			payloads = append(payloads, string(b))
		}
		assert.Equal(t, sg.want, payloads, "group %d (END_OF_GROUP %v, objects %q, End of Group status %v): what @moq/net delivered",
			seq, sg.endOfGroup, sg.objects, sg.endStatus)
		if sg.wantErr == "" {
			assert.Nil(t, g.Error, "group %d: @moq/net ended it with an error", seq)
		} else if assert.NotNil(t, g.Error, "group %d: @moq/net ended it cleanly", seq) {
			assert.Contains(t, *g.Error, sg.wantErr, "group %d: how @moq/net ended it", seq)
		}
	}
}

// acceptOne serves track's SUBSCRIBE with track.Accept and hands over the
// served subscription; anything else gets the default answer.
func acceptOne(t *testing.T, track *moqt.LocalTrack) (moqt.Handler, <-chan *moqt.ServedSubscription) {
	accepted := make(chan *moqt.ServedSubscription, 1)
	return moqt.HandlerFunc(func(r moqt.Request) {
		sr, ok := r.(*moqt.SubscribeRequest)
		if !ok || !sr.Track.Equal(track.Name()) {
			moqt.DefaultHandler.ServeMOQT(r)
			return
		}
		ss, err := track.Accept(sr, moqt.AcceptOptions{})
		if err != nil {
			t.Errorf("go: accepting the SUBSCRIBE: %v", err)
			return
		}
		accepted <- ss
	}), accepted
}
