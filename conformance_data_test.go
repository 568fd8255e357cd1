package moqt

import (
	"bufio"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// These tests put the library on the publisher side, serving a LocalTrack,
// and a fake subscriber that reads the data streams byte by byte: what
// they carry, and whether they end with a FIN or a reset.

// fakeData is a data stream the library opened, as the fake reads it.
type fakeData struct {
	t   *testing.T
	str transport.ReceiveStream
	br  *bufio.Reader
	dec wire.SubgroupDecoder
}

// acceptData accepts the library's next unidirectional stream, which must
// be a subgroup stream, and reads its header. The library's control stream
// must have been accepted already.
func (fp *fakePeer) acceptData() *fakeData {
	fp.t.Helper()
	str, err := fp.conn.AcceptUniStream(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	br := bufio.NewReader(str)
	h, err := wire.ReadStreamHeader(br)
	require.NoError(fp.t, err)
	require.Equal(fp.t, wire.StreamSubgroup, h.Type)
	return &fakeData{t: fp.t, str: str, br: br, dec: wire.SubgroupDecoder{Header: h.Subgroup}}
}

// next reads the next object and its payload.
func (d *fakeData) next() (wire.SubgroupObject, error) {
	o, err := d.dec.Read(d.br, nil)
	if err != nil {
		return o, err
	}
	_, err = io.CopyN(io.Discard, d.br, int64(o.PayloadLength))
	return o, err
}

// expectObjects requires the next objects to have the given Object IDs.
func (d *fakeData) expectObjects(ids ...uint64) {
	d.t.Helper()
	for _, id := range ids {
		o, err := d.next()
		require.NoError(d.t, err)
		require.Equal(d.t, id, o.ObjectID)
	}
}

// expectFIN requires the stream to end here with a FIN.
func (d *fakeData) expectFIN() {
	d.t.Helper()
	o, err := d.next()
	require.ErrorIs(d.t, err, io.EOF, "object %d instead of the FIN", o.ObjectID)
	require.NotErrorIs(d.t, err, wire.ErrTruncated)
}

// expectReset requires the stream to end here with RESET_STREAM code.
func (d *fakeData) expectReset(code wire.ResetCode) {
	d.t.Helper()
	_, err := d.next()
	var se *transport.StreamError
	require.ErrorAs(d.t, err, &se, "the stream was not reset")
	assert.True(d.t, se.Remote)
	assert.Equal(d.t, uint64(code), se.Code, "reset code")
}

// servedTrack serves a new LocalTrack named trackA to a fake subscriber.
func servedTrack(t *testing.T) (*LocalTrack, *fakePeer, chan *ServedSubscription) {
	t.Helper()
	track, cfg, served := newServedTrack(t, trackA, nil)
	_, fp := serverSession(t, cfg)
	return track, fp, served
}

// TestC011_SubscribeOKThenObjects: on a successful SUBSCRIBE the publisher
// answers SUBSCRIBE_OK first, from which the subscriber can work out where
// a filter without an explicit start begins (the Largest Object, §3.1.3,
// §9.20.10), and then sends the objects published from then on inside the
// window, under the alias it named (§9.7). Objects published before the
// SUBSCRIBE are not sent: the live subscription begins with the next.
func TestC011_SubscribeOKThenObjects(t *testing.T) {
	loc := func(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }
	for _, c := range []struct {
		name         string
		filter       func(t testing.TB) wire.LocationFilter
		start, first wire.Location
		// joinsMidSubgroup: objects from the Start Location were
		// published before the SUBSCRIBE, so group 5's stream may be
		// reset (§11.3.2).
		joinsMidSubgroup bool
	}{
		{"next object", func(testing.TB) wire.LocationFilter { return wire.NextObjectFilter() }, loc(5, 2), loc(5, 2), false},
		{"next group", func(testing.TB) wire.LocationFilter { return wire.RelativeFilter(0) }, loc(6, 0), loc(6, 0), false},
		{"current group", func(t testing.TB) wire.LocationFilter { return currentGroupFilter(t, 5) }, loc(5, 0), loc(5, 2), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				track, fp, served := servedTrack(t)
				// Objects published before anyone subscribed.
				w := track.OpenSubgroup(5, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, []byte("old")))
				require.NoError(t, writeObject(w, 1, nil, []byte("old")))

				f := c.filter(t)
				fs := fp.open(subscribeMsg(0, trackA, wire.Params{LocationFilter: wire.Some(f)}))
				ok := expect[*wire.SubscribeOK](fs)
				require.True(t, ok.Parameters.LargestObject.Set, "SUBSCRIBE_OK tells where the track stands")
				largest := filter.LargestAt(ok.Parameters.LargestObject.Value)
				assert.Equal(t, c.start, filter.SubscriptionWindow(f, largest).Start, "start from SUBSCRIBE_OK")
				recvOrFail(t, served)

				require.NoError(t, writeObject(w, 2, nil, []byte("new")))
				w6 := track.OpenSubgroup(6, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w6, 0, nil, []byte("new")))

				// Read before the subgroups end: a stream that lacks covered
				// objects (5/0 and 5/1 for the current group) is reset at its
				// end (§11.3.2), which may discard what was not read.
				d := fp.acceptData()
				assert.Equal(t, ok.TrackAlias, d.dec.Header.TrackAlias)
				o, err := d.next()
				var se *transport.StreamError
				if c.joinsMidSubgroup && errors.As(err, &se) {
					// The stream lacks the objects before the join and may
					// be reset before its first object is read; the next
					// group's then comes first.
					d = fp.acceptData()
					o, err = d.next()
					c.first = loc(6, 0)
				}
				require.NoError(t, err)
				assert.Equal(t, c.first, wire.Location{Group: d.dec.Header.GroupID, Object: o.ObjectID})
				require.NoError(t, w.Close())
				require.NoError(t, w6.Close())
			})
		})
	}
}

