package moqt

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// What §12.1 does not call malformed: well-formed tracks, and FINs that
// a filter or a shared alias cuts short, are never reported.

// TestC022_WellFormedTrackNotFlagged: a track that uses what §2, §11 and
// §12.1 allow is not reported: objects before the subscription's start,
// several subgroups per group, a subgroup continued on a new stream after
// a reset and another sent twice, Object ID gaps, a header with
// DEFAULT_PRIORITY next to one naming the same priority, datagrams mixed
// with streams in one group, END_OF_GROUP as a status, a header flag and a
// datagram flag, and END_OF_TRACK with earlier objects still arriving.
func TestC022_WellFormedTrackNotFlagged(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		p := newFakePub(t, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 2}))},
			wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 7}})
		read := func(ids ...uint64) *SubgroupReader {
			t.Helper()
			r := p.stream()
			readIDs(t, r, ids...)
			return r
		}
		readAll := func(ids ...uint64) {
			t.Helper()
			readEOF(t, read(ids...))
		}
		// Group 1 lies before the start (a filter update may have been in
		// flight, §3.3.1): not the subscription's, so stopped, not flagged.
		// The first object decides and the stop follows at once, so the fake
		// writes just that one: a second write could meet the STOP_SENDING.
		early := p.subgroup(hdr(1, 0, 3)).objects(0)
		early.expectStopSending(wire.ResetCancelled)

		// Group 2: subgroup 0 starts with the default priority, is reset, and
		// goes on on a new stream that names priority 7.
		h := hdr(2, 0, 0)
		h.DefaultPriority = true
		a := p.subgroup(h).objects(0, 3)
		ra := read(0, 3)
		a.str.CancelWrite(uint64(wire.ResetDeliveryTimeout))
		_, err := ra.Next()
		var se *transport.StreamError
		require.ErrorAs(t, err, &se, "the reset is reported as such")
		p.subgroup(hdr(2, 0, 7)).objects(6, 9).fin()
		readAll(6, 9)
		// Subgroup 1, sent twice in full.
		for range 2 {
			p.subgroup(hdr(2, 1, 3)).objects(1, 2).fin()
			readAll(1, 2)
		}
		// Datagrams for objects no stream carried.
		p.datagram(wire.ObjectDatagram{GroupID: 2, ObjectID: 4, Priority: 3, Payload: []byte("d")})
		p.readDatagram(wire.Location{Group: 2, Object: 4})
		p.datagram(wire.ObjectDatagram{GroupID: 2, ObjectID: 5, DefaultPriority: true, Payload: []byte("d")})
		p.readDatagram(wire.Location{Group: 2, Object: 5})
		// Subgroup 2 holds the group's largest object: its FIN ends the group.
		h = hdr(2, 2, 3)
		h.EndOfGroup = true
		p.subgroup(h).objects(10, 11).fin()
		readAll(10, 11)
		// Group 3 ends with an END_OF_GROUP status; group 4 with a datagram
		// flag, after a stream object below it.
		p.subgroup(hdr(3, 0, 1)).objects(0, 1).status(2, wire.ObjectEndOfGroup).fin()
		readAll(0, 1, 2)
		p.datagram(wire.ObjectDatagram{GroupID: 4, ObjectID: 1, EndOfGroup: true, Payload: []byte("d")})
		p.readDatagram(wire.Location{Group: 4, Object: 1})
		p.subgroup(hdr(4, 0, 1)).objects(0).fin()
		readAll(0)
		// The track ends at {5, 1}; objects before it may still arrive.
		p.subgroup(hdr(5, 0, 1)).objects(0).status(1, wire.ObjectEndOfTrack).fin()
		readAll(0, 1)
		p.subgroup(hdr(2, 3, 1)).objects(7, 8).fin()
		readAll(7, 8)
		require.NoError(t, p.sub.Err(), "a well-formed track is not flagged")

		p.req.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: 10})
		closedOrFail(t, p.sub.Done(), "subscription not done")
		var de *DoneError
		assert.ErrorAs(t, p.sub.Err(), &de)
	})
}

