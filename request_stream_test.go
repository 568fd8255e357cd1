package moqt

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Tests of the request stream itself: what it costs before the peer has
// sent anything, how long a message may take, and the rules every message
// read from it is held to, live or drained.

// schemes are the transports the fake peer reaches the library over,
// imitated by Pipes; pipeName names their subtests.
var schemes = []string{"moqt", "https"}

// pipeName names a subtest over a Pipe imitating scheme's transport as
// pipeTransports does.
func pipeName(scheme string) string {
	if scheme == "https" {
		return "pipe/webtransport"
	}
	return "pipe/quic"
}

// serverSessionOver is serverSession over a Pipe imitating raw QUIC
// ("moqt") or WebTransport ("https"). Call it inside inBubble.
func serverSessionOver(t *testing.T, scheme string, cfg *Config) (*Session, *fakePeer) {
	t.Helper()
	return pipeServerSession(t, transport.PipeConfig{WebTransport: scheme == "https"}, cfg)
}

// A request stream allocates almost nothing before bytes arrive: no 64 KiB
// message buffer, no 4 KiB read-ahead buffer.
func TestRequestStreamCostsLittleWhenIdle(t *testing.T) {
	s := &Session{cfg: (&Config{}).withDefaults(), rules: rulesOf(wire.Draft21)}
	s.routes = newAliasRoutes(s.cfg)
	const n = 100
	streams := make([]*requestStream, n) // kept, so that nothing is optimized away
	least := ^uint64(0)
	for range 5 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range streams {
			streams[i] = newRequestStream(s, nil, uint64(i), false)
		}
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	runtime.KeepAlive(streams)
	assert.Less(t, least/n, uint64(1024), "bytes allocated per idle request stream")
}

// ---- CONTROL_MESSAGE_TIMEOUT (§12.2) ----

// msgTimeout makes the tests below quick; the assertions wait up to
// fakeGuard for it.
const msgTimeout = 200 * time.Millisecond

func TestControlMessageTimeout(t *testing.T) {
	forServerSessions(t, "first message never completes", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{ControlMessageTimeout: msgTimeout})
		fs := fp.openStream()
		fs.sendRaw(frame(wire.MsgSubscribe, make([]byte, 30))[:10])
		fp.expectClose(wire.ControlMessageTimeout)
		expectSessionError(t, s, wire.ControlMessageTimeout)
	})
	forServerSessions(t, "later message left half sent", func(t *testing.T, connect fakeConnector) {
		h, _ := servedCh(AcceptOptions{})
		_, fp := connect(t, &Config{Handler: h, ControlMessageTimeout: msgTimeout})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		b, err := wire.AppendMessage(fp.v, nil, &wire.RequestUpdate{RequestID: 2})
		require.NoError(t, err)
		fs.sendRaw(b[:len(b)-1])
		fp.expectClose(wire.ControlMessageTimeout)
	})
	forServerSessions(t, "answer left half sent", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{ControlMessageTimeout: msgTimeout})
		done := goErr(func() error {
			_, err := s.TrackStatus(context.Background(), trackA, wire.Params{})
			return err
		})
		fs := fp.accept()
		expect[*wire.TrackStatus](fs)
		b, err := wire.AppendMessage(fp.v, nil, &wire.RequestOK{})
		require.NoError(t, err)
		fs.sendRaw(b[:2])
		fp.expectClose(wire.ControlMessageTimeout)
		err = recvOrFail(t, done)
		assert.Error(t, err)
	})
	t.Run("GOAWAY left half sent on the control stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{ControlMessageTimeout: msgTimeout})
			b, err := wire.AppendMessage(fp.v, nil, &wire.Goaway{NewSessionURI: "moqt://127.0.0.1/next"})
			require.NoError(t, err)
			fp.ctrlMu.Lock()
			_, err = fp.ctrl.Write(b[:len(b)-2])
			fp.ctrlMu.Unlock()
			require.NoError(t, err)
			start := time.Now()
			fp.expectClose(wire.ControlMessageTimeout)
			expectSessionError(t, s, wire.ControlMessageTimeout)
			assert.Equal(t, msgTimeout, time.Since(start), "closed when the timeout passed, not before")
		})
	})
	t.Run("idle streams between messages are not timed", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := servedCh(AcceptOptions{})
			s, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{Handler: h, ControlMessageTimeout: msgTimeout})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			// Several timeouts pass with the subscription idle, and with a
			// message that took most of one to arrive.
			advance(3 * msgTimeout)
			b, err := wire.AppendMessage(fp.v, nil, &wire.RequestUpdate{RequestID: 2})
			require.NoError(t, err)
			fs.sendRaw(b[:2])
			advance(msgTimeout - time.Millisecond)
			fs.sendRaw(b[2:])
			expect[*wire.RequestOK](fs)
			advance(3 * msgTimeout)
			fp.alive(4)
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("default", func(t *testing.T) {
		assert.Equal(t, 10*time.Second, (&Config{}).withDefaults().ControlMessageTimeout)
	})
}

