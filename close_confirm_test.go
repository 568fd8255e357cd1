package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestCloseReportsUnconfirmedDelivery: Close ends the subscription it
// serves with PUBLISH_DONE and waits for the subscriber to finish its
// request stream, its proof that the data arrived. A subscriber that does
// returns nil at once; one that does not within CloseTimeout gets the
// session closed all the same, and Close says so with ErrCloseTimeout (it
// used to return nil, and a program exited 0 having lost what was in
// flight); a connection lost meanwhile is reported with the session's
// cause; a peer that closes with NO_ERROR chose the end, and a session
// already over has nothing left to wait for.
func TestCloseReportsUnconfirmedDelivery(t *testing.T) {
	const closeTimeout = 5 * time.Second
	for _, tc := range []struct {
		name string
		// peer is what the subscriber does once PUBLISH_DONE came.
		peer func(fp *fakePeer, req *fakeStream)
		// before ends the session before Close, if set.
		before func(fp *fakePeer)
		check  func(t *testing.T, err error, waited time.Duration)
	}{
		{name: "confirmed", peer: func(_ *fakePeer, req *fakeStream) { req.fin() },
			check: func(t *testing.T, err error, waited time.Duration) {
				require.NoError(t, err)
				assert.Less(t, waited, closeTimeout, "Close returns once the peer finished")
			}},
		{name: "not confirmed", peer: func(*fakePeer, *fakeStream) {},
			check: func(t *testing.T, err error, waited time.Duration) {
				require.ErrorIs(t, err, ErrCloseTimeout)
				assert.Contains(t, err.Error(), "1 request(s) not confirmed")
				assert.Equal(t, closeTimeout, waited, "Close gives up after CloseTimeout")
			}},
		{name: "connection lost", peer: func(fp *fakePeer, _ *fakeStream) { fp.conn.(*transport.PipeConn).Lose() },
			check: func(t *testing.T, err error, waited time.Duration) {
				var se *SessionError
				require.ErrorAs(t, err, &se)
				assert.NotNil(t, se.Transport, "the connection's loss: %v", se)
				assert.NotErrorIs(t, err, ErrCloseTimeout)
				assert.Less(t, waited, closeTimeout)
			}},
		{name: "peer closed", peer: func(fp *fakePeer, _ *fakeStream) { fp.closeSession() },
			check: func(t *testing.T, err error, _ time.Duration) {
				assert.NoError(t, err, "the peer's NO_ERROR close is its choice")
			}},
		{name: "already ended", before: func(fp *fakePeer) { fp.conn.(*transport.PipeConn).Lose() },
			check: func(t *testing.T, err error, waited time.Duration) {
				assert.NoError(t, err, "Context's cause tells of a session over before Close")
				assert.Zero(t, waited)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				track, cfg, served := newServedTrack(t, trackA, nil)
				cfg.CloseTimeout = closeTimeout
				s, fp := pipeServerSession(t, transport.PipeConfig{}, cfg)
				req, _, _ := subscribeFake(t, fp, served, wire.Params{})
				w := track.OpenSubgroup(0, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, []byte("sent before Close")))
				require.NoError(t, w.Close())
				if tc.before != nil {
					tc.before(fp)
					<-s.Context().Done()
				}
				start := time.Now()
				closed := make(chan error, 1)
				go func() { closed <- s.Close() }()
				if tc.peer != nil {
					done := expect[*wire.PublishDone](req)
					require.Equal(t, wire.DoneGoingAway, done.StatusCode)
					tc.peer(fp, req)
				}
				err := <-closed
				tc.check(t, err, time.Since(start))
				assert.Error(t, context.Cause(s.Context()), "the session is closed")
			})
		})
	}
}

// TestRefusedFetchFinishedByRequester: a FETCH refused with REQUEST_ERROR
// and FIN is complete (§6.4.2.2), so the requester finishes its direction
// too; the publisher's Close, which waits for the peer to finish every
// request stream it finished, then returns nil at once. The requester
// used to leave its direction open, as no Fetch went to its caller to
// close: a relay's FETCH refused GOING_AWAY by a closing publisher held
// moqt pub's Close for its whole minute (2 runs in 180 of
// TestSubFirstGroupOfBurst beside two CPU-bound loops).
func TestRefusedFetchFinishedByRequester(t *testing.T) {
	const closeTimeout = 5 * time.Second
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				refuse := HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqDoesNotExist, "no such track") })
				p := newPipePair(t, transport.PipeConfig{WebTransport: tr.wt}, nil,
					&Config{Handler: refuse, CloseTimeout: closeTimeout})
				_, err := p.server.Fetch(testCtx(t, closeTimeout), testTrack, wire.Params{})
				var re *RequestError
				require.ErrorAs(t, err, &re)
				assert.Equal(t, wire.ReqDoesNotExist, re.Code)
				start := time.Now()
				require.NoError(t, p.client.Close(), "the requester finished the refused FETCH's stream")
				assert.Less(t, time.Since(start), closeTimeout)
			})
		})
	}
}