// TestC022_FilterCutFinsAreNotFinal: a subscription whose Location filter
// ends inside a group receives subgroups cut short and ended with a FIN
// (§11.3.2); such a FIN is not the subgroup's final object, so objects past
// it, arriving after the filter grew, are not flagged. Draft 21 only: in
// 18 and 19 a filter ends at a whole group (§5.1.2), so no subgroup is cut.
func TestC022_FilterCutFinsAreNotFinal(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		p := newFakePub(t, wire.Params{LocationFilter: wire.Some(
			wire.RangeFilterToObject(wire.Location{Group: 1}, wire.Location{Group: 1, Object: 2}))}, nil)
		h := hdr(1, 0, 1)
		h.EndOfGroup = true
		p.subgroup(h).objects(0, 1, 2).fin()
		r := p.stream()
		readIDs(t, r, 0, 1, 2)
		readEOF(t, r)
		// The filter grows to the whole group.
		updated := goErr(func() error {
			return p.sub.Update(p.ctx, wire.Params{LocationFilter: wire.Some(
				wire.RangeFilterTo(wire.Location{Group: 1}, 1))})
		})
		expect[*wire.RequestUpdate](p.req)
		p.req.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, updated))
		p.subgroup(hdr(1, 0, 1)).objects(3, 4).fin()
		r = p.stream()
		readIDs(t, r, 3, 4)
		readEOF(t, r)
		p.subgroup(hdr(1, 1, 1)).objects(5).fin()
		r = p.stream()
		readIDs(t, r, 5)
		readEOF(t, r)
		assert.NoError(t, p.sub.Err())
	})
}

// TestC022_SharedAliasNotFlagged: two subscriptions to one track share its
// alias, with overlapping filters, one ending inside a group; each
// receives its copies (C033) of a track with several subgroups,
// END_OF_GROUP and END_OF_TRACK, and neither is flagged, whichever copy of
// a subgroup, cut short by the filter or not, reaches which.
//
// Draft 21 only: in 18 and 19 a filter ends at a whole group (§5.1.2), so
// no copy is cut short inside one, and 18 allows one subscription per track.
func TestC022_SharedAliasNotFlagged(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		cfg, served := trackServer(t, track)
		cfg.SharedTrackAliases = true
		p := newPipePair(t, transport.PipeConfig{}, cfg, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		all, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		<-served
		window := filter.Window{Start: wire.Location{Group: 1}, End: wire.Location{Group: 2, Object: 1}, Bounded: true}
		part, err := p.client.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(
			wire.RangeFilterToObject(window.Start, window.End))})
		require.NoError(t, err)
		<-served
		require.Equal(t, all.TrackAlias(), part.TrackAlias(), "the publisher shares the alias")

		var want []wire.Location
		for g := uint64(0); g <= 2; g++ {
			for sg := uint64(0); sg <= 1; sg++ {
				w := track.OpenSubgroup(g, sg, SubgroupOptions{EndOfGroup: sg == 1})
				for id := sg * 3; id < sg*3+3; id++ {
					switch {
					case g == 2 && id == 5:
						require.NoError(t, writeStatus(w, id, wire.ObjectEndOfTrack))
					case g < 2 && id == 5:
						require.NoError(t, writeStatus(w, id, wire.ObjectEndOfGroup))
					default:
						require.NoError(t, writeObject(w, id, nil, []byte{byte(g), byte(id)}))
					}
					loc := wire.Location{Group: g, Object: id}
					want = append(want, loc)
					if window.Contains(loc) {
						want = append(want, loc) // part's copy
					}
				}
				require.NoError(t, w.Close())
			}
		}
		track.End(wire.DoneTrackEnded, "")
		gotPart := collect(t, ctx, part)
		got := append(collect(t, ctx, all), gotPart...)
		var de *DoneError
		assert.ErrorAs(t, all.Err(), &de, "ended by PUBLISH_DONE, not flagged")
		assert.ErrorAs(t, part.Err(), &de, "ended by PUBLISH_DONE, not flagged")
		for _, l := range gotPart {
			assert.True(t, window.Contains(l), "%v is outside part's filter", l)
		}
		// The two copies of subgroup {2, 0} look alike; when part takes the
		// longer one, the object past its filter is skipped and all's copy
		// lacks it (design-notes, Known gaps). Nothing else may be missing.
		missing := slices.Clone(want)
		for _, l := range got {
			if i := slices.Index(missing, l); i >= 0 {
				missing = slices.Delete(missing, i, i+1)
			}
		}
		assert.Subset(t, []wire.Location{{Group: 2, Object: 2}}, missing)
		assert.Len(t, got, len(want)-len(missing), "nothing extra")
	})
}

