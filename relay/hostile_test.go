package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/moqttest"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// hostilePeer is a MoQT client, over raw QUIC or WebTransport, that
// completes SETUP and then misbehaves when the relay subscribes to it.
type hostilePeer struct {
	conn transport.Conn
}

func dialHostile(t *testing.T, n *node, path string) *hostilePeer {
	t.Helper()
	conn, server := moqttest.RawPeer(t, n.pipeConfig(), path, n.cfg)
	n.arrive(path, server)
	return &hostilePeer{conn: conn}
}

// awaitSubscribe returns the request stream of the relay's SUBSCRIBE.
func (h *hostilePeer) awaitSubscribe(t *testing.T) transport.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.conn.AcceptStream(ctx)
	require.NoError(t, err)
	typ, _, err := wire.NewMessageReader(s).ReadFrame()
	require.NoError(t, err)
	require.Equal(t, wire.MsgSubscribe, typ)
	return s
}

// closedWith waits for the relay to close the connection and returns the
// code.
func (h *hostilePeer) closedWith(t *testing.T) uint64 {
	t.Helper()
	select {
	case <-h.conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not close the hostile session")
	}
	var ce *transport.CloseError
	require.True(t, errors.As(context.Cause(h.conn.Context()), &ce), "closed by %v", context.Cause(h.conn.Context()))
	return ce.Code
}

func TestC065_HostileUpstreamKillsOnlyItsSession(t *testing.T) {
	for _, variant := range []string{"control message", "object"} {
		t.Run(variant, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) { testC065(t, scheme, variant) })
		})
	}
}

func testC065(t *testing.T, scheme, variant string) {
	n := startNode(t, scheme, Config{}, nil)
	good := n.newPublisher("/good", testTrack, nil)
	n.announce(good, wire.NewNamespace("live"))
	c, _ := n.dial("/sub", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{})
	require.NoError(t, err)

	h := dialHostile(t, n, "/hostile")
	n.relay.reg.addAnnouncer(n.session("/hostile"), wire.NewNamespace("live"))
	rs := h.awaitSubscribe(t)
	switch variant {
	case "control message":
		require.False(t, wire.MessageType(0x3f).Known())
		_, err = rs.Write([]byte{0x3f, 0, 0}) // an unknown message type, empty (§9)
		require.NoError(t, err)
	case "object":
		ok, err := wire.AppendMessage(wire.Versions[0], nil, &wire.SubscribeOK{TrackAlias: 99})
		require.NoError(t, err)
		_, err = rs.Write(ok)
		require.NoError(t, err)
		ds, err := h.conn.OpenUniStream()
		require.NoError(t, err)
		// SUBGROUP_ID_MODE 0b11 is reserved: PROTOCOL_VIOLATION (§11.3.1).
		_, err = ds.Write([]byte{0x16, 99, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'})
		require.NoError(t, err)
	}
	assert.Equal(t, uint64(wire.ProtocolViolation), h.closedWith(t), "PROTOCOL_VIOLATION")

	// Nothing reached the other sessions: the subscription goes on,
	// fed by the good publisher.
	writeGroup(t, good.track, 0, 2)
	objs, err := readSubgroup(t, sub)
	require.NoError(t, err)
	assert.Len(t, objs, 2)
	assert.NoError(t, c.Context().Err(), "the subscriber's session is up")
	assert.NoError(t, good.client.Context().Err(), "the good publisher's session is up")
	select {
	case <-sub.Done():
		t.Fatalf("subscription ended: %v", sub.Err())
	default:
	}
}

// TestSessionTrackBound: one subscriber inventing track names under an
// announced namespace makes the relay open at most MaxSessionTracks
// upstream subscriptions; past it, EXCESSIVE_LOAD. Tracks others opened do
// not count, and the session's end gives its places back.
func TestSessionTrackBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{MaxSessionTracks: 3, Linger: time.Minute}, nil)
		var upstreamSubs atomic.Int32
		_, pubServer := n.dial("/pub", anyTrack(&upstreamSubs))
		n.relay.reg.addAnnouncer(pubServer, wire.NewNamespace("live"))
		name := func(i int) wire.FullTrackName {
			return wire.FullTrackName{Namespace: wire.NewNamespace("live"), Name: []byte(fmt.Sprint("t", i))}
		}

		other, _ := n.dial("/other", nil)
		_, err := subscribe(t, other, name(100), wire.Params{})
		require.NoError(t, err)

		hostile, _ := n.dial("/hostile", nil)
		for i := range 3 {
			sub, err := subscribe(t, hostile, name(i), wire.Params{})
			require.NoError(t, err, "track %d", i)
			require.NoError(t, sub.Close()) // the lingering upstream still counts
		}
		_, err = subscribe(t, hostile, name(3), wire.Params{})
		require.Error(t, err)
		assert.Equal(t, wire.ReqExcessiveLoad, requestCode(t, err))
		var re *moqt.RequestError
		require.ErrorAs(t, err, &re)
		assert.NotZero(t, re.RetryInterval, "retry later (§12.3)")
		_, err = subscribe(t, hostile, name(100), wire.Params{})
		assert.NoError(t, err, "a track the relay has costs nothing")
		assert.Equal(t, int32(4), upstreamSubs.Load(), "upstream subscriptions opened")

		require.NoError(t, hostile.Close())
		again, _ := n.dial("/again", nil)
		for i := 3; i < 6; i++ {
			_, err := subscribe(t, again, name(i), wire.Params{})
			assert.NoError(t, err, "a new session's places, track %d", i)
		}
	})
}

