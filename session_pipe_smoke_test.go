package moqt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Requests end to end between two library sessions, over both Pipes in
// synctest bubbles: what they check is the session's, not the
// transport's. TestIntegrationSetup runs a session over the real ones.

func TestSubscribeDefaultRejects(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		p := connect(t, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqDoesNotExist, re.Code)
	})
}

func TestSubscriberCancel(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		served := make(chan *ServedSubscription, 1)
		serverCfg := &Config{Handler: HandlerFunc(func(r Request) {
			ss, err := acceptLocal(r.(*SubscribeRequest), AcceptOptions{})
			if err == nil {
				served <- ss
			}
		})}
		p := connect(t, serverCfg, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		ss := <-served
		require.NoError(t, sub.Close())
		select {
		case <-ss.Context().Done():
		case <-ctx.Done():
			t.Fatal("publisher did not see the cancellation")
		}
		assert.Equal(t, stateTerminated, ss.current())
		assert.True(t, errors.Is(ss.Err(), ErrCancelled))
	})
}

// TestPublishRejected: the subscriber answers PUBLISH with
// REQUEST_ERROR, which Publish returns.
func TestPublishRejected(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		p := connect(t, nil, nil) // the client's DefaultHandler refuses PUBLISH
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := publishLocal(ctx, p.server, testTrack, wire.Params{}, nil)
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqNotSupported, re.Code)
	})
}

// TestPublisherCancel: the publisher resets a PUBLISH-initiated
// subscription's stream; the subscriber sees the cancellation.
func TestPublisherCancel(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAcceptAll()
		p := connect(t, nil, &Config{Handler: h})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ss, err := publishLocal(ctx, p.server, testTrack, wire.Params{}, nil)
		require.NoError(t, err)
		sub := <-h.subs
		ss.cancel(ErrCancelled, wire.ResetCancelled)
		waitDone(t, ctx, sub.Done(), "subscription")
		assert.ErrorIs(t, sub.Err(), ErrCancelled)
		// The session itself is unharmed.
		_, err = p.client.TrackStatus(ctx, testTrack, wire.Params{})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqDoesNotExist, re.Code)
	})
}

// TestTrackStatus covers TRACK_STATUS_OK with LARGEST_OBJECT and
// Track Properties.
func TestTrackStatus(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		props := wire.KVList{{Type: wire.PropMaxCacheDuration, Value: 5000}}
		serverCfg := &Config{Handler: HandlerFunc(func(r Request) {
			if ts, ok := r.(*TrackStatusRequest); ok {
				_ = ts.Accept(wire.Some(wire.Location{Group: 2, Object: 3}), props)
				return
			}
			DefaultHandler.ServeMOQT(r)
		})}
		p := connect(t, serverCfg, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := p.client.TrackStatus(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, wire.Some(wire.Location{Group: 2, Object: 3}), st.Largest)
		assert.Equal(t, props, st.Properties)
	})
}

// TestGoawayTimeout: requests still open when Shutdown's context
// ends close the session with GOAWAY_TIMEOUT.
func TestGoawayTimeout(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAcceptAll()
		p := connect(t, &Config{Handler: h}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		<-h.served
		drain, cancelDrain := context.WithCancel(ctx)
		go func() {
			<-p.client.GoingAway()
			cancelDrain() // the client ignores the GOAWAY
		}()
		require.NoError(t, p.server.Shutdown(drain, ""))
		waitDone(t, ctx, p.client.Context().Done(), "client session")
		var se *SessionError
		require.ErrorAs(t, context.Cause(p.client.Context()), &se)
		assert.Equal(t, wire.GoawayTimeout, se.Code)
	})
}

