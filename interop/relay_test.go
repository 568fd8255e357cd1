package interop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

// The scenarios through the relay: the server is a relay.Relay, and the
// browser's peer is a Go session of the test's, over raw QUIC, on the same
// relay.

// relayPrefix is the namespace prefix both sides of the relay scenarios
// discover with SUBSCRIBE_NAMESPACE.
var relayPrefix = wire.NewNamespace("moqt-interop")

// newRelay is the relay under test: allow-all, as a demo relay is, logging
// to the test, its metrics to m if set. It is closed with the test.
func newRelay(t *testing.T, m relay.Metrics) *relay.Relay {
	logger := slog.New(slog.NewTextHandler(newLogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug})).
		With("peer", "relay")
	r := relay.New(relay.Config{Authorize: relay.AllowAll, Logger: logger, Metrics: m})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// answered is a relay.Metrics that reports the relay's first SUBSCRIBE_OK
// to a downstream subscriber: Metrics.Request is called once the request
// is answered.
type answered struct {
	once       sync.Once
	subscribed chan struct{}
}

func newAnswered() *answered { return &answered{subscribed: make(chan struct{})} }

func (a *answered) SessionStarted(bool) {}
func (a *answered) SessionEnded(bool)   {}
func (a *answered) ObjectsIn(int, int)  {}
func (a *answered) ObjectsOut(int, int) {}
func (a *answered) Dropped(string, int) {}

func (a *answered) Request(kind, outcome string) {
	if kind == relay.KindSubscribe && outcome == relay.OutcomeOK {
		a.once.Do(func() { close(a.subscribed) })
	}
}

// dialRelay opens a Go session (raw QUIC) to the relay at url, on d.
func dialRelay(t *testing.T, ctx context.Context, d draft, url string, certHash [32]byte, role string, handler moqt.Handler) *moqt.Session {
	logger := slog.New(slog.NewTextHandler(newLogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo})).
		With("peer", role)
	dialCtx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	s, err := moqt.Dial(dialCtx, url, &moqt.Config{ServerCertificateHashes: [][32]byte{certHash}, Logger: logger,
		Handler: handler, Versions: d.versions()})
	require.NoError(t, err, "the %s's Dial", role)
	require.Equal(t, d.version, s.Version(), "the %s's version", role)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// receivedGroup is one subgroup stream a Go subscriber read to its end.
type receivedGroup struct {
	objects [][]byte
	props   []byte // the first object's Object Properties
	err     error  // nil for a FIN
}

// readGroups reads n subgroup streams of sub, each to its end, keyed by
// Group ID; a second stream of a group is an error.
func readGroups(ctx context.Context, sub *moqt.Subscription, n int, maxObject int) (map[uint64]receivedGroup, error) {
	groups := map[uint64]receivedGroup{}
	for len(groups) < n {
		r, err := sub.AcceptSubgroup(ctx)
		if err != nil {
			return groups, fmt.Errorf("after %d groups: %w", len(groups), err)
		}
		g := r.Header().GroupID
		if _, dup := groups[g]; dup {
			_ = r.Close()
			return groups, fmt.Errorf("group %d arrived twice", g)
		}
		var rg receivedGroup
		for {
			oh, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err == nil && oh.Location.Object != uint64(len(rg.objects)) {
				err = fmt.Errorf("object %d where %d was due", oh.Location.Object, len(rg.objects))
			}
			var payload []byte
			if err == nil {
				payload, err = io.ReadAll(io.LimitReader(r, int64(maxObject)+1))
			}
			if err != nil {
				rg.err = err
				_ = r.Close()
				break
			}
			if len(rg.objects) == 0 {
				rg.props = oh.Properties
			}
			rg.objects = append(rg.objects, payload)
		}
		groups[g] = rg
	}
	return groups, nil
}

// checkObjects asserts that groups holds groups 0 to n-1, each ended by a
// FIN and holding objectPayload's objects byte for byte.
func checkObjects(t *testing.T, who string, groups map[uint64]receivedGroup, n int) {
	t.Helper()
	require.Len(t, groups, n, "%s: groups", who)
	for g := range uint64(n) {
		rg, ok := groups[g]
		if !assert.True(t, ok, "%s: group %d is missing", who, g) {
			continue
		}
		assert.NoError(t, rg.err, "%s: group %d did not end with a FIN", who, g)
		if !assert.Len(t, rg.objects, objectsPerGroup, "%s: objects in group %d", who, g) {
			continue
		}
		for o, p := range rg.objects {
			want := objectPayload(g, uint64(o))
			assert.True(t, string(want) == string(p), "%s: group %d object %d: payload differs (%d bytes, want %d)",
				who, g, o, len(p), len(want))
		}
	}
}

