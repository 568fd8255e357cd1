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

// Requests end to end, as integration_test.go runs them over loopback, over both
// Pipes in synctest bubbles: what they check is the session's, not the
// transport's.

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
