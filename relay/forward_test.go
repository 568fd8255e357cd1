package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// props builds an Object Properties block.
func props(t *testing.T, kvs ...wire.KeyValue) []byte {
	t.Helper()
	b, err := wire.KVList(kvs).Append(nil)
	require.NoError(t, err)
	return b
}

// stream is one downstream subgroup stream as the subscriber read it.
type stream struct {
	hdr  wire.SubgroupHeader
	objs []moqt.Object
	err  error // io.EOF for a FIN
}

// readStream reads one subgroup stream of sub to its end or reset.
func readStream(t *testing.T, sub *moqt.Subscription) stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := sub.AcceptSubgroup(ctx)
	require.NoError(t, err)
	st := stream{hdr: r.Header()}
	for {
		o, err := r.ReadObject(nil)
		if err != nil {
			st.err = err
			return st
		}
		o.Properties = append([]byte(nil), o.Properties...)
		st.objs = append(st.objs, o)
	}
}

func TestC049_C067_C068_C069_ObjectsForwardedUnmodified(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		// MaxObjectSize small on the relay: large payloads are streamed
		// through rather than read whole.
		n := startNode(t, scheme, Config{}, &moqt.Config{MaxObjectSize: 4096})
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)

		big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16) // 64 KiB, past MaxObjectSize
		binary := []byte{0, 0xff, 0x80, 0x7f, 0}
		sent := []moqt.Object{
			{Location: wire.Location{Group: 7, Object: 0}, SubgroupID: 3, Priority: wire.Some[uint8](9), Payload: binary,
				Properties: props(t, wire.KeyValue{Type: 0x40, Value: 1})},
			{Location: wire.Location{Group: 7, Object: 1}, SubgroupID: 3, Priority: wire.Some[uint8](9), Payload: big},
			{Location: wire.Location{Group: 7, Object: 2}, SubgroupID: 3, Priority: wire.Some[uint8](9), Payload: []byte{}},
			{Location: wire.Location{Group: 7, Object: 5}, SubgroupID: 3, Priority: wire.Some[uint8](9), Payload: []byte("after a gap"),
				Properties: props(t, wire.KeyValue{Type: 0x41, Bytes: []byte("p")})},
			{Location: wire.Location{Group: 7, Object: 6}, SubgroupID: 3, Priority: wire.Some[uint8](9), Status: wire.ObjectEndOfGroup},
		}
		w := pub.track.OpenSubgroup(7, 3, moqt.SubgroupOptions{Priority: wire.Some[uint8](9), Properties: true, EndOfGroup: true})
		for _, o := range sent {
			require.NoError(t, w.WriteObject(o))
		}
		require.NoError(t, w.Close())

		st := readStream(t, sub)
		assert.Equal(t, io.EOF, st.err, "the upstream FIN is a FIN downstream")
		assert.Equal(t, uint64(7), st.hdr.GroupID)
		assert.Equal(t, uint64(3), st.hdr.SubgroupID)
		assert.Equal(t, uint8(9), st.hdr.Priority)
		assert.False(t, st.hdr.DefaultPriority)
		assert.True(t, st.hdr.HasProperties)
		assert.True(t, st.hdr.EndOfGroup)
		assert.True(t, st.hdr.FirstObject, "the relay saw the subgroup from its first object")
		require.Len(t, st.objs, len(sent), "one stream, nothing dropped")
		for i, o := range st.objs {
			want := sent[i]
			assert.Equal(t, want.Location, o.Location, "order")
			assert.Equal(t, want.SubgroupID, o.SubgroupID)
			assert.Equal(t, want.Priority, o.Priority)
			assert.Equal(t, want.Status, o.Status)
			assert.Equal(t, len(want.Payload), len(o.Payload))
			assert.True(t, bytes.Equal(want.Payload, o.Payload), "payload %d unmodified", i)
			if len(want.Properties) > 0 {
				assert.Equal(t, want.Properties, o.Properties, "properties %d", i)
			}
		}
	})
}

func TestDatagramsForwarded(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		_, pub, _, sub := liveSubscription(t, scheme)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Datagrams may be lost: send until one arrives.
		got := make(chan moqt.Object, 1)
		go func() {
			o, err := sub.ReadDatagram(ctx)
			if err == nil {
				got <- o
			}
		}()
		for i := uint64(0); ; i++ {
			require.NoError(t, pub.track.WriteDatagram(moqt.Object{Location: wire.Location{Group: i, Object: 0}, Payload: []byte("dg")}))
			select {
			case o := <-got:
				assert.Equal(t, []byte("dg"), o.Payload)
				assert.True(t, o.Datagram)
				return
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
				t.Fatal("no datagram came through")
			}
		}
	})
}

