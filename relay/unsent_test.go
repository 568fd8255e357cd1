package relay

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Upstream subgroup streams that end before the relay forwarded any object
// of them: the relay tells its subscribers of the subgroup with a
// header-only stream reset with RESET_STREAM_AT (§11.3.2), unless another
// publisher's stream feeds it.

// reliableSubscription is liveSubscription over raw-QUIC pipes with
// RESET_STREAM_AT on both sides of the relay.
func reliableSubscription(t *testing.T) (*node, *publisher, *moqt.Subscription) {
	t.Helper()
	return unsentSubscription(t, "moqt")
}

// unsentSubscription is liveSubscription over pipes of scheme: raw QUIC
// with RESET_STREAM_AT on both sides of the relay, or WebTransport, which
// has none.
func unsentSubscription(t *testing.T, scheme string) (*node, *publisher, *moqt.Subscription) {
	t.Helper()
	n := startNode(t, scheme, Config{}, nil)
	n.reliable = scheme == "moqt"
	pub := n.newPublisher("/pub", testTrack, nil)
	n.announce(pub, wire.NewNamespace("live"))
	c, _ := n.dial("/sub", nil)
	sub, err := subscribe(t, c, testTrack, wire.Params{})
	require.NoError(t, err)
	return n, pub, sub
}

// beginPartial starts object 0 of subgroup 0 of group g on tr and writes
// part of its payload, which the relay then reads.
func beginPartial(t *testing.T, tr *moqt.LocalTrack, g uint64) *moqt.SubgroupWriter {
	t.Helper()
	w := tr.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
	ow, err := w.BeginObject(0, 100, nil)
	require.NoError(t, err)
	_, err = ow.Write([]byte("part"))
	require.NoError(t, err)
	synctest.Wait()
	return w
}

// readUntilDone returns the objects and Incomplete entries ReadObject yields
// until the subscription ends, and its end.
func readUntilDone(t *testing.T, sub *moqt.Subscription) (objs, incomplete []moqt.Object, done *moqt.DoneError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		o, err := sub.ReadObject(ctx)
		if err != nil {
			require.ErrorAs(t, err, &done)
			return objs, incomplete, done
		}
		if o.Incomplete != nil {
			incomplete = append(incomplete, o)
			continue
		}
		o.Payload = append([]byte(nil), o.Payload...)
		objs = append(objs, o)
	}
}

// requireUnsent checks an Incomplete entry for subgroup 0 of group g,
// reset with code.
func requireUnsent(t *testing.T, o moqt.Object, g uint64, code wire.ResetCode) {
	t.Helper()
	assert.Equal(t, g, o.Location.Group)
	assert.Zero(t, o.SubgroupID)
	var se *moqt.StreamError
	require.ErrorAs(t, o.Incomplete, &se)
	assert.Equal(t, code, se.Code)
}

// TestUnsentUpstreamTold: an upstream stream that ends inside its first
// object reaches the subscriber as the subgroup's header and a reset: with
// the upstream's code when it was reset, INTERNAL_ERROR when the
// publisher's session ended (abruptly: Close would end the subscription
// GOING_AWAY first). PUBLISH_DONE counts that stream. Before, the group
// went missing without a word, and a track could end TRACK_ENDED. Over
// WebTransport, without RESET_STREAM_AT, the reset comes after cutLinger,
// once the subscriber has read the header; before, such a subscriber was
// told nothing.
func TestUnsentUpstreamTold(t *testing.T) {
	cases := []struct {
		name    string
		end     func(t *testing.T, pub *publisher, w *moqt.SubgroupWriter)
		code    wire.ResetCode
		done    wire.PublishDoneCode
		objects int
	}{
		{"reset", func(t *testing.T, pub *publisher, w *moqt.SubgroupWriter) {
			w.Reset(wire.ResetDeliveryTimeout)
			writeGroup(t, pub.track, 2, 1)
			synctest.Wait()
			pub.track.End(wire.DoneTrackEnded, "")
		}, wire.ResetDeliveryTimeout, wire.DoneTrackEnded, 2},
		{"publisher gone", func(t *testing.T, pub *publisher, _ *moqt.SubgroupWriter) {
			require.NoError(t, pub.client.CloseWithError(wire.NoError, "gone"))
		}, wire.ResetInternalError, wire.DoneInternalError, 1},
	}
	for _, scheme := range []string{"moqt", "https"} {
		for _, c := range cases {
			t.Run(scheme+"/"+c.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					_, pub, sub := unsentSubscription(t, scheme)
					writeGroup(t, pub.track, 0, 1)
					c.end(t, pub, beginPartial(t, pub.track, 1))
					objs, incomplete, done := readUntilDone(t, sub)
					assert.Equal(t, c.done, done.Code)
					require.Len(t, objs, c.objects)
					require.Len(t, incomplete, 1, "group 1 is told of")
					requireUnsent(t, incomplete[0], 1, c.code)
					assert.Equal(t, uint64(c.objects+1), done.StreamCount)
				})
			})
		}
	}
}