// ---- Redirect rules (§9.4.1) ----

// ---- messages on refused request streams (§9.10, §9.5, §6.4.2.1) ----

// sessionTrack is a track in the reserved .session namespace, which the
// library refuses without the application (§6.5): its stream is drained.
var sessionTrack = wire.FullTrackName{Namespace: wire.NewNamespace(".session"), Name: []byte("x")}

// refused opens a request the library refuses by itself and reads the
// REQUEST_ERROR; the stream is then drained.
func refused(t *testing.T, fp *fakePeer, m wire.Message) *fakeStream {
	t.Helper()
	fs := fp.open(m)
	expect[*wire.RequestError](fs)
	fs.expectFIN()
	return fs
}

func TestRefusedRequestStreamFollowsTheRules(t *testing.T) {
	subscribe := func(id uint64) wire.Message { return subscribeMsg(id, sessionTrack, wire.Params{}) }
	trackStatus := func(id uint64) wire.Message {
		return &wire.TrackStatus{RequestID: id, TrackNamespace: sessionTrack.Namespace, TrackName: sessionTrack.Name}
	}
	publish := func(id uint64) wire.Message { // a Mandatory Track Property: refused (C006)
		return publishMsg(id, trackA, 7, wire.Params{}, mandatoryProp)
	}
	fetch := func(id uint64) wire.Message { // no such track: refused by DefaultHandler
		return &wire.Fetch{RequestID: id, TrackNamespace: trackA.Namespace, TrackName: trackA.Name}
	}
	for _, tc := range []struct {
		name    string
		cfg     *Config
		request func(id uint64) wire.Message
		then    []wire.Message
		code    wire.SessionErrorCode
	}{
		{"PUBLISH_STATE_NOTIFY from the subscriber", nil, subscribe,
			[]wire.Message{&wire.PublishStateNotify{}}, wire.ProtocolViolation},
		{"REQUEST_UPDATE on TRACK_STATUS", nil, trackStatus,
			[]wire.Message{&wire.RequestUpdate{RequestID: 2}}, wire.ProtocolViolation},
		{"REQUEST_UPDATE with the wrong parity", nil, subscribe,
			[]wire.Message{&wire.RequestUpdate{RequestID: 3}}, wire.InvalidRequestID},
		{"REQUEST_UPDATE reusing a Request ID", nil, fetch,
			[]wire.Message{&wire.RequestUpdate{RequestID: 0}}, wire.InvalidRequestID},
		{"REQUEST_UPDATE with a parameter its request does not allow", nil, subscribe,
			[]wire.Message{&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("x"))}}}, wire.ProtocolViolation},
		{"more REQUEST_UPDATEs than MAX_REQUEST_UPDATES", &Config{MaxRequestUpdates: 2}, subscribe,
			[]wire.Message{&wire.RequestUpdate{RequestID: 2}, &wire.RequestUpdate{RequestID: 4}, &wire.RequestUpdate{RequestID: 6}}, wire.TooManyRequestUpdates},
		{"REQUEST_OK from the requester", nil, fetch,
			[]wire.Message{&wire.RequestOK{}}, wire.ProtocolViolation},
		{"REQUEST_OK from the publisher, answering nothing", nil, publish,
			[]wire.Message{&wire.RequestOK{}}, wire.ProtocolViolation},
		{"a message after PUBLISH_DONE", nil, publish,
			[]wire.Message{&wire.PublishDone{StatusCode: wire.DoneTrackEnded}, &wire.PublishStateNotify{}}, wire.ProtocolViolation},
		{"SUBSCRIBE_OK from the requester", nil, subscribe,
			[]wire.Message{&wire.SubscribeOK{TrackAlias: 1}}, wire.ProtocolViolation},
		{"a second request on the stream", nil, subscribe,
			[]wire.Message{subscribe(2)}, wire.ProtocolViolation},
		{"a second GOAWAY", nil, fetch,
			[]wire.Message{&wire.Goaway{}, &wire.Goaway{}}, wire.ProtocolViolation},
	} {
		for _, scheme := range schemes {
			t.Run(pipeName(scheme)+"/"+tc.name, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					_, fp := serverSessionOver(t, scheme, tc.cfg)
					fs := refused(t, fp, tc.request(0))
					for _, m := range tc.then {
						fs.send(m)
					}
					fp.expectClose(tc.code)
				})
			})
		}
	}
	t.Run("what the requester may send is discarded", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, &Config{MaxRequestUpdates: 2})
			fs := refused(t, fp, subscribe(0))
			fs.send(&wire.RequestUpdate{RequestID: 2})
			fs.send(&wire.Goaway{})
			fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{Forward: wire.Some(false)}})
			fs.fin()
			// A refused PUBLISH: its publisher may notify and end.
			fs = refused(t, fp, publish(6))
			fs.send(&wire.PublishStateNotify{})
			fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
			fs.fin()
			fp.alive(8)
			assert.NoError(t, s.Context().Err())
		})
	})
}

