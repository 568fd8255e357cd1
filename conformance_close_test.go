package moqt

import (
	"bufio"
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// These tests watch, from a fake subscriber reading the wire, how the
// library's publisher ends subgroup streams (§11.3.2) and what it reports
// about its track (§9.20.18): the library's own code paths, with nothing
// the test could supply in its place.

// fakeSubscriberTrack serves a new LocalTrack named trackA on a library
// server that a fake subscriber has connected to over a Pipe imitating
// raw QUIC, or WebTransport if wt. Call it inside
// inBubble.
func fakeSubscriberTrack(t *testing.T, wt bool) (*LocalTrack, *fakePeer, chan *ServedSubscription) {
	t.Helper()
	if !wt {
		return servedTrack(t)
	}
	track, cfg, served := newServedTrack(t, trackA, nil)
	_, fp := pipeServerSession(t, transport.PipeConfig{WebTransport: true}, cfg)
	return track, fp, served
}

// subscribeFake subscribes the fake to trackA with params and waits for the
// library to serve it.
func subscribeFake(t *testing.T, fp *fakePeer, served chan *ServedSubscription, params wire.Params) (*fakeStream, *wire.SubscribeOK, *ServedSubscription) {
	t.Helper()
	fs := fp.open(subscribeMsg(0, trackA, params))
	ok := expect[*wire.SubscribeOK](fs)
	return fs, ok, recvOrFail(t, served)
}

// expectResetAfterAny requires the stream to end, from where it is,
// without a FIN: any objects it still carries are read, and then it must
// be reset. A FIN here would tell the subscriber the subgroup is complete.
// The code is the publisher's choice (§11.3.2 names none).
func (d *fakeData) expectResetAfterAny() {
	d.t.Helper()
	for {
		o, err := d.next()
		if err == nil {
			continue
		}
		require.NotErrorIs(d.t, err, io.EOF, "FIN after object %d: the stream claims a complete subgroup", o.ObjectID)
		var se *transport.StreamError
		require.ErrorAs(d.t, err, &se, "the stream was not reset")
		assert.True(d.t, se.Remote)
		return
	}
}

// TestC003_CancelResetsDataStreams: when the subscriber cancels (STOP_SENDING
// and RESET_STREAM on the request stream, §3.1.1), the publisher resets
// every data stream of the subscription that is still open. The fake
// subscriber sees the reset on the data stream itself, even after the
// application closes the subgroup, which would otherwise end it with a FIN.
func TestC003_CancelResetsDataStreams(t *testing.T) {
	for _, tr := range pipeTransports {
		for _, how := range []struct {
			name   string
			cancel func(fs *fakeStream)
		}{
			{"STOP_SENDING", func(fs *fakeStream) { fs.stopSending(wire.ResetCancelled) }},
			{"STOP_SENDING and RESET_STREAM", (*fakeStream).cancel},
		} {
			t.Run(tr.name+"/"+how.name, func(t *testing.T) {
				forDrafts(t, sharedDrafts, func(t *testing.T) {
					testCancelResetsDataStreams(t, tr.wt, how.cancel)
				})
			})
		}
	}
}

// testCancelResetsDataStreams runs TestC003_CancelResetsDataStreams with
// one way of cancelling.
func testCancelResetsDataStreams(t *testing.T, wt bool, cancel func(*fakeStream)) {
	track, fp, served := fakeSubscriberTrack(t, wt)
	fs, _, ss := subscribeFake(t, fp, served, wire.Params{})
	w := track.OpenSubgroup(1, 0, SubgroupOptions{})
	require.NoError(t, writeObject(w, 0, nil, []byte("a")))
	d := fp.acceptData()
	d.expectObjects(0)

	cancel(fs)
	closedOrFail(t, ss.Context().Done(), "publisher did not see the cancellation")
	// The application goes on writing and closes the subgroup;
	// none of it reaches the cancelled subscription, and its
	// stream stays reset.
	require.NoError(t, writeObject(w, 1, nil, []byte("b")))
	require.NoError(t, w.Close())
	d.expectReset(wire.ResetCancelled)
	fp.alive(2)
}

// TestC016_LocalTrackReportsLargestObject: once objects have been
// published on a LocalTrack, the library itself puts LARGEST_OBJECT in
// every answer that carries it (§9.20.18): SUBSCRIBE_OK from
// LocalTrack.Accept, PUBLISH from LocalTrack.Publish, REQUEST_OK to a
// REQUEST_UPDATE after more objects, and TRACK_STATUS's REQUEST_OK from
// LocalTrack.Status. The test only writes objects.
func TestC016_LocalTrackReportsLargestObject(t *testing.T) {
	loc := func(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }
	write := func(t *testing.T, track *LocalTrack, group uint64, ids ...uint64) {
		w := track.OpenSubgroup(group, 0, SubgroupOptions{})
		for _, id := range ids {
			require.NoError(t, writeObject(w, id, nil, []byte("x")))
		}
		require.NoError(t, w.Close())
	}
	t.Run("SUBSCRIBE_OK and REQUEST_OK", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			track, fp, served := servedTrack(t)
			write(t, track, 7, 0, 1, 2, 3)
			fs, ok, _ := subscribeFake(t, fp, served, wire.Params{})
			assert.Equal(t, wire.Some(loc(7, 3)), ok.Parameters.LargestObject)

			write(t, track, 8, 0, 1)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](3)}})
			assert.Equal(t, wire.Some(loc(8, 1)), expect[*wire.RequestOK](fs).Parameters.LargestObject)
		})
	})
	t.Run("datagrams move it too", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			track, fp, served := servedTrack(t)
			require.NoError(t, track.WriteDatagram(Object{Location: wire.Location{Group: 4, Object: 9}, Payload: []byte("d")}))
			_, ok, _ := subscribeFake(t, fp, served, wire.Params{})
			assert.Equal(t, wire.Some(loc(4, 9)), ok.Parameters.LargestObject)
		})
	})
	t.Run("PUBLISH", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			s, fp := serverSession(t, nil)
			track, err := NewLocalTrack(trackA, nil)
			require.NoError(t, err)
			write(t, track, 5, 0, 1)
			pub := make(chan error, 1)
			go func() {
				_, err := track.Publish(fakeCtx(t), s, wire.Params{}, AcceptOptions{})
				pub <- err
			}()
			fs := fp.accept()
			assert.Equal(t, wire.Some(loc(5, 1)), expect[*wire.Publish](fs).Parameters.LargestObject)
			fs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, pub))
		})
	})
	t.Run("TRACK_STATUS", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			track, err := NewLocalTrack(trackA, nil)
			require.NoError(t, err)
			write(t, track, 2, 0, 1, 2)
			_, fp := serverSession(t, &Config{Handler: HandlerFunc(func(r Request) {
				_ = track.Status(r.(*TrackStatusRequest))
			})})
			fs := fp.open(&wire.TrackStatus{RequestID: 0, TrackNamespace: trackA.Namespace, TrackName: trackA.Name})
			assert.Equal(t, wire.Some(loc(2, 2)), expect[*wire.RequestOK](fs).Parameters.LargestObject)
		})
	})
}