// nextNamespace waits for the next event of ns.
func nextNamespace(ctx context.Context, ns *moqt.NamespaceSubscription, within time.Duration) (moqt.NamespaceEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	return ns.Next(ctx)
}

// testBrowserPublishes: @moq/net publishes a broadcast through the relay
// to a Go subscriber. The Go subscriber discovers it (SUBSCRIBE_NAMESPACE
// to the relay, which forwards the browser's PUBLISH_NAMESPACE as a
// NAMESPACE), subscribes through the relay, which sends its SUBSCRIBE to
// the browser, and reads every object byte for byte.
func testBrowserPublishes(t *testing.T, h *harness) {
	ns := wire.NewNamespace("moqt-interop", "browser")
	name := wire.FullTrackName{Namespace: ns, Name: []byte("video")}
	requested := h.signals.take("requested")
	withdrawn := h.signals.take("withdrawn")
	openPublish := h.signals.gate("publish")
	openReceived := h.signals.gate("received")
	openClose := h.signals.gate("close")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		announced     moqt.NamespaceEvent // the browser's namespace, as the Go subscriber saw it
		sub           *moqt.Subscription
		groups        map[uint64]receivedGroup
		failed        error                 // why the Go subscriber stopped early
		doneErr       error                 // how the Go subscription ended
		afterWithdraw []moqt.NamespaceEvent // events seen after the browser withdrew
		nsSub         *moqt.NamespaceSubscription
		goDone        = make(chan struct{})
	)
	goSubscriber := func(s *moqt.Session) {
		defer close(goDone)
		// Whatever happens here, the page is let go.
		defer openClose()
		defer openReceived()
		defer openPublish()
		var err error
		nsSub, err = s.SubscribeNamespace(ctx, relayPrefix, wire.Params{})
		if err != nil {
			failed = fmt.Errorf("SUBSCRIBE_NAMESPACE: %w", err)
			return
		}
		for {
			ev, err := nextNamespace(ctx, nsSub, scenarioTimeout)
			if err != nil {
				failed = fmt.Errorf("waiting for the browser's namespace: %w", err)
				return
			}
			if !ev.Done && ev.Namespace.Equal(ns) {
				announced = ev
				break
			}
		}
		subCtx, cancelSub := context.WithTimeout(ctx, scenarioTimeout)
		defer cancelSub()
		sub, err = s.Subscribe(subCtx, name, wire.Params{})
		if err != nil {
			failed = fmt.Errorf("SUBSCRIBE through the relay: %w", err)
			return
		}
		// The relay answers only once the browser has (its SUBSCRIBE_OK),
		// so the browser's track is still empty: it may write now.
		select {
		case <-requested:
		case <-subCtx.Done():
			failed = errors.New("the page never saw the relay's SUBSCRIBE")
			return
		}
		openPublish()
		groups, err = readGroups(subCtx, sub, objectGroups, 20000)
		if err != nil {
			failed = err
			return
		}
		openReceived()
		// The page ends its track (PUBLISH_DONE), which the relay passes on.
		select {
		case <-sub.Done():
			doneErr = sub.Err()
		case <-time.After(scenarioTimeout):
			doneErr = errors.New("the Go subscription did not end after the browser ended its track")
		}
		// Then it withdraws the broadcast, which @moq/net does by
		// cancelling its PUBLISH_NAMESPACE (a FIN, then STOP_SENDING,
		// §6.4.2.3): the relay passes it on as NAMESPACE_DONE.
		select {
		case <-withdrawn:
		case <-time.After(scenarioTimeout):
			failed = errors.New("the page did not withdraw its broadcast")
			return
		}
		for {
			ev, err := nextNamespace(ctx, nsSub, closeTimeout)
			if err != nil {
				break
			}
			afterWithdraw = append(afterWithdraw, ev)
			if ev.Done {
				break
			}
		}
	}

	var afterClose []moqt.NamespaceEvent // events once the browser's session ended
	r := h.runScenario(t, scenario{
		name:      "publish-broadcast",
		namespace: "moqt-interop/browser",
		track:     "video",
		params:    map[string]any{"groups": objectGroups},
		cfg:       moqt.Config{Handler: newRelay(t, nil)},
		onListen: func(url string, certHash [32]byte) {
			s := dialRelay(t, ctx, h.draft, url, certHash, "go-subscriber", nil)
			go goSubscriber(s)
		},
		beforeClose: func(r *run) {
			select {
			case <-goDone:
			case <-time.After(closeTimeout):
				failed = errors.Join(failed, errors.New("the Go subscriber is still running"))
				return
			}
			if nsSub == nil {
				return
			}
			for {
				ev, err := nextNamespace(ctx, nsSub, doneWait)
				if err != nil {
					break
				}
				afterClose = append(afterClose, ev)
			}
		},
	})
	cancel()

	// The browser's view.
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")
	assert.Equal(t, []string{"video"}, r.js.RequestedTracks, "the tracks the relay asked the browser for")
	assert.Equal(t, objectGroups, r.js.Published, "groups the page wrote")

	// The Go subscriber's view: the browser's namespace, then every
	// object of every group, in order and byte for byte, each group ended
	// by a FIN.
	require.NoError(t, failed, "the Go subscriber")
	assert.True(t, announced.Namespace.Equal(ns), "NAMESPACE through the relay")
	require.NotNil(t, sub)
	t.Logf("go: SUBSCRIBE_OK through the relay: track alias %d, parameters %+v, properties %x", sub.TrackAlias(), sub.Params(), sub.Properties())
	// The browser's Track Properties (TIMESCALE 1000, and
	// DEFAULT_PUBLISHER_GROUP_ORDER descending), passed on by the relay.
	for _, want := range []wire.KeyValue{{Type: 0x08, Value: 1000}, {Type: 0x22, Value: 2}} {
		got, ok := sub.Properties().Get(want.Type)
		if assert.True(t, ok, "Track Property 0x%x through the relay", want.Type) {
			assert.Equal(t, want.Value, got.Value, "Track Property 0x%x through the relay", want.Type)
		}
	}
	checkObjects(t, "the Go subscriber", groups, objectGroups)
	if g, ok := groups[0]; ok {
		t.Logf("go: the Object Properties of the browser's object {0, 0}: %x", g.props)
	}

	// The browser ended its track: PUBLISH_DONE TRACK_ENDED, through the
	// relay.
	var de *moqt.DoneError
	if assert.ErrorAs(t, doneErr, &de, "how the Go subscription ended") {
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
	}

	// The browser withdrew its broadcast while its session was up: the
	// Go subscriber got NAMESPACE_DONE for it then, not at the session's
	// end.
	if assert.NotEmpty(t, afterWithdraw, "no NAMESPACE_DONE after the browser withdrew its broadcast (events once its session ended: %+v)", afterClose) {
		last := afterWithdraw[len(afterWithdraw)-1]
		assert.True(t, last.Done && last.Namespace.Equal(ns), "the event after the browser withdrew: %+v", last)
	}
	assert.Empty(t, afterClose, "namespace events once the browser's session ended")

	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}

