package moqt

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// These tests watch a ServedSubscription end with PUBLISH_DONE, in what
// order it closes its data streams, writes PUBLISH_DONE and releases its
// state. The network cannot show the order in which one end closed several
// streams, so the subscription runs here over recording streams, with no
// connection: every step is synchronous and seen in the order it happens.

// doneLog records the events of one subscription's end.
type doneLog struct {
	mu     sync.Mutex
	events []string
	// aliveAtDone reports whether the subscription's state was still held
	// when PUBLISH_DONE was written.
	aliveAtDone bool
	done        *wire.PublishDone
}

func (l *doneLog) note(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// recordedRequest is the subscription's request stream.
type recordedRequest struct {
	transport.Stream
	log   *doneLog
	v     wire.Version
	alive func() bool
}

func (s *recordedRequest) Write(b []byte) (int, error) {
	m, err := wire.NewMessageReader(bytes.NewReader(b)).ReadMessage(s.v)
	if err != nil {
		return 0, err
	}
	if d, ok := m.(*wire.PublishDone); ok {
		alive := s.alive()
		s.log.mu.Lock()
		s.log.aliveAtDone, s.log.done = alive, d
		s.log.mu.Unlock()
	}
	s.log.note(m.Type().String())
	return len(b), nil
}

func (s *recordedRequest) SetWriteDeadline(time.Time) error { return nil }

func (s *recordedRequest) Close() error {
	s.log.note("request FIN")
	return nil
}

// recordedData is one of its data streams.
type recordedData struct {
	transport.SendStream
	log *doneLog
}

func (s *recordedData) CancelWrite(uint64)                  { s.log.note("data stream reset") }
func (s *recordedData) SetReliableBoundary() bool           { return true }
func (s *recordedData) WriteMarked(b []byte) (int, error)   { return s.Write(b) }
func (s *recordedData) WriteReserved(b []byte) (int, error) { return s.Write(b) }
func (s *recordedData) Close() error                        { s.log.note("data stream FIN"); return nil }

// webTransportConn stands in for a connection: a WebTransport one, which
// has no priority table to keep.
type webTransportConn struct{ transport.Conn }

func (webTransportConn) WebTransport() bool { return true }

// endingSubscription is an Established ServedSubscription with two open
// data streams, over recording streams.
type endingSubscription struct {
	ss  *ServedSubscription
	log *doneLog
}

func newEndingSubscription(t *testing.T) *endingSubscription {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(nil) })
	v := draftOf(t)
	s := &Session{conn: webTransportConn{}, version: v, rules: rulesOf(v), cfg: (&Config{}).withDefaults(), ctx: ctx, cancel: cancel}
	s.routes = newAliasRoutes(s.cfg)
	log := &doneLog{}
	req := &recordedRequest{log: log, v: s.version}
	rs := &requestStream{sess: s, str: req}
	ss := newServedSubscription(rs, trackA, wire.Params{}, statePendingSubscriber)
	req.alive = func() bool { return stateAlive(ss) }
	require.NoError(t, ss.establish())
	require.NoError(t, ss.markOpened()) // as if the SUBSCRIBE_OK was written
	ss.mu.Lock()
	ss.dataStreams = map[transport.SendStream]bool{
		&recordedData{log: log}: false,
		&recordedData{log: log}: false,
	}
	ss.streams = 2
	ss.mu.Unlock()
	require.True(t, stateAlive(ss))
	return &endingSubscription{ss: ss, log: log}
}

// stateAlive reports whether ss still holds its state: its context live.
func stateAlive(ss *ServedSubscription) bool {
	return ss.Context().Err() == nil
}

// TestC078_PublishDoneAfterStreamsClosed: PUBLISH_DONE is sent only after
// every stream of the subscription is closed (§3.1.1, §9.9 C081): the two
// open ones are reset first, and the Stream Count counts them. (Over the
// network, TestC081_PublishDoneAfterStreamsClosed shows the subscriber
// seeing the reset.)
func TestC078_PublishDoneAfterStreamsClosed(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		e := newEndingSubscription(t)
		require.NoError(t, e.ss.End(wire.DoneTrackEnded, "bye"))
		e.log.mu.Lock()
		defer e.log.mu.Unlock()
		assert.Equal(t, []string{"data stream reset", "data stream reset", "PUBLISH_DONE", "request FIN"}, e.log.events)
		require.NotNil(t, e.log.done)
		assert.Equal(t, uint64(2), e.log.done.StreamCount)
	})
}

// TestC082_StateKeptUntilPublishDone: the publisher keeps a subscription's
// state until it has sent PUBLISH_DONE (§9.9): when PUBLISH_DONE is
// written the subscription's context is live; it may
// let it go after, and does.
func TestC082_StateKeptUntilPublishDone(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		e := newEndingSubscription(t)
		require.NoError(t, e.ss.End(wire.DoneTooFarBehind, ""))
		e.log.mu.Lock()
		alive := e.log.aliveAtDone
		e.log.mu.Unlock()
		assert.True(t, alive, "the subscription's state was gone before PUBLISH_DONE was sent")
		assert.False(t, stateAlive(e.ss), "released once PUBLISH_DONE is sent")
		assert.Equal(t, stateTerminated, e.ss.current())
	})
}