// acceptDataWithin accepts the library's next data stream. With brief set
// it waits a short while only and reports false when none came: the test
// has seen what it needed and only checks for a straggler.
func (fp *fakePeer) acceptDataWithin(brief bool) (*fakeData, bool) {
	fp.t.Helper()
	if !brief {
		return fp.acceptData(), true
	}
	ctx, cancel := context.WithTimeout(fakeCtx(fp.t), time.Second)
	defer cancel()
	str, err := fp.conn.AcceptUniStream(ctx)
	if err != nil {
		return nil, false
	}
	br := bufio.NewReader(str)
	h, err := wire.ReadStreamHeader(br)
	require.NoError(fp.t, err)
	require.Equal(fp.t, wire.StreamSubgroup, h.Type)
	return &fakeData{t: fp.t, str: str, br: br, dec: wire.SubgroupDecoder{Header: h.Subgroup}}, true
}

// ---- C020: a stream that will not carry every object it should is reset ----

// c020Case is one way a subgroup stream stops before it has carried every
// object its subscription covers (§11.3.2's list).
type c020Case struct {
	name   string
	params wire.Params
	// change is done after object 0 reached the fake; objects 1 and 2
	// follow, then the subgroup closes.
	change func(t *testing.T, fs *fakeStream, ss *ServedSubscription)
}

func update(params wire.Params) func(t *testing.T, fs *fakeStream, ss *ServedSubscription) {
	return func(t *testing.T, fs *fakeStream, ss *ServedSubscription) {
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: params})
		expect[*wire.RequestOK](fs)
	}
}

var c020Cases = []c020Case{
	{
		name:   "Forward to 0",
		change: update(wire.Params{Forward: wire.Some(false)}),
	},
	{
		name:   "End Group moved below the open subgroup",
		params: wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{Group: 1}, 9))},
		change: update(wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{Group: 1}, 1))}),
	},
	{
		name:   "Start Location moved past the open subgroup",
		params: wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 1, Object: 1}))},
		change: update(wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 4, Object: 0}))}),
	},
}

// TestC020_StreamsCutShortAreReset: a subgroup stream the publisher stops
// before it carried every object the subscription covers is reset, never
// finished (§11.3.2): the subscriber must not take it for a complete
// subgroup. The cases are those §11.3.2 lists that a REQUEST_UPDATE
// causes.
func TestC020_StreamsCutShortAreReset(t *testing.T) {
	for _, tr := range pipeTransports {
		for _, c := range c020Cases {
			t.Run(tr.name+"/"+c.name, func(t *testing.T) {
				forDrafts(t, sharedDrafts, func(t *testing.T) {
					track, fp, served := fakeSubscriberTrack(t, tr.wt)
					fs, _, ss := subscribeFake(t, fp, served, c.params)
					w := track.OpenSubgroup(2, 0, SubgroupOptions{})
					require.NoError(t, writeObject(w, 0, nil, []byte("a")))
					d := fp.acceptData()
					d.expectObjects(0)
					c.change(t, fs, ss)
					require.NoError(t, writeObject(w, 1, nil, []byte("b")))
					require.NoError(t, writeObject(w, 2, nil, []byte("c")))
					require.NoError(t, w.Close())
					d.expectResetAfterAny()
				})
			})
		}
	}
}