// TestSubscribeUpdateDone covers the subscriber-initiated subscription:
// SUBSCRIBE with its Largest Object, REQUEST_UPDATE of Forward,
// PUBLISH_DONE.
func TestSubscribeUpdateDone(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		served := make(chan *ServedSubscription, 1)
		serverCfg := &Config{Handler: HandlerFunc(func(r Request) {
			sr, ok := r.(*SubscribeRequest)
			if !ok {
				_ = r.Reject(wire.ReqNotSupported, "")
				return
			}
			ss, err := acceptLocalAt(sr, wire.Some(wire.Location{Group: 4, Object: 2}), AcceptOptions{})
			if err == nil {
				served <- ss
			}
		})}
		p := connect(t, serverCfg, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{SubscriberPriority: wire.Some[uint8](7)})
		require.NoError(t, err)
		ss := <-served
		assert.Equal(t, stateEstablished, sub.current())
		assert.Equal(t, ss.TrackAlias(), sub.TrackAlias())
		largest, ok := sub.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 4, Object: 2}, largest)
		assert.True(t, ss.Forward())

		require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(false)}))
		assert.False(t, ss.Forward())
		assert.False(t, sub.forwardState())

		require.NoError(t, ss.End(wire.DoneTrackEnded, "bye"))
		select {
		case <-sub.Done():
		case <-ctx.Done():
			t.Fatal("subscription did not end")
		}
		var de *DoneError
		require.ErrorAs(t, sub.Err(), &de)
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
		assert.Equal(t, uint64(0), de.StreamCount)
	})
}

// TestPublishUpdateDone covers the publisher-initiated subscription:
// PUBLISH, PUBLISH_OK, an update from the subscriber, PUBLISH_DONE.
func TestPublishUpdateDone(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAcceptAll()
		p := connect(t, nil, &Config{Handler: h})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ss, err := publishLocal(ctx, p.server, testTrack, wire.Params{Forward: wire.Some(false),
			LargestObject: wire.Some(wire.Location{Group: 9, Object: 1})},
			wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 3}})
		require.NoError(t, err)
		assert.Equal(t, stateEstablished, ss.current())
		assert.False(t, ss.Forward())
		sub := <-h.subs
		assert.Equal(t, stateEstablished, sub.current())
		assert.True(t, sub.Track().Equal(testTrack))
		assert.Equal(t, ss.TrackAlias(), sub.TrackAlias())
		assert.False(t, sub.forwardState())
		largest, ok := sub.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 9, Object: 1}, largest)
		assert.Equal(t, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 3}}, sub.Properties())

		require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(true)}))
		assert.True(t, ss.Forward())

		require.NoError(t, ss.End(wire.DoneGoingAway, "moving"))
		waitDone(t, ctx, sub.Done(), "subscription")
		var de *DoneError
		require.ErrorAs(t, sub.Err(), &de)
		assert.Equal(t, wire.DoneGoingAway, de.Code)
		assert.Equal(t, "moving", de.Reason)
	})
}

// TestGoawayMigrates: the server drains with Shutdown; the client sees
// GOAWAY, cannot start new requests, and closes the session with NO_ERROR
// once its last subscription ends, which ends the server's Shutdown.
func TestGoawayMigrates(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h := newAcceptAll()
		p := connect(t, &Config{Handler: h}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		<-h.served

		shut := make(chan error, 1)
		go func() { shut <- p.server.Shutdown(ctx, "moqt://elsewhere.example/live") }()
		waitDone(t, ctx, p.client.GoingAway(), "GOAWAY")
		assert.Equal(t, "moqt://elsewhere.example/live", p.client.GoawayURI())
		_, err = p.client.Subscribe(ctx, testTrack, wire.Params{})
		assert.ErrorIs(t, err, ErrGoingAway)

		require.NoError(t, sub.Close()) // migrate away: the last request ends
		require.NoError(t, <-shut)
		waitDone(t, ctx, p.client.Context().Done(), "client session")
		var se *SessionError
		require.ErrorAs(t, context.Cause(p.client.Context()), &se)
		assert.Equal(t, wire.NoError, se.Code)
		assert.False(t, se.Remote, "the client closes")
		require.ErrorAs(t, context.Cause(p.server.Context()), &se)
		assert.Equal(t, wire.NoError, se.Code)
		assert.True(t, se.Remote)
	})
}

// TestCloseWithErrorBothEnds: the peer sees the code and reason, and
// both Contexts carry the *SessionError.
func TestCloseWithErrorBothEnds(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		p := connect(t, nil, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, p.client.CloseWithError(wire.Unauthorized, "token expired"))
		waitDone(t, ctx, p.server.Context().Done(), "server session")
		var se *SessionError
		require.ErrorAs(t, context.Cause(p.server.Context()), &se)
		assert.Equal(t, wire.Unauthorized, se.Code)
		assert.Equal(t, "token expired", se.Reason)
		assert.True(t, se.Remote)
		require.ErrorAs(t, context.Cause(p.client.Context()), &se)
		assert.False(t, se.Remote)
		_, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		assert.ErrorAs(t, err, &se)
	})
}
