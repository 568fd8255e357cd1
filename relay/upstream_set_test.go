package relay

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// peerSet is an UpstreamSet as a cluster's: it gives the request of peer
// (another node's session) no upstream, so that requests do not loop, and
// everyone else's origin.
type peerSet struct {
	peer, origin func() *moqt.Session
}

func (p *peerSet) Session(context.Context, wire.Namespace) (*moqt.Session, error) { return nil, nil }

func (p *peerSet) Sessions(ctx context.Context, _ wire.Namespace) ([]*moqt.Session, error) {
	if RequestSession(ctx) == p.peer() {
		return nil, nil
	}
	return []*moqt.Session{p.origin()}, nil
}

// A SUBSCRIBE that joins one in flight for another requester, whose search
// was narrower (a cluster peer's, which asks only the sessions connected
// to the relay), is routed again with its own when that search finds no
// publisher. Before, it got the other's DOES_NOT_EXIST, though its own
// upstreams had the track (§7.5: every matching publisher).
func TestSubscribeJoiningNarrowerSearchRoutesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n *node
		set := &peerSet{
			peer:   func() *moqt.Session { return n.session("/peer") },
			origin: func() *moqt.Session { return n.session("/origin") },
		}
		n = startNode(t, "moqt", Config{Upstream: set}, nil)
		local := n.newPublisher("/local", testTrack, nil)
		n.announce(local, testTrack.Namespace)
		local.setRefuse(wire.ReqDoesNotExist)
		hold := local.setHold()
		origin := n.newPublisher("/origin", testTrack, nil)
		peer, _ := n.dial("/peer", nil)
		client, _ := n.dial("/client", nil)

		peerErr, clientErr := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := subscribe(t, peer, testTrack, wire.Params{})
			peerErr <- err
		}()
		synctest.Wait() // the peer's search asked the local publisher, which holds its answer
		require.Len(t, local.subscribes(), 1)
		go func() {
			_, err := subscribe(t, client, testTrack, wire.Params{})
			clientErr <- err
		}()
		synctest.Wait() // the client's SUBSCRIBE waits on the peer's search
		close(hold)

		var re *moqt.RequestError
		require.True(t, errors.As(<-peerErr, &re), "the peer is refused")
		assert.Equal(t, wire.ReqDoesNotExist, re.Code)
		require.NoError(t, <-clientErr, "the client finds the track at its upstream")
		assert.Len(t, origin.subscribes(), 1)
	})
}
