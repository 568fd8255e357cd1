package moqt

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// blockingTrackStatus is a Handler that answers nothing until its
// request's session ends, so that a TrackStatus call stays blocked.
func blockingTrackStatus(started chan<- struct{}) Handler {
	return HandlerFunc(func(r Request) {
		started <- struct{}{}
		<-r.Session().Context().Done()
	})
}

// startBlockedCall starts a TrackStatus on p.client that the server never
// answers, and returns its eventual error.
func startBlockedCall(t *testing.T, p *pair, started <-chan struct{}) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		_, err := p.client.TrackStatus(context.Background(), testTrack, wire.Params{})
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the request did not reach the handler")
	}
	return errc
}

// endedWith waits for s to end and for the blocked call to return, and
// checks that the call's error is the session's cause.
func endedWith(t *testing.T, s *Session, errc <-chan error, within time.Duration) *SessionError {
	t.Helper()
	select {
	case <-s.Context().Done():
	case <-time.After(within):
		require.FailNow(t, "session still up")
	}
	var err error
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "blocked call did not return")
	}
	cause := context.Cause(s.Context())
	var se *SessionError
	require.ErrorAs(t, cause, &se)
	assert.Same(t, cause, err, "the blocked call reports the session's cause")
	return se
}

// TestTrackStatusFinAfterStopSending: a peer that stops a TRACK_STATUS's
// stream before its FIN, as a WebTransport peer closing its session stops
// every stream before its close arrives, does not end the request by that:
// the call reports how the read of the answer ends, here with the session,
// and returns the session's cause. It returned the refused FIN's error
// (TestSessionEndReachesBlockedCalls/call/webtransport, on a busy machine).
func TestTrackStatusFinAfterStopSending(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				written, proceed := make(chan struct{}), make(chan struct{})
				cfg := &Config{hooks: &sessionHooks{trackStatusWritten: func() {
					close(written)
					<-proceed
				}}}
				s, fp := pipeClientSession(t, transport.PipeConfig{WebTransport: tr.wt}, cfg)
				errc := goErr(func() error {
					_, err := s.TrackStatus(context.Background(), testTrack, wire.Params{})
					return err
				})
				<-written
				fs := fp.accept()
				expect[*wire.TrackStatus](fs)
				fs.stopSending(wire.ResetCancelled)
				synctest.Wait()
				close(proceed) // the FIN, refused
				synctest.Wait()
				require.NoError(t, fp.conn.CloseWithError(uint64(wire.GoawayTimeout), "bye"))
				err := recvOrFail(t, errc)
				<-s.Context().Done()
				assert.Same(t, context.Cause(s.Context()), err)
			})
		})
	}
}

// TestCloseAfterConnectionEndedReportsIt: a close this end makes once its
// connection has ended, closed by the peer or lost, but before the session
// has seen that, cannot reach the peer, so the session's cause is the
// connection's end, not the close. FuzzSession found it: its peer lost
// the connection and the application closed the session right after, and
// the session reported a local NO_ERROR the peer never received. Here the
// connection ends before the session has started anything that could see
// it, so the close comes first, every time.
func TestCloseAfterConnectionEndedReportsIt(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := "peer-close"
		if lost {
			name = "lost"
		}
		t.Run(name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				cfg := quietConfig(nil).withDefaults()
				peer, conn := transport.Pipe(pipeConfig(transport.PipeConfig{}, cfg))
				s := pipeSession(t, conn, false, cfg)
				if lost {
					peer.Lose()
				} else {
					require.NoError(t, peer.CloseWithError(uint64(wire.ProtocolViolation), "peer"))
				}
				require.NoError(t, s.CloseWithError(wire.NoError, "application"))
				var se *SessionError
				require.ErrorAs(t, context.Cause(s.Context()), &se)
				if lost {
					require.NotNil(t, se.Transport, "a lost connection: %v", se)
					assert.Equal(t, transport.ConnIdleTimeout, se.Transport.kind)
					assert.Equal(t, wire.InternalError, se.Code)
					return
				}
				assert.Equal(t, SessionError{Code: wire.ProtocolViolation, Reason: "peer", Remote: true}, *se)
			})
		})
	}
}