// TestC019_AllObjectsDeliveredThenFIN: a subgroup stream that has carried
// every object of its subgroup the subscription gets ends with a FIN
// (§11.3.2): a whole subgroup once it is closed; one the subscription
// joined at its Start Location, without the objects before it; and one
// cut by the end of the Location filter, as soon as an object past the end
// shows it is complete.
func TestC019_AllObjectsDeliveredThenFIN(t *testing.T) {
	loc := func(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }
	for _, c := range []struct {
		name   string
		filter wire.Opt[wire.LocationFilter]
		want   []uint64
		// closeFirst says the stream ends only when the subgroup does.
		closeFirst bool
		// drafts: a filter ending at an Object is 21's alone (18/19
		// §5.1.2 end at a whole group).
		drafts []wire.Version
	}{
		{"whole subgroup", wire.Opt[wire.LocationFilter]{}, []uint64{0, 1, 2, 3}, true, sharedDrafts},
		{"from the start location", wire.Some(wire.StartFilter(loc(1, 2))), []uint64{2, 3}, true, sharedDrafts},
		{"to the end of the filter", wire.Some(wire.RangeFilterToObject(loc(1, 0), loc(1, 1))), []uint64{0, 1}, false, only21},
	} {
		t.Run(c.name, func(t *testing.T) {
			forDrafts(t, c.drafts, func(t *testing.T) {
				track, fp, served := servedTrack(t)
				fs := fp.open(subscribeMsg(0, trackA, wire.Params{LocationFilter: c.filter}))
				expect[*wire.SubscribeOK](fs)
				recvOrFail(t, served)
				w := track.OpenSubgroup(1, 0, SubgroupOptions{})
				for id := uint64(0); id <= 3; id++ {
					require.NoError(t, writeObject(w, id, nil, []byte{byte(id)}))
				}
				if c.closeFirst {
					require.NoError(t, w.Close())
				}
				d := fp.acceptData()
				d.expectObjects(c.want...)
				d.expectFIN()
				require.NoError(t, w.Close())
			})
		})
	}
}

// TestC021_EarlyTerminationResets: a publisher that stops a subgroup
// before its end for another reason, such as handing it to another sender,
// resets its streams with the code it chose (§11.3.2); the objects sent
// before still arrive, and the subgroup takes no more.
func TestC021_EarlyTerminationResets(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		track, fp, served := servedTrack(t)
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		recvOrFail(t, served)
		w := track.OpenSubgroup(1, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("a")))
		require.NoError(t, writeObject(w, 1, nil, []byte("b")))
		d := fp.acceptData()
		d.expectObjects(0, 1)
		w.Reset(wire.ResetGoingAway)
		d.expectReset(wire.ResetGoingAway)
		assert.ErrorIs(t, writeObject(w, 2, nil, []byte("c")), ErrSubgroupClosed)
	})
}