func TestC066_AllTrackPropertiesForwarded(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		tp := wire.KVList{
			{Type: wire.PropMaxCacheDuration, Value: 60_000},
			{Type: wire.PropDefaultPublisherPriority, Value: 7},
			{Type: 0x1234, Value: 42},                    // unknown, not mandatory: forwarded too
			{Type: 0x1235, Bytes: []byte("opaque prop")}, // odd: bytes
		}
		pub := n.newPublisher("/pub", testTrack, tp)
		n.announce(pub, wire.NewNamespace("live"))
		c, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, c, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.ElementsMatch(t, tp, sub.Properties(), "SUBSCRIBE_OK")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ts, err := c.TrackStatus(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.ElementsMatch(t, tp, ts.Properties, "TRACK_STATUS_OK")
	})
}

func TestC048_C072_LargestObjectIsTheMaximum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, wire.NewNamespace("live"))
		pub.track.SetLargest(wire.Location{Group: 3, Object: 4}) // published before the relay came
		c1, _ := n.dial("/sub1", nil)
		s1, err := subscribe(t, c1, testTrack, wire.Params{})
		require.NoError(t, err)
		l, ok := s1.Largest()
		require.True(t, ok, "the upstream's LARGEST_OBJECT is reported")
		assert.Equal(t, wire.Location{Group: 3, Object: 4}, l)

		writeGroup(t, pub.track, 4, 2)
		_, err = readSubgroup(t, s1)
		require.NoError(t, err)
		c2, _ := n.dial("/sub2", nil)
		s2, err := subscribe(t, c2, testTrack, wire.Params{})
		require.NoError(t, err)
		l, ok = s2.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 4, Object: 1}, l, "objects received upstream count")

		// An upstream REQUEST_UPDATE_OK reports a larger one.
		pub.track.SetLargest(wire.Location{Group: 9, Object: 0})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, s1.Update(ctx, wire.Params{Forward: wire.Some(false)}))
		require.NoError(t, s2.Update(ctx, wire.Params{Forward: wire.Some(false)}))
		settled(t, "REQUEST_UPDATE_OK's LARGEST_OBJECT reported", func() bool {
			ts, err := c2.TrackStatus(ctx, testTrack, wire.Params{})
			return err == nil && ts.Largest == wire.Some(wire.Location{Group: 9, Object: 0})
		})
	})
}

// readAll reads sub's objects in arrival order until want of them came,
// keyed by Location.
func readAll(t *testing.T, sub *moqt.Subscription, want int) []moqt.Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []moqt.Object
	for len(out) < want {
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		if o.Incomplete != nil {
			continue // a stream the relay replaced
		}
		o.Payload = append([]byte(nil), o.Payload...)
		out = append(out, o)
	}
	return out
}

func TestC044_ObjectsOfSeveralPublishersDeduplicated(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		a, b, _, sub := n.twoPublishers(t)
		// Both publish group 0; a also group 1 and b group 2.
		writeGroup(t, a.track, 0, 4)
		writeGroup(t, b.track, 0, 4)
		writeGroup(t, a.track, 1, 3)
		writeGroup(t, b.track, 2, 3)
		got := readAll(t, sub, 10)
		seen := map[wire.Location]int{}
		for _, o := range got {
			seen[o.Location]++
			assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
		}
		for g, cnt := range map[uint64]int{0: 4, 1: 3, 2: 3} {
			for i := range cnt {
				assert.Equal(t, 1, seen[wire.Location{Group: g, Object: uint64(i)}], "object %d/%d once", g, i)
			}
		}
		// Nothing more: a duplicate would show as an eleventh object.
		for _, o := range readFor(t, sub, 300*time.Millisecond) {
			t.Errorf("unexpected object %v", o.Location)
		}
	})
}

// readFor returns the objects sub gets within d, stream resets skipped.
func readFor(t *testing.T, sub *moqt.Subscription, d time.Duration) []moqt.Object {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out []moqt.Object
	for {
		o, err := sub.ReadObject(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return out
		}
		require.NoError(t, err)
		if o.Incomplete != nil {
			continue
		}
		o.Payload = append([]byte(nil), o.Payload...)
		out = append(out, o)
	}
}