// anyTrack is a publisher accepting every SUBSCRIBE, with a track of its
// own for each, counting them in n.
func anyTrack(n *atomic.Int32) moqt.Handler {
	return moqt.HandlerFunc(func(r moqt.Request) {
		sr, ok := r.(*moqt.SubscribeRequest)
		if !ok {
			moqt.DefaultHandler.ServeMOQT(r)
			return
		}
		n.Add(1)
		tr, err := moqt.NewLocalTrack(sr.Track, nil)
		if err == nil {
			_, _ = tr.Accept(sr, moqt.AcceptOptions{})
		}
	})
}

// TestSessionTrackBoundSparesUpstreams: the SUBSCRIBEs an upstream relay
// sends over the session this relay dialed are not bounded by
// MaxSessionTracks: they carry the upstream's many subscribers.
func TestSessionTrackBoundSparesUpstreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := startNode(t, "moqt", Config{}, nil)
		up := newLateUpstream()
		edge := startNode(t, "moqt", Config{Upstream: up, MaxSessionTracks: 1}, nil)
		up.bind(t, origin, "/edge", edge.relay)
		var subs atomic.Int32
		pc, _ := edge.dial("/pub", anyTrack(&subs))
		announceNS(t, pc, wire.NewNamespace("live"))
		settled(t, "announced at the origin", func() bool { return origin.relay.localAnnouncers(wire.NewNamespace("live")) == 1 })
		c, _ := origin.dial("/viewer", nil)
		for i := range 3 {
			_, err := subscribe(t, c, wire.FullTrackName{Namespace: wire.NewNamespace("live"), Name: []byte(fmt.Sprint("t", i))}, wire.Params{})
			assert.NoError(t, err, "track %d through the edge", i)
		}
		assert.Equal(t, int32(3), subs.Load())
	})
}

// TestUpstreamStreamsMissingEndTrackWithError: a publisher whose
// PUBLISH_DONE counts data streams that never reach the relay ends the track
// downstream with INTERNAL_ERROR, saying so: passed on as TRACK_ENDED, its
// subscribers, whose Stream Count is what the relay sent, would not know
// the track lacks them. With the count right it ends as the publisher said.
func TestUpstreamStreamsMissingEndTrackWithError(t *testing.T) {
	for _, count := range []uint64{1, 2} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, nil)
				h := dialHostile(t, n, "/pub")
				n.relay.reg.addAnnouncer(n.session("/pub"), wire.NewNamespace("live"))
				c, _ := n.dial("/sub", nil)
				res := asyncSubscribe(t, c, testTrack, wire.Params{})
				moqttest.AnswerRawSubscribe(t, h.conn, h.awaitSubscribe(t), count)

				r := <-res
				require.NoError(t, r.err)
				if count == 1 {
					assert.Equal(t, wire.DoneTrackEnded, doneCode(t, r.sub))
					return
				}
				assert.Equal(t, wire.DoneInternalError, doneCode(t, r.sub))
				var de *moqt.DoneError
				require.ErrorAs(t, r.sub.Err(), &de)
				assert.Contains(t, de.Reason, "1 of the publisher's 2 data streams never reached the relay")
			})
		})
	}
}
