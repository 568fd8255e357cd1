package moqt

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestPublishOnUpdate: the REQUEST_UPDATEs of a subscriber that accepted
// this end's PUBLISH reach AcceptOptions.OnUpdate before they apply, and
// one it refuses ends the subscription with UPDATE_FAILED (§9.5.1).
func TestPublishOnUpdate(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		accepted := make(chan *Subscription, 1)
		clientCfg := &Config{Handler: HandlerFunc(func(r Request) {
			sub, err := r.(*PublishRequest).Accept(wire.Params{})
			require.NoError(t, err)
			accepted <- sub
		})}
		p := connect(t, nil, clientCfg)
		ctx := testCtx(t, 10*time.Second)
		seen := make(chan wire.Params, 2)
		ss, err := track.Publish(ctx, p.server, wire.Params{}, AcceptOptions{
			OnUpdate: func(_ *ServedSubscription, u *wire.Params) error {
				seen <- *u
				if u.SubscriberPriority.Set {
					return &RequestError{Code: wire.ReqNotSupported, Reason: "priority is fixed"}
				}
				return nil
			},
		})
		require.NoError(t, err)
		sub := <-accepted

		require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(false)}))
		assert.Equal(t, wire.Some(false), (<-seen).Forward)
		assert.False(t, ss.Forward(), "the accepted update applied")

		err = sub.Update(ctx, wire.Params{SubscriberPriority: wire.Some[uint8](9)})
		var re *RequestError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqNotSupported, re.Code)
		assert.Equal(t, wire.Some[uint8](9), (<-seen).SubscriberPriority)
		waitDone(t, ctx, ss.Context().Done(), "the publisher's side of the subscription")
		var de *DoneError
		require.True(t, errors.As(ss.Err(), &de), "ended by PUBLISH_DONE: %v", ss.Err())
		assert.Equal(t, wire.DoneUpdateFailed, de.Code)
		waitDone(t, ctx, sub.Done(), "the subscriber's side")
		require.ErrorAs(t, sub.Err(), &de)
		assert.Equal(t, wire.DoneUpdateFailed, de.Code)
	})
}

// TestPublishExpires: a positive AcceptOptions.Expires is the PUBLISH's
// EXPIRES, in place of the one in params (§9.20.17).
func TestPublishExpires(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		got := make(chan wire.Params, 1)
		clientCfg := &Config{Handler: HandlerFunc(func(r Request) {
			pr := r.(*PublishRequest)
			got <- pr.Params
			_, _ = pr.Accept(wire.Params{})
		})}
		p := connect(t, nil, clientCfg)
		ctx := testCtx(t, 10*time.Second)
		_, err = track.Publish(ctx, p.server, wire.Params{Expires: wire.Some[uint64](60_000)}, AcceptOptions{Expires: 30 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, wire.Some[uint64](30_000), (<-got).Expires)
	})
}