// subscribeAgain makes another subscription on p's session, answered with
// alias; with fakeAlias, to testTrack, it shares p.sub's (§3.1.2).
func (p *fakePub) subscribeAgain(track wire.FullTrackName, alias uint64, params wire.Params) (*Subscription, *fakeStream) {
	p.t.Helper()
	got := make(chan *Subscription, 1)
	go func() {
		sub, err := p.s.Subscribe(fakeCtx(p.t), track, params)
		assert.NoError(p.t, err)
		got <- sub
	}()
	req := p.fp.accept()
	expect[*wire.Subscribe](req)
	req.send(&wire.SubscribeOK{TrackAlias: alias})
	return recvOrFail(p.t, got), req
}

// TestC022_SharedAliasCopiesNotFlagged: the fake sends one copy of a
// subgroup per subscription sharing the alias, one cut short by its
// subscription's filter. Routing may hand both copies to one subscription
// (§3.1: the subscriber tells them apart by filters only), whose FINs then
// disagree; that is not a Malformed Track. Draft 21 only, as
// TestC022_SharedAliasNotFlagged.
func TestC022_SharedAliasCopiesNotFlagged(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		p := newFakePub(t, wire.Params{}, nil)
		cut, _ := p.subscribeAgain(testTrack, fakeAlias, wire.Params{LocationFilter: wire.Some(
			wire.RangeFilterToObject(wire.Location{Group: 1, Object: 1}, wire.Location{Group: 1, Object: 1}))})
		type stream struct {
			ids []uint64
			err error
		}
		got := make(chan stream, 4)
		ctx, cancel := context.WithCancel(p.ctx)
		done := make(chan struct{}, 2)
		t.Cleanup(func() {
			cancel()
			<-done
			<-done
		})
		for _, sub := range []*Subscription{p.sub, cut} {
			go func() {
				defer func() { done <- struct{}{} }()
				for {
					r, err := sub.AcceptSubgroup(ctx)
					if err != nil {
						return
					}
					var s stream
					for {
						h, err := r.Next()
						if err != nil {
							if err != io.EOF {
								s.err = err
							}
							break
						}
						s.ids = append(s.ids, h.Location.Object)
					}
					got <- s
				}
			}()
		}
		p.subgroup(hdr(1, 0, 1)).objects(1).fin() // the copy for cut
		assert.Equal(t, stream{ids: []uint64{1}}, recvOrFail(t, got))
		p.subgroup(hdr(1, 0, 1)).objects(0, 1, 2).fin() // the copy for p.sub
		assert.Equal(t, stream{ids: []uint64{0, 1, 2}}, recvOrFail(t, got))
		assert.NoError(t, p.sub.Err())
		assert.NoError(t, cut.Err())
	})
}

// TestSharedAliasCopyReroutedFromEndedSubscription: a copy routed to a
// subscription that stops receiving before the copy is handed over (it had
// every stream its PUBLISH_DONE counted) goes to the other subscription of
// the shared alias instead of being dropped.
func TestSharedAliasCopyReroutedFromEndedSubscription(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		routed := make(chan struct{}, 1)
		release := make(chan struct{})
		var once sync.Once
		cfg := &Config{hooks: &sessionHooks{streamRouted: func() {
			once.Do(func() {
				routed <- struct{}{}
				<-release
			})
		}}}
		s, fp := clientSession(t, cfg)
		p := &fakePub{t: t, s: s, fp: fp, ctx: fakeCtx(t)}
		first, firstReq := p.subscribeAgain(testTrack, fakeAlias, wire.Params{})
		second, _ := p.subscribeAgain(testTrack, fakeAlias, wire.Params{})

		p.subgroup(hdr(0, 0, 1)).objects(0).fin()
		recvOrFail(t, routed) // routed to first, the first bound
		firstReq.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
		require.Eventually(t, first.dataEnded, 5*time.Second, time.Millisecond, "first stops receiving")
		close(release)

		r, err := second.AcceptSubgroup(p.ctx)
		require.NoError(t, err, "the copy reaches the other subscription")
		ids, _ := readSubgroup(t, r)
		assert.Equal(t, []uint64{0}, ids)
	})
}