// testBrowserPublishesEarly: @moq/net publishes a track that already has
// a group when the relay's SUBSCRIBE arrives, so its SUBSCRIBE_OK MUST
// carry LARGEST_OBJECT (draft 20 §9.20.18, draft 18 §10.2.x
// {#largest-param}).
//
// On draft 20 @moq/net codes it with a length prefix (§9.20: a Location is
// two consecutive vi64s). The relay, reading the spec's encoding, finds
// the message malformed and closes the browser's session with
// PROTOCOL_VIOLATION (§9); the Go subscriber's SUBSCRIBE is refused, and
// its own session, like the relay, goes on.
//
// On draft 18 @moq/net leaves LARGEST_OBJECT out (ietf/subscribe.js
// SubscribeOk: "Encoded on draft-20 only"), so the relay takes the track
// for empty and its SUBSCRIBE_OK to the Go subscriber has none either, as
// §10.2.x has it for a relay that has received nothing; the group the
// browser then sends (draft-18 filters are ignored: ietf/publisher.js
// subscribeRange, it starts at its latest group) reaches the Go subscriber
// whole. The page closes its session once the test has looked.
func testBrowserPublishesEarly(t *testing.T, h *harness) {
	ns := wire.NewNamespace("moqt-interop", "early")
	name := wire.FullTrackName{Namespace: ns, Name: []byte("video")}
	openClose := h.signals.gate("close")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		client    *moqt.Session
		clientErr error // the Go subscriber's session, once the browser's ended
		subErr    error
		sub       *moqt.Subscription // on draft 18, where the SUBSCRIBE succeeds
		groups    map[uint64]receivedGroup
		readErr   error
		discovery error
		goDone    = make(chan struct{})
	)
	goSubscriber := func(s *moqt.Session) {
		defer close(goDone)
		defer openClose()
		nsSub, err := s.SubscribeNamespace(ctx, relayPrefix, wire.Params{})
		if err != nil {
			discovery = fmt.Errorf("SUBSCRIBE_NAMESPACE: %w", err)
			return
		}
		defer nsSub.Close()
		for {
			ev, err := nextNamespace(ctx, nsSub, scenarioTimeout)
			if err != nil {
				discovery = fmt.Errorf("waiting for the browser's namespace: %w", err)
				return
			}
			if !ev.Done && ev.Namespace.Equal(ns) {
				break
			}
		}
		subCtx, cancelSub := context.WithTimeout(ctx, scenarioTimeout)
		defer cancelSub()
		sub, subErr = s.Subscribe(subCtx, name, wire.Params{})
		if subErr != nil {
			return
		}
		defer sub.Close()
		groups, readErr = readGroups(subCtx, sub, 1, 20000)
	}
	r := h.runScenario(t, scenario{
		name:      "publish-early",
		namespace: "moqt-interop/early",
		track:     "video",
		params:    map[string]any{"closeGate": true},
		cfg:       moqt.Config{Handler: newRelay(t, nil)},
		onListen: func(url string, certHash [32]byte) {
			client = dialRelay(t, ctx, h.draft, url, certHash, "go-subscriber", nil)
			go goSubscriber(client)
		},
		beforeClose: func(*run) {
			select {
			case <-goDone:
			case <-time.After(closeTimeout):
				discovery = errors.New("the Go subscriber is still running")
			}
			// The browser's session is over; the server, with the Go
			// subscriber's, is not yet.
			clientErr = client.Context().Err()
		},
	})

	require.NoError(t, discovery, "the Go subscriber's discovery of the browser's namespace")
	assert.Nil(t, r.js.Error, "js error")
	assert.Equal(t, 1, r.js.Published, "groups the page wrote before the SUBSCRIBE")
	assert.NoError(t, clientErr, "the Go subscriber's session ended with the browser's")
	var se *moqt.SessionError
	if h.draft.is18() {
		// No LARGEST_OBJECT, from the browser nor, passing on what it
		// knew, from the relay; the group arrives all the same.
		require.NoError(t, subErr, "the Go subscriber's SUBSCRIBE")
		t.Logf("go: SUBSCRIBE_OK through the relay: parameters %+v", sub.Params())
		assert.False(t, sub.Params().LargestObject.Set,
			"LARGEST_OBJECT through the relay: @moq/net now sends it on draft 18? Update the Interop section of README.md")
		require.NoError(t, readErr, "the Go subscriber's read")
		checkObjects(t, "the Go subscriber", groups, 1)
		// The page closed its session once told to.
		if assert.ErrorAs(t, r.closed, &se, "how the browser's session ended") {
			assert.True(t, se.Remote, "the browser should have closed the session: %v", se)
			assert.Equal(t, wire.NoError, se.Code, "session close code: %v", se)
		}
		return
	}

	// The relay closed the browser's session: its SUBSCRIBE_OK does not
	// parse.
	if assert.ErrorAs(t, r.closed, &se, "how the browser's session ended") {
		assert.False(t, se.Remote, "the relay should have closed the session: %v", se)
		assert.Equal(t, wire.ProtocolViolation, se.Code, "session close code: %v", se)
	}
	// The Go subscriber was refused, and its session is still up.
	var re *moqt.RequestError
	assert.ErrorAs(t, subErr, &re, "the Go subscriber's SUBSCRIBE")
	t.Logf("go: the Go subscriber's SUBSCRIBE: %v", subErr)
}