// writeObjects writes objects ids of group 0 to w, payloads as payload's.
func writeObjects(t *testing.T, w *moqt.SubgroupWriter, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: id}, Payload: payload(0, id)}))
	}
}

func TestC075_C076_NewDownstreamStreamWhenNextObjectUnproven(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		a, b, _, sub := n.twoPublishers(t)
		// a: objects 0 and 2 of subgroup 0 (1 does not exist; a's stream
		// proves it) and stays open.
		wa := a.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
		defer wa.Reset(wire.ResetCancelled)
		for _, id := range []uint64{0, 2} {
			require.NoError(t, wa.WriteObject(moqt.Object{Location: wire.Location{Object: id}, Payload: payload(0, id)}))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r1, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		for _, id := range []uint64{0, 2} {
			o, err := r1.ReadObject(nil)
			require.NoError(t, err)
			assert.Equal(t, id, o.Location.Object, "the gap proven by one upstream stream keeps the stream")
		}
		// b: a stream of the same subgroup starting at 5. Nothing proves that
		// 3 and 4 do not exist: a new downstream stream.
		wb := b.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{Joined: true}) // b too joined late
		require.NoError(t, wb.WriteObject(moqt.Object{Location: wire.Location{Object: 5}, Payload: payload(0, 5)}))
		require.NoError(t, wb.Close())
		_, err = r1.ReadObject(nil)
		var se *moqt.StreamError
		require.ErrorAs(t, err, &se, "the first stream is reset, not continued")
		r2, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		o, err := r2.ReadObject(nil)
		require.NoError(t, err)
		assert.Equal(t, uint64(5), o.Location.Object)
		assert.False(t, r2.Header().FirstObject, "a stream that joined mid-subgroup is no first one")
	})
}

func TestUpstreamResetPassedOnWithItsCode(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		_, pub, _, sub := liveSubscription(t, scheme)
		w := pub.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: 0}, Payload: []byte("x")}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		_, err = r.ReadObject(nil)
		require.NoError(t, err)
		w.Reset(wire.ResetDeliveryTimeout)
		_, err = r.ReadObject(nil)
		var se *moqt.StreamError
		require.ErrorAs(t, err, &se, "a reset, not a FIN")
		assert.Equal(t, wire.ResetDeliveryTimeout, se.Code)
	})
}

// TestDedupKeepsObjectsOnlyTheSlowerPublisherSent: b's stream joins the
// subgroup ahead of a's; the objects in between, which only a sends, are
// forwarded all the same, none twice.
func TestDedupKeepsObjectsOnlyTheSlowerPublisherSent(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		a, b, _, sub := n.twoPublishers(t)
		write := func(w *moqt.SubgroupWriter, ids ...uint64) { writeObjects(t, w, ids...) }
		seen := map[uint64]int{}
		read := func(want int) {
			for _, o := range readAll(t, sub, want) {
				seen[o.Location.Object]++
				assert.Equal(t, payload(0, o.Location.Object), o.Payload)
			}
		}
		wa := a.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
		write(wa, 0, 1, 2)
		read(3)
		wb := b.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{Joined: true})
		write(wb, 5, 6)
		synctest.Wait() // b's 5 reaches the relay first
		write(wa, 3, 4, 5, 6, 7)
		require.NoError(t, wa.Close())
		write(wb, 7)
		require.NoError(t, wb.Close())
		// Then everything that comes within a second: 3, 4 and 7, once.
		for _, o := range readFor(t, sub, time.Second) {
			seen[o.Location.Object]++
		}
		for id := range uint64(8) {
			assert.Equal(t, 1, seen[id], "object %d once", id)
		}
	})
}

