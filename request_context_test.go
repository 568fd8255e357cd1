package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Every incoming request has a Context: a handler that waits on something
// else (an upstream, a cache) learns from it that the request is over.

// blockingHandler hands the Context of each request in trackA's or
// testTrack's namespace over, waits for it to end, and then leaves the
// request unanswered. The rest go to DefaultHandler.
func blockingHandler() (Handler, <-chan context.Context) {
	ch := make(chan context.Context, 4)
	return HandlerFunc(func(r Request) {
		if ns := r.base().namespace(); !ns.Equal(trackA.Namespace) && !ns.Equal(testTrack.Namespace) {
			DefaultHandler.ServeMOQT(r)
			return
		}
		ch <- r.Context()
		<-r.Context().Done()
	}), ch
}

// requestKindCases are the requests a peer may open that this end serves,
// as a fake peer sends them.
var requestKindCases = []struct {
	name string
	msg  wire.Message
}{
	{"SUBSCRIBE", subscribeMsg(0, trackA, wire.Params{})},
	{"PUBLISH", publishMsg(0, trackA, 1, wire.Params{}, nil)},
	{"TRACK_STATUS", &wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name}},
}

// The peer gives up with a reset alone, or with STOP_SENDING alone, over
// both transports: the handler's Context ends with ErrCancelled, and the
// session stays up.
func TestRequestContextCancelledByPeer(t *testing.T) {
	for _, scheme := range schemes {
		for _, kind := range requestKindCases {
			for _, way := range []string{"reset", "stop_sending"} {
				t.Run(pipeName(scheme)+"/"+kind.name+"/"+way, func(t *testing.T) {
					inBubble(t, func(t *testing.T) {
						h, ctxs := blockingHandler()
						s, fp := serverSessionOver(t, scheme, &Config{Handler: h})
						fs := fp.open(kind.msg)
						ctx := recvOrFail(t, ctxs)
						require.NoError(t, ctx.Err(), "cancelled before the peer gave up")
						if way == "reset" {
							fs.reset(wire.ResetCancelled)
						} else {
							fs.stopSending(wire.ResetCancelled)
						}
						closedOrFail(t, ctx.Done(), "the handler's Context is not cancelled")
						assert.ErrorIs(t, context.Cause(ctx), ErrCancelled)
						fp.alive(2)
						assert.NoError(t, s.Context().Err())
					})
				})
			}
		}
	}
}

// Over a real session between two library ends: a requester that cancels
// (its call's context ends) reaches the handler, blocked on its Context,
// for SUBSCRIBE, PUBLISH and TRACK_STATUS.
func TestRequestContextCancelledByRequester(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h, ctxs := blockingHandler()
		p := connect(t, &Config{Handler: h}, &Config{Handler: h})
		lt, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		for _, kind := range []struct {
			name string
			call func(ctx context.Context) error
		}{
			{"SUBSCRIBE", func(ctx context.Context) error {
				_, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
				return err
			}},
			{"PUBLISH", func(ctx context.Context) error {
				_, err := lt.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
				return err
			}},
			{"TRACK_STATUS", func(ctx context.Context) error {
				_, err := p.client.TrackStatus(ctx, testTrack, wire.Params{})
				return err
			}},
		} {
			// No subtests: t.Run is not allowed in a synctest bubble.
			ctx, cancel := context.WithCancel(t.Context())
			called := goErr(func() error { return kind.call(ctx) })
			reqCtx := recvOrFail(t, ctxs)
			require.NoError(t, reqCtx.Err(), kind.name)
			cancel()
			assert.ErrorIs(t, recvOrFail(t, called), context.Canceled, kind.name)
			closedOrFail(t, reqCtx.Done(), kind.name+": the handler's Context is not cancelled")
			assert.ErrorIs(t, context.Cause(reqCtx), ErrCancelled, kind.name)
		}
		assert.NoError(t, p.client.Context().Err())
		assert.NoError(t, p.server.Context().Err())
	})
}

// The Context also ends when the request does: when it is refused, when
// its subscription ends, when a TRACK_STATUS is answered and its stream
// closed, when the session ends. Until then, a FIN from the requester
// (usual right after TRACK_STATUS) leaves it alone.
func TestRequestContextEndsWithRequest(t *testing.T) {
	type req struct {
		r   Request
		ctx context.Context
	}
	got := make(chan req, 4)
	h := HandlerFunc(func(r Request) {
		got <- req{r, r.Context()}
		<-r.Context().Done()
	})

	t.Run("rejected", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			fs.fin()
			r := recvOrFail(t, got)
			assert.NoError(t, r.ctx.Err(), "a FIN is no cancellation")
			require.NoError(t, r.r.Reject(wire.ReqUnauthorized, "no"))
			closedOrFail(t, r.ctx.Done(), "not cancelled by the refusal")
			var re *RequestError
			require.ErrorAs(t, context.Cause(r.ctx), &re)
			assert.Equal(t, wire.ReqUnauthorized, re.Code)
		})
	})

	t.Run("subscription ended", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			r := recvOrFail(t, got)
			ss, err := acceptLocal(r.r.(*SubscribeRequest), AcceptOptions{})
			require.NoError(t, err)
			expect[*wire.SubscribeOK](fs)
			assert.NoError(t, r.ctx.Err(), "the subscription is live")
			require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
			closedOrFail(t, r.ctx.Done(), "not cancelled by PUBLISH_DONE")
			var de *DoneError
			assert.ErrorAs(t, context.Cause(r.ctx), &de)
		})
	})

	t.Run("publish done", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(publishMsg(0, trackA, 1, wire.Params{}, nil))
			r := recvOrFail(t, got)
			sub, err := r.r.(*PublishRequest).Accept(wire.Params{})
			require.NoError(t, err)
			expect[*wire.RequestOK](fs)
			assert.NoError(t, r.ctx.Err(), "the subscription is live")
			fs.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
			fs.fin()
			closedOrFail(t, sub.Done(), "subscription not ended")
			closedOrFail(t, r.ctx.Done(), "not cancelled once the publisher ended the request")
			assert.ErrorIs(t, context.Cause(r.ctx), errRequestEnded)
		})
	})

	t.Run("track status answered", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
			fs.fin()
			r := recvOrFail(t, got)
			time.Sleep(50 * time.Millisecond) // let the FIN arrive: it must not cancel
			assert.NoError(t, r.ctx.Err(), "a FIN is no cancellation")
			require.NoError(t, r.r.(*TrackStatusRequest).Accept(wire.Opt[wire.Location]{}, nil))
			expect[*wire.RequestOK](fs)
			fs.expectFIN()
			closedOrFail(t, r.ctx.Done(), "not cancelled once the request is over")
			assert.ErrorIs(t, context.Cause(r.ctx), errRequestEnded, "nobody cancelled")
		})
	})

	t.Run("session closed", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := serverSession(t, &Config{Handler: h})
			fp.open(subscribeMsg(0, trackA, wire.Params{}))
			r := recvOrFail(t, got)
			require.NoError(t, s.CloseWithError(wire.NoError, "bye"))
			closedOrFail(t, r.ctx.Done(), "not cancelled by the session's end")
			var se *SessionError
			assert.ErrorAs(t, context.Cause(r.ctx), &se)
		})
	})
}