// testBrowserSubscribes: a Go publisher offers its track to the relay, by
// PUBLISH_NAMESPACE or, with byPublish, by PUBLISH; @moq/net subscribes to
// it through the relay and gets every object byte for byte. For an
// announced namespace it first discovers it through the relay
// (SUBSCRIBE_NAMESPACE, NAMESPACE), and the relay subscribes upstream to
// the Go publisher; a PUBLISHed track the relay serves as it is published.
// The Go publisher speaks goDraft: when it is not the harness's, the relay
// accepts both and the browser is held to the harness's by its offer.
func testBrowserSubscribes(t *testing.T, h *harness, byPublish bool, goDraft draft) {
	path := "moqt-interop/go"
	if byPublish {
		path = "moqt-interop/published"
	}
	ns := wire.NewNamespace(strings.Split(path, "/")...)
	name := wire.FullTrackName{Namespace: ns, Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	handler, accepted := acceptOne(t, track)
	received := h.signals.take("received")
	metrics := newAnswered()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		ss          *moqt.ServedSubscription // the publisher's end
		publishErrs []error
		pubDone     = make(chan struct{})
	)
	publisher := func() {
		defer close(pubDone)
		if !byPublish {
			select {
			case ss = <-accepted:
			case <-time.After(scenarioTimeout):
				publishErrs = append(publishErrs, errors.New("the relay never subscribed upstream"))
				return
			}
		}
		// Nothing is published before the relay has answered the browser
		// (a SUBSCRIBE_OK with LARGEST_OBJECT would be misread by
		// @moq/net) and asked the publisher to forward (§7.2: Forward 0
		// while nobody receives a PUBLISHed track).
		select {
		case <-metrics.subscribed:
		case <-time.After(scenarioTimeout):
			publishErrs = append(publishErrs, errors.New("the relay never answered the browser's SUBSCRIBE"))
			return
		}
		deadline := time.Now().Add(scenarioTimeout)
		for !ss.Forward() && ss.Context().Err() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !ss.Forward() {
			publishErrs = append(publishErrs, errors.New("the relay never set Forward 1"))
			return
		}
		publishErrs = append(publishErrs, publishObjects(track)...)
		select {
		case <-received:
		case <-time.After(scenarioTimeout):
		}
	}

	sc := scenario{
		name:      "subscribe-objects",
		namespace: path,
		track:     "video",
		params:    map[string]any{"groups": objectGroups, "doneWaitMs": 0},
		cfg:       moqt.Config{Handler: newRelay(t, metrics)},
		onListen: func(url string, certHash [32]byte) {
			s := dialRelay(t, ctx, goDraft, url, certHash, "go-publisher", handler)
			offerCtx, cancel := context.WithTimeout(ctx, closeTimeout)
			defer cancel()
			if byPublish {
				var err error
				ss, err = track.Publish(offerCtx, s, wire.Params{}, moqt.AcceptOptions{})
				require.NoError(t, err, "the Go publisher's PUBLISH")
			} else {
				_, err := s.PublishNamespace(offerCtx, ns, wire.Params{})
				require.NoError(t, err, "the Go publisher's PUBLISH_NAMESPACE")
			}
			go publisher()
		},
		beforeClose: func(*run) {
			select {
			case <-pubDone:
			case <-time.After(closeTimeout):
				publishErrs = append(publishErrs, errors.New("the publisher is still running"))
			}
		},
	}
	if !byPublish {
		sc.params["prefix"] = []string{"moqt-interop"}
	}
	if goDraft != h.draft {
		sc.cfg.Versions = []wire.Version{h.draft.version, goDraft.version}
		sc.browser = &h.draft
	}
	r := h.runScenario(t, sc)
	cancel()

	assert.Empty(t, publishErrs, "the Go publisher")
	if !byPublish && ss != nil {
		t.Logf("go: the relay's SUBSCRIBE upstream: parameters %+v", ss.Params())
	}

	// The browser's view: the namespace, as a path under the prefix, then
	// every group, each object byte for byte.
	assert.Nil(t, r.js.Error, "js error")
	assert.True(t, r.js.Established, "@moq/net did not establish the session")
	if !byPublish {
		assert.Contains(t, r.js.Announced, jsAnnounce{Path: "go", Active: true}, "the namespaces @moq/net discovered through the relay")
	}
	checkJSGroups(t, r.js.Groups)

	var se *moqt.SessionError
	require.ErrorAs(t, r.closed, &se)
	assert.True(t, se.Remote, "the browser should have ended the session: %v", se)
	assert.Equal(t, wire.NoError, se.Code, "session close code")
}