// bytesStream is a request stream whose peer has sent b and nothing more.
type bytesStream struct {
	*bytes.Reader
	ctx context.Context
}

func (bytesStream) Write(p []byte) (int, error)         { return len(p), nil }
func (bytesStream) Close() error                        { return nil }
func (bytesStream) CancelWrite(uint64)                  {}
func (bytesStream) SetReliableBoundary() bool           { return false }
func (bytesStream) WriteMarked(p []byte) (int, error)   { return len(p), nil }
func (bytesStream) WriteReserved(p []byte) (int, error) { return len(p), nil }
func (bytesStream) CancelRead(uint64)                   {}
func (bytesStream) SetPriority(int8, bool)              {}
func (bytesStream) SetWriteDeadline(time.Time) error    { return nil }
func (s bytesStream) Context() context.Context          { return s.ctx }

// pipedRequestStream is a stream this end (the server) opened for request
// on which the peer has sent m.
func pipedRequestStream(t *testing.T, request wire.MessageType, m wire.Message) *requestStream {
	b, err := wire.AppendMessage(wire.Draft21, nil, m)
	require.NoError(t, err)
	ctx, cancel := context.WithCancelCause(t.Context())
	t.Cleanup(func() { cancel(nil) })
	s := &Session{cfg: quietConfig(nil).withDefaults(), version: wire.Draft21, rules: rulesOf(wire.Draft21), ctx: ctx, cancel: cancel}
	s.routes = newAliasRoutes(s.cfg)
	rs := newRequestStream(s, bytesStream{bytes.NewReader(b), t.Context()}, 1, true)
	rs.typ = request
	return rs
}

// A namespace request for a session-level namespace is refused with
// DOES_NOT_EXIST, like one for a session-level track, not with the
// NOT_SUPPORTED of other namespace requests (§6.5).
func TestSessionLevelNamespaceDoesNotExist(t *testing.T) {
	session := wire.NewNamespace(".session", "x")
	for _, tc := range []struct {
		m    func(id uint64, ns wire.Namespace) wire.Message
		name string
	}{
		{func(id uint64, ns wire.Namespace) wire.Message {
			return &wire.PublishNamespace{RequestID: id, TrackNamespace: ns}
		}, "PUBLISH_NAMESPACE"},
		{func(id uint64, ns wire.Namespace) wire.Message {
			return &wire.SubscribeNamespace{RequestID: id, TrackNamespacePrefix: ns}
		}, "SUBSCRIBE_NAMESPACE"},
		{func(id uint64, ns wire.Namespace) wire.Message {
			return &wire.SubscribeTracks{RequestID: id, TrackNamespacePrefix: ns}
		}, "SUBSCRIBE_TRACKS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				// The Handler refuses what reaches it with a code of its own.
				h := HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqUninterested, "no") })
				_, fp := serverSession(t, &Config{Handler: h})
				fs := fp.open(tc.m(0, session))
				assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
				fs.expectFIN()
				// Any other namespace goes to the Handler.
				fs = fp.open(tc.m(2, trackA.Namespace))
				assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
			})
		})
	}
}