func closeBeforeExit(t *testing.T, scheme string) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	p := newPair(t, scheme, nil, &Config{packetConn: udp})
	require.NoError(t, p.client.CloseWithError(wire.Unauthorized, "bye"))
	require.NoError(t, udp.Close())
	select {
	case <-p.server.Context().Done():
	case <-time.After(3 * time.Second):
		require.FailNow(t, "the server did not learn of the close")
	}
	var se *SessionError
	require.ErrorAs(t, context.Cause(p.server.Context()), &se)
	assert.Equal(t, SessionError{Code: wire.Unauthorized, Reason: "bye", Remote: true}, *se)
}

// sessionGoroutines returns the stacks of the goroutines running a method
// of s, Handler calls aside: a method's receiver is printed in its frame.
func sessionGoroutines(s *Session) []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, ".ServeMOQT(") {
			continue
		}
		for line := range strings.SplitSeq(g, "\n") {
			if strings.Contains(line, "(*Session).") && strings.Contains(line, fmt.Sprintf("(%p", s)) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// TestCloseWaitsForGoroutines: once both ends' Close returned, none of the
// sessions' goroutines runs, while a Handler stuck in user code does not
// hold Close up.
func TestCloseWaitsForGoroutines(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		release := make(chan struct{})
		stuck := make(chan struct{}, 1)
		handler := HandlerFunc(func(r Request) {
			stuck <- struct{}{}
			<-release // ignores the session's end
			_ = r.Reject(wire.ReqInternalError, "late")
		})
		var once sync.Once
		unblock := func() { once.Do(func() { close(release) }) }
		t.Cleanup(unblock)
		// A goroutine of the client's session that takes its time to
		// end: Close must wait for it.
		slow := &sessionHooks{sessionEnded: func() { time.Sleep(300 * time.Millisecond) }}
		p := connect(t, &Config{Handler: handler}, &Config{hooks: slow})
		go func() { _, _ = p.client.TrackStatus(context.Background(), testTrack, wire.Params{}) }()
		<-stuck
		require.NotEmpty(t, sessionGoroutines(p.client), "the check sees the session's goroutines")
		start := time.Now()
		// The TRACK_STATUS the stuck Handler holds is never answered:
		// Close gives up on it, and says so.
		require.ErrorIs(t, p.client.Close(), ErrCloseTimeout)
		if bubbled() { // on the wall clock a busy machine could pass the bound
			assert.Less(t, time.Since(start), closeWait, "a stuck Handler does not hold Close up")
		}
		// A goroutine that has called wg.Done may still be on its
		// way out; one still in the 300 ms hook is not.
		var left []string
		settle(t, func() bool { left = sessionGoroutines(p.client); return len(left) == 0 },
			"session goroutines left after Close")
		assert.Empty(t, left)
		unblock()
	})
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestHandlerPanicRecovered: a panicking Handler is recovered and logged;
// its request alone ends with INTERNAL_ERROR (REQUEST_ERROR before an
// answer, a reset after one) and the session stays up.
func TestHandlerPanicRecovered(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		var logs syncBuffer
		calls := 0
		var mu sync.Mutex
		handler := HandlerFunc(func(r Request) {
			mu.Lock()
			calls++
			n := calls
			mu.Unlock()
			switch n {
			case 1:
				panic("boom")
			case 2:
				_, _ = acceptLocal(r.(*SubscribeRequest), AcceptOptions{})
				panic("after the answer")
			}
			_ = r.Reject(wire.ReqDoesNotExist, "none")
		})
		p := connect(t, &Config{Handler: handler, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()

		_, err := p.client.TrackStatus(ctx, testTrack, wire.Params{})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqInternalError, re.Code)
		assert.Contains(t, logs.String(), "event=handler_panic")
		assert.Contains(t, logs.String(), "boom")

		// Answered, then reset: the reset may overtake SUBSCRIBE_OK.
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		if err == nil {
			select {
			case <-sub.Done():
			case <-ctx.Done():
				require.FailNow(t, "the panicking handler's subscription stays up")
			}
			err = sub.Err()
		}
		var se *StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.ResetInternalError, se.Code)
		assert.Contains(t, logs.String(), "after the answer")

		_, err = p.client.TrackStatus(ctx, testTrack, wire.Params{})
		require.ErrorAs(t, err, &re, "the session still serves requests")
		assert.Equal(t, wire.ReqDoesNotExist, re.Code)
		assert.NoError(t, p.server.Context().Err())
		assert.NoError(t, p.client.Context().Err())
	})
}