// TestUnsentUpstreamHeaderOnlyPassedOn: an upstream header-only stream
// (a publisher's CloseIncomplete of a subgroup it will not deliver) is
// passed on as one, with its code.
func TestUnsentUpstreamHeaderOnlyPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, pub, sub := reliableSubscription(t)
		pub.track.OpenSubgroup(4, 0, moqt.SubgroupOptions{}).CloseIncomplete(wire.ResetCancelled)
		synctest.Wait()
		pub.track.End(wire.DoneTrackEnded, "")
		objs, incomplete, done := readUntilDone(t, sub)
		assert.Empty(t, objs)
		require.Len(t, incomplete, 1)
		requireUnsent(t, incomplete[0], 4, wire.ResetCancelled)
		assert.Equal(t, uint64(1), done.StreamCount)
	})
}

// TestUnsentUpstreamOthersFeed: a's stream, reset inside its first object,
// tells nothing while b's stream of the subgroup feeds it, nor once b's
// has delivered it: the subscriber gets b's objects and its FIN.
func TestUnsentUpstreamOthersFeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		n.reliable = true
		a, b, _, sub := n.twoPublishers(t)
		write := func(w *moqt.SubgroupWriter, g uint64, ids ...uint64) {
			for _, id := range ids {
				require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: id}, Payload: payload(g, id)}))
			}
		}
		// Group 1: b's stream is open when a's is reset.
		wb := b.track.OpenSubgroup(1, 0, moqt.SubgroupOptions{})
		write(wb, 1, 0)
		synctest.Wait()
		beginPartial(t, a.track, 1).Reset(wire.ResetCancelled)
		synctest.Wait()
		write(wb, 1, 1)
		require.NoError(t, wb.Close())
		// Group 2: b's stream has ended when a's is reset.
		wb = b.track.OpenSubgroup(2, 0, moqt.SubgroupOptions{})
		write(wb, 2, 0)
		require.NoError(t, wb.Close())
		synctest.Wait()
		beginPartial(t, a.track, 2).Reset(wire.ResetCancelled)
		synctest.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var got []wire.Location
		for {
			o, err := sub.ReadObject(ctx)
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			require.NoError(t, err)
			require.NoError(t, o.Incomplete, "no subgroup is incomplete")
			got = append(got, o.Location)
		}
		assert.ElementsMatch(t, []wire.Location{{Group: 1}, {Group: 1, Object: 1}, {Group: 2}}, got)
	})
}

// TestStreamedObjectCutUpstream: an upstream stream reset, or lost with
// its publisher, inside an object the relay streams through (one larger
// than its MaxObjectSize), after objects of it were forwarded, ends the
// downstream stream with the upstream's code, INTERNAL_ERROR for a
// publisher gone, as for an object read whole. It was CANCELLED, the code
// of a subgroup that goes on elsewhere: a publisher killed mid-object
// reached the subscribers so.
func TestStreamedObjectCutUpstream(t *testing.T) {
	cases := []struct {
		name string
		end  func(t *testing.T, pub *publisher, w *moqt.SubgroupWriter)
		code wire.ResetCode
	}{
		{"reset", func(t *testing.T, pub *publisher, w *moqt.SubgroupWriter) {
			w.Reset(wire.ResetDeliveryTimeout)
			synctest.Wait()
			pub.track.End(wire.DoneTrackEnded, "")
		}, wire.ResetDeliveryTimeout},
		{"publisher gone", func(t *testing.T, pub *publisher, _ *moqt.SubgroupWriter) {
			require.NoError(t, pub.client.CloseWithError(wire.NoError, "gone"))
		}, wire.ResetInternalError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := startNode(t, "moqt", Config{}, &moqt.Config{MaxObjectSize: 4096})
				pub := n.newPublisher("/pub", testTrack, nil)
				n.announce(pub, wire.NewNamespace("live"))
				cl, _ := n.dial("/sub", nil)
				sub, err := subscribe(t, cl, testTrack, wire.Params{})
				require.NoError(t, err)
				w := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
				require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 0, Object: 0}, Payload: payload(0, 0)}))
				ow, err := w.BeginObject(1, 64<<10, nil)
				require.NoError(t, err)
				_, err = ow.Write(make([]byte, 16<<10))
				require.NoError(t, err)
				synctest.Wait()
				c.end(t, pub, w)
				objs, incomplete, _ := readUntilDone(t, sub)
				require.Len(t, objs, 1, "the object before")
				require.Len(t, incomplete, 1, "the subgroup is told of")
				requireUnsent(t, incomplete[0], 0, c.code)
			})
		})
	}
}