// A PUBLISH the application rejected is read on until the publisher's
// FIN; a REQUEST_UPDATE that crossed the answer still consumes a Request
// ID (§6.4.2.1) and must fit the request.
func TestRejectedPublishUpdatesFollowTheRules(t *testing.T) {
	reject := HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqUninterested, "no") })
	for _, tc := range []struct {
		name string
		cfg  *Config
		then []wire.Message
		code wire.SessionErrorCode
	}{
		{"wrong parity", nil, []wire.Message{&wire.RequestUpdate{RequestID: 3}}, wire.InvalidRequestID},
		{"reused", nil, []wire.Message{&wire.RequestUpdate{RequestID: 0}}, wire.InvalidRequestID},
		{"parameter not allowed", nil, []wire.Message{&wire.RequestUpdate{RequestID: 2,
			Parameters: wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("x"))}}}, wire.ProtocolViolation},
		{"more than MAX_REQUEST_UPDATES", &Config{MaxRequestUpdates: 1},
			[]wire.Message{&wire.RequestUpdate{RequestID: 2}, &wire.RequestUpdate{RequestID: 4}}, wire.TooManyRequestUpdates},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				cfg := tc.cfg
				if cfg == nil {
					cfg = &Config{}
				}
				cfg.Handler = reject
				_, fp := serverSession(t, cfg)
				fs := fp.open(publishMsg(0, trackA, 7, wire.Params{}, nil))
				assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
				for _, m := range tc.then {
					fs.send(m)
				}
				fp.expectClose(tc.code)
			})
		})
	}
	t.Run("a valid one is discarded", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, &Config{Handler: reject})
			fs := fp.open(publishMsg(0, trackA, 7, wire.Params{}, nil))
			expect[*wire.RequestError](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2})
			fs.fin()
			fs.expectFIN()
			fp.alive(4)
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("one read before the refusal counts too", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			// The Handler refuses once the update was read: the update
			// waited for the PUBLISH's answer, and goes unanswered.
			read := make(chan struct{}, 1)
			h := HandlerFunc(func(r Request) {
				<-read
				_ = r.Reject(wire.ReqUninterested, "no")
			})
			_, fp := serverSession(t, &Config{Handler: h, MaxRequestUpdates: 1,
				hooks: &sessionHooks{updateReceived: func() { read <- struct{}{} }}})
			fs := fp.open(publishMsg(0, trackA, 7, wire.Params{}, nil))
			fs.send(&wire.RequestUpdate{RequestID: 2})
			assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
			fs.send(&wire.RequestUpdate{RequestID: 4})
			fp.expectClose(wire.TooManyRequestUpdates)
		})
	})
}

// A GOAWAY may come on any request stream (§9.2), TRACK_STATUS's included:
// before the answer it is no protocol violation, and a stream that ends
// after it without an answer is a migration, not a failure of the session.
func TestTrackStatusAcceptsGoaway(t *testing.T) {
	ask := func(s *Session) <-chan error {
		return goErr(func() error {
			_, err := s.TrackStatus(context.Background(), trackA, wire.Params{})
			return err
		})
	}
	t.Run("then the answer", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			done := ask(s)
			fs := fp.accept()
			expect[*wire.TrackStatus](fs)
			fs.send(&wire.Goaway{NewSessionURI: "moqt://elsewhere.example/live"})
			fs.send(&wire.RequestOK{Parameters: wire.Params{LargestObject: wire.Some(wire.Location{Group: 3})}})
			fs.fin()
			require.NoError(t, recvOrFail(t, done))
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("then FIN", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			done := ask(s)
			fs := fp.accept()
			expect[*wire.TrackStatus](fs)
			fs.send(&wire.Goaway{})
			fs.fin()
			assert.ErrorIs(t, recvOrFail(t, done), ErrGoingAway)
			assert.NoError(t, s.Context().Err())
		})
	})
	t.Run("a second GOAWAY", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			done := ask(s)
			fs := fp.accept()
			expect[*wire.TrackStatus](fs)
			fs.send(&wire.Goaway{})
			fs.send(&wire.Goaway{})
			fp.expectClose(wire.ProtocolViolation)
			assert.Error(t, recvOrFail(t, done))
		})
	})
	t.Run("from the requester", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
			fs.send(&wire.Goaway{})
			fs.fin()
			expect[*wire.RequestError](fs)
			fs.expectFIN()
			fp.alive(2)
			assert.NoError(t, s.Context().Err())
		})
	})
}