// TestC020_ForwardZeroThenCloseResets: an object omitted while Forward was
// 0 stays missing from the subgroup's stream even when Forward is back to
// 1 before the subgroup ends, so the stream must not end with a FIN
// (§11.3.2, "omitting a Subgroup Object due to the subscriber's Forward
// State").
func TestC020_ForwardZeroThenCloseResets(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		track, fp, served := servedTrack(t)
		fs, _, ss := subscribeFake(t, fp, served, wire.Params{})
		w := track.OpenSubgroup(1, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("a")))
		d := fp.acceptData()
		d.expectObjects(0)
		update(wire.Params{Forward: wire.Some(false)})(t, fs, ss)
		require.NoError(t, writeObject(w, 1, nil, []byte("omitted")))
		// Forward back to 1 before the subgroup ends: object 1 stays missing
		// from this stream, so it cannot end with a FIN.
		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{Forward: wire.Some(true)}})
		expect[*wire.RequestOK](fs)
		require.NoError(t, writeObject(w, 2, nil, []byte("c")))
		require.NoError(t, w.Close())
		d.expectResetAfterAny()
	})
}

// TestC020_JoinMidSubgroupDoesNotFIN: a subscription whose Start Location
// is at or before objects of an open subgroup that were written before it
// joined cannot get them on that subgroup's stream; the stream it gets (if
// any) must be reset, not finished, since a FIN would claim the subgroup
// complete from the Start Location (§11.3.2). A later subgroup is whole
// and ends with a FIN.
func TestC020_JoinMidSubgroupDoesNotFIN(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				track, fp, served := fakeSubscriberTrack(t, tr.wt)
				w := track.OpenSubgroup(5, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, []byte("before")))
				require.NoError(t, writeObject(w, 1, nil, []byte("before")))
				// The current group: Start Location is {5, 0}.
				_, ok, _ := subscribeFake(t, fp, served, wire.Params{LocationFilter: wire.Some(currentGroupFilter(t, 5))})
				require.Equal(t, wire.Some(wire.Location{Group: 5, Object: 1}), ok.Parameters.LargestObject)
				require.NoError(t, writeObject(w, 2, nil, []byte("after")))
				require.NoError(t, w.Close())
				next := track.OpenSubgroup(6, 0, SubgroupOptions{})
				require.NoError(t, writeObject(next, 0, nil, []byte("whole")))
				require.NoError(t, next.Close())

				// Streams may be accepted in either order; once the whole
				// subgroup's has come, a stream for group 5 still may.
				whole := false
				for {
					d, ok := fp.acceptDataWithin(whole)
					if !ok {
						return
					}
					if d.dec.Header.GroupID == 6 {
						d.expectObjects(0)
						d.expectFIN()
						whole = true
						continue
					}
					require.Equal(t, uint64(5), d.dec.Header.GroupID)
					d.expectResetAfterAny()
					if whole {
						return
					}
				}
			})
		})
	}
}

// TestC084_UnknownStreamCountWaitsForLateStreams: the library's publisher
// always knows how many streams it opened (pending opens are settled before
// PUBLISH_DONE, see sendq.Pending.CancelWrite), so it never needs C084's
// 2^64-1. The subscriber side must read that value as "unknown", not as
// "none" nor as a count to wait for without end: a stream arriving after
// PUBLISH_DONE is still delivered, and the data plane ends once
// Config.DoneLinger has passed without data (the late stream's end).
func TestC084_UnknownStreamCountWaitsForLateStreams(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		const linger = 3 * time.Second
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{DoneLinger: linger})
		got, req := subscribeAgainstFake(t, s, fp)
		req.send(&wire.SubscribeOK{TrackAlias: 2})
		sub := recvOrFail(t, got)
		req.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: wire.MaxVarint})
		req.fin()
		closedOrFail(t, sub.Done(), "subscription not terminated by PUBLISH_DONE")
		start := time.Now()
		advance(linger - time.Millisecond)
		require.NoError(t, fp.openSubgroup(2, 0, []byte("late")).Close())
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err, "a stream after PUBLISH_DONE with an unknown Stream Count is delivered")
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("late")}, payloads)
		last := time.Now()
		require.Equal(t, linger-time.Millisecond, last.Sub(start))
		closedOrFail(t, sub.dataDone, "the data plane did not end after DoneLinger")
		assert.Equal(t, linger, time.Since(last), "the data plane ends DoneLinger after the last data")
		var de *DoneError
		_, err = sub.AcceptSubgroup(fakeCtx(t))
		require.ErrorAs(t, err, &de)
		assert.Equal(t, uint64(wire.MaxVarint), de.StreamCount)
	})
}