// TestFinOfOnePublisherKeepsTheOthersStream: once b's stream, ahead, feeds
// the subgroup, a's FIN (behind it) does not reset the downstream stream.
func TestFinOfOnePublisherKeepsTheOthersStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{}, nil)
		a, b, _, sub := n.twoPublishers(t)
		write := func(w *moqt.SubgroupWriter, ids ...uint64) { writeObjects(t, w, ids...) }
		wa := a.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
		write(wa, 0, 1, 2)
		readAll(t, sub, 3)
		wb := b.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{Joined: true})
		write(wb, 5) // a never sends 3 and 4: after catchUpWait, b's stream feeds
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// next reads one object or stream reset: its Object ID, or reset.
		next := func() (id uint64, reset bool) {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			var se *moqt.StreamError
			if errors.As(o.Incomplete, &se) {
				return 0, true
			}
			require.Nil(t, o.Incomplete)
			return o.Location.Object, false
		}
		// Object 5, and the reset of the stream it replaced, in either order.
		resets, five := 0, false
		for resets == 0 || !five {
			id, reset := next()
			resets += btoi(reset)
			five = five || (!reset && id == 5)
		}
		require.NoError(t, wa.Close())
		synctest.Wait() // a's FIN reaches the relay first
		write(wb, 6, 7)
		require.NoError(t, wb.Close())
		resets = 0
		var got []uint64
		for len(got) < 2 {
			if id, reset := next(); reset {
				resets++
			} else {
				got = append(got, id)
			}
		}
		assert.Equal(t, []uint64{6, 7}, got)
		assert.Zero(t, resets, "a's FIN does not reset the stream b feeds")
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestC019_C020_ColdMidSubgroupJoin: a subscriber that joins through a
// cold relay mid-subgroup gets every object from its Start Location, and
// the subgroup's end as the publisher gave it. The relay's upstream
// subscription starts at the Next Object, so the publisher ends that
// stream with a FIN, End of Group object or not (§11.3.2: the objects
// before the subscription's start are excepted), and the relay ends the
// downstream stream with a FIN for a subscriber that starts after them
// (C019), and resets it for one whose Location filter covers them (C020).
// Before, the upstream subscription was unfiltered and covered them, so
// the publisher reset the stream, and without an End of Group the relay
// passed the reset on though nothing the subscriber wanted was missing.
func TestC019_C020_ColdMidSubgroupJoin(t *testing.T) {
	cases := []struct {
		name   string
		filter wire.LocationFilter
		fin    bool
		eog    bool
	}{
		{"next object", wire.NextObjectFilter(), true, true},
		{"absolute start before the join", wire.StartFilter(wire.Location{Group: 5}), false, true},
		{"next object, no End of Group", wire.NextObjectFilter(), true, false},
		{"absolute start before the join, no End of Group", wire.StartFilter(wire.Location{Group: 5}), false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, nil)
				pub := n.newPublisher("/pub", testTrack, nil)
				n.announce(pub, wire.NewNamespace("live"))
				w := pub.track.OpenSubgroup(5, 0, moqt.SubgroupOptions{})
				write := func(id uint64, st wire.ObjectStatus) {
					o := moqt.Object{Location: wire.Location{Group: 5, Object: id}, Status: st}
					if st == wire.ObjectNormal {
						o.Payload = payload(5, id)
					}
					require.NoError(t, w.WriteObject(o))
				}
				write(0, wire.ObjectNormal) // before anyone subscribed
				sess, _ := n.dial("/sub", nil)
				sub, err := subscribe(t, sess, testTrack, wire.Params{LocationFilter: wire.Some(c.filter)})
				require.NoError(t, err)
				for id := uint64(1); id < 4; id++ {
					write(id, wire.ObjectNormal)
				}
				want := 3
				if c.eog {
					write(4, wire.ObjectEndOfGroup)
					want++
				}
				require.NoError(t, w.Close())

				objs, err := readSubgroup(t, sub)
				require.Len(t, objs, want, "objects 1-3, and the End of Group when written")
				for i, o := range objs {
					assert.Equal(t, uint64(i+1), o.Location.Object)
				}
				if c.fin {
					assert.NoError(t, err, "every object from the Start Location came: a FIN")
					// The FIN says nothing of the objects before the
					// relay's start: a FETCH of them goes upstream (this
					// publisher serves none), and they are not called
					// non-existent.
					c2, _ := n.dial("/fetch", nil)
					ctx := fetchCtx(t)
					f, err := c2.Fetch(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(wire.Location{Group: 5}, wire.Location{Group: 5, Object: 3}))})
					require.NoError(t, err)
					got, err := readFetch(ctx, f)
					require.NoError(t, err)
					require.Len(t, got, 4)
					assert.Equal(t, wire.Location{Group: 5}, got[0].Location)
					assert.Equal(t, wire.EndOfUnknownRange, got[0].EndOfRange, "object 0 is unknown to the relay")
					for i, o := range got[1:] {
						assert.Equal(t, wire.Location{Group: 5, Object: uint64(i + 1)}, o.Location)
						assert.Equal(t, payload(5, uint64(i+1)), o.Payload)
					}
					return
				}
				var se *moqt.StreamError
				require.ErrorAs(t, err, &se, "object 0, which the filter covers, never came: a reset")
				assert.Equal(t, wire.ResetCancelled, se.Code)
			})
		})
	}
}