// Request streams whose first message has begun and stalled hold little
// memory each (they held 68 KiB of buffers each). Measured over a Pipe: the
// heap's growth is the library's buffers and goroutines plus the Pipe's
// streams, which hold the 20 bytes sent on each, not a real transport's
// buffers at both ends.
func TestIdleRequestStreamsHoldLittle(t *testing.T) {
	const n = 50 // within the stream limits of both transports
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, scheme := range schemes {
		t.Run(pipeName(scheme), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := serverSessionOver(t, scheme, &Config{ControlMessageTimeout: time.Minute})
				fp.alive(0) // the session's own allocations are done
				// Those that served it, and those of sessions of earlier tests
				// still closing, wind down first.
				base := settledGoroutines()
				before := heap()
				streams := make([]*fakeStream, n)
				for i := range streams {
					streams[i] = fp.openStream()
					// A SUBSCRIBE that declares 65535 bytes and sends 20 of them.
					streams[i].sendRaw(frame(wire.MsgSubscribe, make([]byte, wire.MaxMessageBody))[:23])
				}
				require.Eventually(t, func() bool { return runtime.NumGoroutine() >= base+n },
					fakeGuard, 10*time.Millisecond, "the library did not take up the streams")
				time.Sleep(100 * time.Millisecond) // let the last reads block
				after := heap()
				grown := after - min(before, after)
				t.Logf("%d stalled request streams: %d bytes of heap, both ends", n, grown)
				assert.Less(t, grown/n, uint64(32<<10), "heap per stalled request stream, both ends")
				runtime.KeepAlive(streams)
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// settledGoroutines returns the number of goroutines once it has stopped
// changing, within a second.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 100 {
		time.Sleep(10 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// stuckStream is a request stream whose peer takes nothing: a Write
// blocks until a write deadline is set.
type stuckStream struct {
	bytesStream
	entered, woken chan struct{}
	once           *sync.Once
}

func (s stuckStream) Write([]byte) (int, error) {
	close(s.entered)
	<-s.woken
	return 0, os.ErrDeadlineExceeded
}

func (s stuckStream) SetWriteDeadline(time.Time) error {
	s.once.Do(func() { close(s.woken) })
	return nil
}

// TestCancelWakesBlockedWrite: cancelling a request from this end does not
// wait for a write blocked on a peer that does not read its request
// stream (no lock is held across network I/O that a cancel needs).
func TestCancelWakesBlockedWrite(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	t.Cleanup(func() { cancel(nil) })
	s := &Session{cfg: quietConfig(nil).withDefaults(), version: wire.Draft21, rules: rulesOf(wire.Draft21), ctx: ctx, cancel: cancel}
	s.routes = newAliasRoutes(s.cfg)
	str := stuckStream{bytesStream{bytes.NewReader(nil), t.Context()}, make(chan struct{}), make(chan struct{}), &sync.Once{}}
	rs := newRequestStream(s, str, 1, true)
	written := goErr(func() error { return rs.write(&wire.RequestOK{}) })
	<-str.entered // the write holds the stream, blocked
	cancelled := goErr(func() error { rs.cancel(wire.ResetCancelled); return nil })
	require.NoError(t, recvOrFail(t, cancelled), "cancel returns")
	assert.Error(t, recvOrFail(t, written), "the blocked write fails")
}

// acceptLocal accepts sr the way an application does, through a LocalTrack
// of its track.
func acceptLocal(sr *SubscribeRequest, opts AcceptOptions) (*ServedSubscription, error) {
	return acceptLocalAt(sr, wire.Opt[wire.Location]{}, opts)
}

// acceptLocalAt is acceptLocal with a track whose Largest Object is
// largest, if set, so that SUBSCRIBE_OK reports it.
func acceptLocalAt(sr *SubscribeRequest, largest wire.Opt[wire.Location], opts AcceptOptions) (*ServedSubscription, error) {
	lt, err := NewLocalTrack(sr.Track, nil)
	if err != nil {
		return nil, err
	}
	if largest.Set {
		lt.noteObject(largest.Value)
	}
	return lt.Accept(sr, opts)
}

// servedChAt is servedCh with tracks whose Largest Object is largest, if
// set.
func servedChAt(largest wire.Opt[wire.Location], opts AcceptOptions) (Handler, <-chan *ServedSubscription) {
	ch := make(chan *ServedSubscription, 16)
	return HandlerFunc(func(r Request) {
		sr, ok := r.(*SubscribeRequest)
		if !ok {
			_ = r.Reject(wire.ReqNotSupported, "")
			return
		}
		if ss, err := acceptLocalAt(sr, largest, opts); err == nil {
			ch <- ss
		}
	}), ch
}

// publishLocal offers track to the peer of s the way an application does,
// through a LocalTrack with props as its Track Properties;
// params.LargestObject, if set, becomes the track's Largest Object first,
// so that the PUBLISH reports it.
func publishLocal(ctx context.Context, s *Session, track wire.FullTrackName, params wire.Params, props wire.KVList) (*ServedSubscription, error) {
	lt, err := NewLocalTrack(track, props)
	if err != nil {
		return nil, err
	}
	if params.LargestObject.Set {
		lt.noteObject(params.LargestObject.Value)
	}
	return lt.Publish(ctx, s, params, AcceptOptions{})
}
