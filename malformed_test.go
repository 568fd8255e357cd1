package moqt

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// These tests put the library on the subscriber side of a fake publisher
// that sends raw subgroup streams and datagrams, and check that a
// Malformed Track (§12.1) cancels the subscription (C022), with
// MALFORMED_TRACK on the wire and *MalformedTrackError for the
// application, without delivering the object that revealed it (C023).
// Each step waits for the library to have read what came before, so the
// order in which the library sees objects is the order written here.

// fakeAlias is the Track Alias the fake publisher gives its track.
const fakeAlias = 1

// fakePub is a library subscription to testTrack served by a fake
// publisher.
type fakePub struct {
	t   *testing.T
	s   *Session
	fp  *fakePeer
	req *fakeStream // the fake's end of the SUBSCRIBE stream
	sub *Subscription
	ctx context.Context
}

// newFakePub subscribes with params and answers with SUBSCRIBE_OK carrying
// props.
func newFakePub(t *testing.T, params wire.Params, props wire.KVList) *fakePub {
	t.Helper()
	s, fp := clientSession(t, nil)
	type result struct {
		sub *Subscription
		err error
	}
	got := make(chan result, 1)
	go func() {
		sub, err := s.Subscribe(fakeCtx(t), testTrack, params)
		got <- result{sub, err}
	}()
	req := fp.accept()
	expect[*wire.Subscribe](req)
	req.send(&wire.SubscribeOK{TrackAlias: fakeAlias, TrackProperties: props})
	res := recvOrFail(t, got)
	require.NoError(t, res.err)
	return &fakePub{t: t, s: s, fp: fp, req: req, sub: res.sub, ctx: fakeCtx(t)}
}

// fakeSubgroup is a subgroup stream the fake publisher writes.
type fakeSubgroup struct {
	t   *testing.T
	str transport.SendStream
	enc wire.SubgroupEncoder
}

// hdr is a SUBGROUP_HEADER for group and subgroup with an explicit
// priority.
func hdr(group, subgroup uint64, priority uint8) wire.SubgroupHeader {
	h := wire.SubgroupHeader{GroupID: group, SubgroupID: subgroup, Priority: priority}
	if subgroup != 0 {
		h.SubgroupIDMode = wire.SubgroupIDPresent
	}
	return h
}

// subgroup opens a stream and writes h, for the fake's alias.
func (p *fakePub) subgroup(h wire.SubgroupHeader) *fakeSubgroup {
	p.t.Helper()
	h.TrackAlias = fakeAlias
	str, err := p.fp.conn.OpenUniStreamSync(fakeCtx(p.t))
	require.NoError(p.t, err)
	b, err := h.Append(nil)
	require.NoError(p.t, err)
	_, err = str.Write(b)
	require.NoError(p.t, err)
	return &fakeSubgroup{t: p.t, str: str, enc: wire.SubgroupEncoder{Header: h}}
}

// write writes one object.
func (s *fakeSubgroup) write(o wire.SubgroupObject, payload string) *fakeSubgroup {
	s.t.Helper()
	o.PayloadLength = uint64(len(payload))
	b, err := s.enc.AppendObject(nil, o)
	require.NoError(s.t, err)
	_, err = s.str.Write(append(b, payload...))
	require.NoError(s.t, err)
	return s
}

// objects writes Normal objects with the given IDs.
func (s *fakeSubgroup) objects(ids ...uint64) *fakeSubgroup {
	s.t.Helper()
	for _, id := range ids {
		s.write(wire.SubgroupObject{ObjectID: id}, "payload")
	}
	return s
}

// status writes a status object.
func (s *fakeSubgroup) status(id uint64, st wire.ObjectStatus) *fakeSubgroup {
	s.t.Helper()
	return s.write(wire.SubgroupObject{ObjectID: id, Status: st}, "")
}

// fin ends the stream.
func (s *fakeSubgroup) fin() {
	s.t.Helper()
	require.NoError(s.t, s.str.Close())
}

// expectStopSending requires the library to have stopped the stream with
// code.
func (s *fakeSubgroup) expectStopSending(code wire.ResetCode) {
	s.t.Helper()
	closedOrFail(s.t, s.str.Context().Done(), "no STOP_SENDING on the data stream")
	_, err := s.str.Write([]byte{0})
	var se *transport.StreamError
	require.ErrorAs(s.t, err, &se)
	assert.True(s.t, se.Remote, "STOP_SENDING was local")
	assert.Equal(s.t, uint64(code), se.Code, "STOP_SENDING code")
}

// datagram sends an OBJECT_DATAGRAM for the fake's alias.
func (p *fakePub) datagram(d wire.ObjectDatagram) {
	p.t.Helper()
	d.TrackAlias = fakeAlias
	b, err := d.Append(nil)
	require.NoError(p.t, err)
	require.NoError(p.t, p.fp.conn.SendDatagram(b))
}

// readDatagram requires the next datagram to be the object at loc.
func (p *fakePub) readDatagram(loc wire.Location) {
	p.t.Helper()
	d, err := p.sub.ReadDatagram(p.ctx)
	require.NoError(p.t, err)
	require.Equal(p.t, loc, d.Location)
}

// stream accepts the next subgroup stream.
func (p *fakePub) stream() *SubgroupReader {
	p.t.Helper()
	r, err := p.sub.AcceptSubgroup(p.ctx)
	require.NoError(p.t, err)
	return r
}

// readIDs requires the next objects of r to have the given Object IDs.
func readIDs(t *testing.T, r *SubgroupReader, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		h, err := r.Next()
		require.NoError(t, err)
		require.Equal(t, id, h.Location.Object)
	}
}

// readEOF requires r to be at its FIN.
func readEOF(t *testing.T, r *SubgroupReader) {
	t.Helper()
	_, err := r.Next()
	require.Equal(t, io.EOF, err)
}

// expectMalformed checks what C022 asks once err reported a Malformed
// Track: the error is typed, the subscription is cancelled with it, and its
// request stream is reset and stopped with MALFORMED_TRACK (§6.4.2.3). The
// session goes on.
func (p *fakePub) expectMalformed(err error) *MalformedTrackError {
	p.t.Helper()
	var me *MalformedTrackError
	require.ErrorAs(p.t, err, &me)
	closedOrFail(p.t, p.sub.Done(), "subscription not cancelled")
	var subErr *MalformedTrackError
	require.ErrorAs(p.t, p.sub.Err(), &subErr)
	assert.ErrorIs(p.t, p.sub.Err(), ErrCancelled)
	assert.Equal(p.t, stateTerminated, p.sub.current())
	p.req.expectReset(wire.ResetMalformedTrack)
	p.req.expectStopSending(wire.ResetMalformedTrack)
	assert.NoError(p.t, p.s.Context().Err(), "a Malformed Track ends the subscription, not the session")
	return me
}

// expectMalformedDatagram waits for a datagram to reveal a Malformed
// Track: the application learns it from ReadDatagram, which does not
// return the offending datagram (C023).
func (p *fakePub) expectMalformedDatagram() *MalformedTrackError {
	p.t.Helper()
	closedOrFail(p.t, p.sub.Done(), "subscription not cancelled")
	_, err := p.sub.ReadDatagram(p.ctx)
	return p.expectMalformed(err)
}

// TestC022_C023_PriorityDiffersWithinSubgroup: condition 1 of §12.1, a subgroup
// whose second stream carries another Publisher Priority. The open streams
// are stopped with MALFORMED_TRACK.
func TestC022_C023_PriorityDiffersWithinSubgroup(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		p := newFakePub(t, wire.Params{}, nil)
		a := p.subgroup(hdr(1, 0, 10)).objects(0)
		ra := p.stream()
		readIDs(t, ra, 0)
		b := p.subgroup(hdr(1, 0, 20)).objects(1)
		_, err := p.stream().Next()
		me := p.expectMalformed(err)
		assert.Contains(t, me.Reason, "Publisher Priority")
		a.expectStopSending(wire.ResetMalformedTrack)
		b.expectStopSending(wire.ResetMalformedTrack)
		_, err = ra.Next()
		assert.ErrorAs(t, err, &me, "the other stream reports why it was stopped")
	})
}

// TestC022_EverySubscriptionToTheTrackCancelled: a Malformed Track seen
// on one subscription cancels every subscription to that track from that
// publisher (§12.1), whatever its alias; one to another track goes on.
// Not on 18, which allows one subscription per track (§5.1). Its FETCHes
// are cancelled too, and those of another track go on.
func TestC022_EverySubscriptionToTheTrackCancelled(t *testing.T) {
	forDrafts(t, newerDrafts, func(t *testing.T) {
		p := newFakePub(t, wire.Params{}, nil)
		same, sameReq := p.subscribeAgain(testTrack, fakeAlias+1, wire.Params{})
		other, _ := p.subscribeAgain(trackB, fakeAlias+2, wire.Params{})
		fetch, fetchReq, _ := fetchFake(t, p.s, p.fp, wire.Params{}, wire.Location{Group: 9})
		p.subgroup(hdr(1, 0, 1)).objects(0).status(1, wire.ObjectEndOfTrack)
		readIDs(t, p.stream(), 0, 1)
		p.subgroup(hdr(2, 0, 1)).objects(0)
		_, err := p.stream().Next()
		me := p.expectMalformed(err)

		closedOrFail(t, same.Done(), "the other subscription to the track was not cancelled")
		var sameErr *MalformedTrackError
		require.ErrorAs(t, same.Err(), &sameErr)
		assert.Equal(t, me.Reason, sameErr.Reason)
		sameReq.expectReset(wire.ResetMalformedTrack)
		sameReq.expectStopSending(wire.ResetMalformedTrack)
		fetchReq.expectReset(wire.ResetMalformedTrack)
		fetchReq.expectStopSending(wire.ResetMalformedTrack)
		_, err = fetch.ReadObject(context.Background())
		var fetchErr *MalformedTrackError
		require.ErrorAs(t, err, &fetchErr, "the FETCH of the track was not cancelled")
		assert.Equal(t, stateEstablished, other.current(), "another track is not affected")
	})
}

// TestC022_ObjectAfterSubgroupFinal: condition 2, an object past the last
// object before a FIN of its subgroup, in either order.
func TestC022_ObjectAfterSubgroupFinal(t *testing.T) {
	t.Run("object after the FIN", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(1, 0, 1)).objects(0, 1, 2).fin()
			r := p.stream()
			readIDs(t, r, 0, 1, 2)
			readEOF(t, r)
			b := p.subgroup(hdr(1, 0, 1)).objects(3)
			_, err := p.stream().Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "final object 2 of subgroup 0")
			b.expectStopSending(wire.ResetMalformedTrack)
		})
	})
	t.Run("FIN after a larger object", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			a := p.subgroup(hdr(1, 0, 1)).objects(4, 5)
			readIDs(t, p.stream(), 4, 5)
			p.subgroup(hdr(1, 0, 1)).objects(0, 1, 2).fin()
			r := p.stream()
			readIDs(t, r, 0, 1, 2)
			_, err := r.Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "object {1, 5} after the final object 2 of subgroup 0")
			a.expectStopSending(wire.ResetMalformedTrack)
		})
	})
}

// TestC022_SubgroupFinalsDiffer: condition 3, one subgroup over two
// streams that end with a FIN after different objects. The FIN that
// reveals it is reported instead of io.EOF.
func TestC022_SubgroupFinalsDiffer(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		p := newFakePub(t, wire.Params{}, nil)
		p.subgroup(hdr(1, 0, 1)).objects(0, 1, 2).fin()
		r := p.stream()
		readIDs(t, r, 0, 1, 2)
		readEOF(t, r)
		p.subgroup(hdr(1, 0, 1)).objects(0, 1).fin()
		r = p.stream()
		readIDs(t, r, 0, 1)
		_, err := r.Next()
		me := p.expectMalformed(err)
		assert.Contains(t, me.Reason, "ends at object 2 on one stream and 1 on another")
	})
}

// TestC022_ObjectAfterGroupFinal: condition 4, an object past the final
// object of its group, in each form the final object is learned, on
// streams and in datagrams, in either order.
func TestC022_ObjectAfterGroupFinal(t *testing.T) {
	t.Run("END_OF_GROUP status then stream", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(1, 0, 1)).objects(0, 1).status(2, wire.ObjectEndOfGroup)
			readIDs(t, p.stream(), 0, 1, 2)
			b := p.subgroup(hdr(1, 1, 1)).objects(3)
			_, err := p.stream().Next()
			p.expectMalformed(err)
			b.expectStopSending(wire.ResetMalformedTrack)
		})
	})
	t.Run("END_OF_GROUP header and FIN then stream", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			h := hdr(1, 0, 1)
			h.EndOfGroup = true
			p.subgroup(h).objects(0, 1).fin()
			r := p.stream()
			readIDs(t, r, 0, 1)
			readEOF(t, r)
			p.subgroup(hdr(1, 1, 1)).objects(2)
			_, err := p.stream().Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "final object 1 of group 1")
		})
	})
	t.Run("END_OF_GROUP status then datagram", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(1, 0, 1)).objects(0).status(1, wire.ObjectEndOfGroup)
			readIDs(t, p.stream(), 0, 1)
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 2, Payload: []byte("late")})
			p.expectMalformedDatagram()
		})
	})
	t.Run("datagram END_OF_GROUP flag then stream", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 1, EndOfGroup: true, Payload: []byte("last")})
			p.readDatagram(wire.Location{Group: 1, Object: 1})
			p.subgroup(hdr(1, 0, 1)).objects(2)
			_, err := p.stream().Next()
			p.expectMalformed(err)
		})
	})
	t.Run("END_OF_GROUP status after a larger object", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			a := p.subgroup(hdr(1, 1, 1)).objects(5)
			readIDs(t, p.stream(), 5)
			p.subgroup(hdr(1, 0, 1)).objects(0).status(3, wire.ObjectEndOfGroup)
			r := p.stream()
			readIDs(t, r, 0)
			_, err := r.Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "object {1, 5} after the final object 3 of group 1")
			a.expectStopSending(wire.ResetMalformedTrack)
		})
	})
}

// TestC022_ObjectAfterTrackFinal: condition 5, an object past the
// END_OF_TRACK, in either order.
func TestC022_ObjectAfterTrackFinal(t *testing.T) {
	t.Run("stream in a later group", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(2, 0, 1)).objects(0).status(1, wire.ObjectEndOfTrack).fin()
			r := p.stream()
			readIDs(t, r, 0, 1)
			readEOF(t, r)
			p.subgroup(hdr(3, 0, 1)).objects(0)
			_, err := p.stream().Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "final object {2, 1} of the track")
		})
	})
	t.Run("datagram in the last group", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(2, 0, 1)).status(1, wire.ObjectEndOfTrack)
			readIDs(t, p.stream(), 1)
			p.datagram(wire.ObjectDatagram{GroupID: 2, ObjectID: 4, Payload: []byte("late")})
			p.expectMalformedDatagram()
		})
	})
	t.Run("END_OF_TRACK after a larger object of its group", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(2, 1, 1)).objects(3)
			readIDs(t, p.stream(), 3)
			p.subgroup(hdr(2, 0, 1)).objects(0).status(1, wire.ObjectEndOfTrack)
			r := p.stream()
			readIDs(t, r, 0)
			_, err := r.Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "object {2, 3} after the final object {2, 1} of the track")
		})
	})
	t.Run("END_OF_TRACK after a later group", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.datagram(wire.ObjectDatagram{GroupID: 5, Payload: []byte("ahead")})
			p.readDatagram(wire.Location{Group: 5})
			p.subgroup(hdr(2, 0, 1)).objects(0).status(1, wire.ObjectEndOfTrack)
			r := p.stream()
			readIDs(t, r, 0)
			_, err := r.Next()
			me := p.expectMalformed(err)
			assert.Contains(t, me.Reason, "group 5 received after the final object {2, 1}")
		})
	})
}

// TestC022_ForwardingPreferenceChanged: condition 7, read per Object: one
// Location received both as a datagram and on a subgroup stream.
func TestC022_ForwardingPreferenceChanged(t *testing.T) {
	t.Run("datagram then stream", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 0, Payload: []byte("d")})
			p.readDatagram(wire.Location{Group: 1})
			b := p.subgroup(hdr(1, 0, 1)).objects(0)
			_, err := p.stream().Next()
			p.expectMalformed(err)
			b.expectStopSending(wire.ResetMalformedTrack)
		})
	})
	t.Run("stream then datagram", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			a := p.subgroup(hdr(1, 0, 1)).objects(0, 1, 2)
			r := p.stream()
			readIDs(t, r, 0, 1, 2)
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 1, Payload: []byte("d")})
			me := p.expectMalformedDatagram()
			assert.Contains(t, me.Reason, "{1, 1} received as a datagram and on a subgroup stream")
			a.expectStopSending(wire.ResetMalformedTrack)
		})
	})
	t.Run("other objects of a group may differ", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(1, 0, 1)).objects(0, 2)
			readIDs(t, p.stream(), 0, 2)
			// Object 1 fell in the gap between 0 and 2: it is another Object,
			// free to be a datagram (§11.1.1).
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 1, Payload: []byte("d")})
			p.readDatagram(wire.Location{Group: 1, Object: 1})
			assert.NoError(t, p.sub.Err())
		})
	})
}

// propsBlock encodes Object Properties.
func propsBlock(t *testing.T, l wire.KVList) []byte {
	t.Helper()
	b, err := l.Append(nil)
	require.NoError(t, err)
	return b
}

// TestC005_MandatoryPropertyOnObject: a Mandatory Track Property (0x4000–
// 0x7FFF) received as an Object Property makes the track malformed (§3.6),
// directly or inside IMMUTABLE_PROPERTIES (§10.7), on a stream or in a
// datagram.
func TestC005_MandatoryPropertyOnObject(t *testing.T) {
	mandatory := propsBlock(t, wire.KVList{{Type: 0x3C, Value: 1}, {Type: 0x4000, Value: 1}})
	nested := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties,
		Bytes: propsBlock(t, wire.KVList{{Type: 0x7FFF, Bytes: []byte("x")}})}})
	for _, c := range []struct {
		name  string
		props []byte
	}{{"direct", mandatory}, {"inside IMMUTABLE_PROPERTIES", nested}} {
		t.Run("stream/"+c.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				p := newFakePub(t, wire.Params{}, nil)
				h := hdr(1, 0, 1)
				h.HasProperties = true
				s := p.subgroup(h).write(wire.SubgroupObject{ObjectID: 0}, "ok")
				s.write(wire.SubgroupObject{ObjectID: 1, Properties: c.props}, "bad")
				r := p.stream()
				readIDs(t, r, 0)
				_, err := r.Next()
				me := p.expectMalformed(err)
				assert.Contains(t, me.Reason, "Mandatory Track Property")
				s.expectStopSending(wire.ResetMalformedTrack)
			})
		})
		t.Run("datagram/"+c.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				p := newFakePub(t, wire.Params{}, nil)
				p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 0, Properties: c.props, Payload: []byte("bad")})
				me := p.expectMalformedDatagram()
				assert.Contains(t, me.Reason, "Mandatory Track Property")
			})
		})
	}
}

// TestC005_MandatoryPropertyNeverSentOnObject: a Mandatory Track Property
// has Track scope (§3.6), so the publishing paths refuse an object that
// carries one as an Object Property, directly or inside
// IMMUTABLE_PROPERTIES, before anything is sent or recorded: every
// receiver would take the track for malformed. The subscriber goes on
// reading the track, the objects written after the refusal included.
func TestC005_MandatoryPropertyNeverSentOnObject(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		bad := map[string][]byte{
			"direct": propsBlock(t, wire.KVList{{Type: 0x3C, Value: 1}, {Type: 0x4000, Value: 1}}),
			"inside IMMUTABLE_PROPERTIES": propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties,
				Bytes: propsBlock(t, wire.KVList{{Type: 0x7FFF, Bytes: []byte("x")}})}}),
		}
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{}, nil, nil)
		w := lt.track.OpenSubgroup(1, 0, SubgroupOptions{Properties: true})
		require.NoError(t, writeObject(w, 0, nil, []byte("ok")))
		for name, props := range bad {
			err := writeObject(w, 1, props, []byte("bad"))
			require.Error(t, err, "WriteObject, %s", name)
			assert.Contains(t, err.Error(), "Mandatory Track Property", name)
			_, err = w.BeginObject(1, 3, props)
			assert.Error(t, err, "BeginObject, %s", name)
			assert.Error(t, lt.track.WriteDatagram(Object{Location: wire.Location{Group: 2}, Properties: props,
				Payload: []byte("bad")}), "WriteDatagram, %s", name)
		}
		largest, ok := lt.track.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 1, Object: 0}, largest, "a refused object is not recorded")
		require.NoError(t, writeObject(w, 1, propsBlock(t, wire.KVList{{Type: 0x78, Value: 1}}), []byte("next")))
		require.NoError(t, w.Close())
		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)
		ids, payloads := readSubgroup(t, r)
		assert.Equal(t, []uint64{0, 1}, ids)
		assert.Equal(t, [][]byte{[]byte("ok"), []byte("next")}, payloads)
		assert.NoError(t, lt.sub.Err(), "the subscriber saw a malformed track")
	})
	t.Run("fetch", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			props := propsBlock(t, wire.KVList{{Type: 0x5000, Value: 1}})
			objs := fetchWrittenBy(t, pl(0, 1), func(w *FetchWriter) error {
				if err := w.WriteObject(Object{Location: pl(0, 0), Properties: props, Payload: []byte("bad")}); err == nil {
					return errors.New("an object with a Mandatory Track Property was written")
				}
				return w.WriteObject(pobj(0, 1, "ok"))
			})
			require.Len(t, objs, 1)
			assert.Equal(t, pl(0, 1), objs[0].Location)
		})
	})
}

// fetchWrittenBy serves a FETCH of testTrack, over a pipe, with FETCH_OK
// End end and a data stream that write fills before its FIN, and returns
// the objects the fetching session reads up to that FIN. An error from
// write fails the test.
func fetchWrittenBy(t *testing.T, end wire.Location, write func(w *FetchWriter) error) []Object {
	t.Helper()
	h, served := fetchServedBy(func(fr *FetchRequest) error {
		if err := fr.Accept(false, end, nil); err != nil {
			return err
		}
		w := fr.Objects()
		if err := write(w); err != nil {
			w.Reset(wire.ResetInternalError)
			return err
		}
		return w.Close()
	})
	p := overPipe(false)(t, &Config{Handler: h}, nil)
	f, err := p.client.Fetch(testCtx(t, fakeGuard), testTrack, wire.Params{})
	require.NoError(t, err)
	objs, err := readFetch(t, f)
	require.NoError(t, recvOrFail(t, served))
	assert.ErrorIs(t, err, io.EOF)
	return objs
}

// TestMalformedImmutableProperties: an IMMUTABLE_PROPERTIES that nests
// another, or whose Key-Value-Pairs cannot be parsed, makes the track
// malformed (§10.7).
func TestMalformedImmutableProperties(t *testing.T) {
	for _, c := range []struct {
		name, want string
		inner      []byte
	}{
		{"nested", "inside IMMUTABLE_PROPERTIES", propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: []byte{}}})},
		{"unparseable", "cannot be parsed", []byte{0x02}}, // a type with no value
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				p := newFakePub(t, wire.Params{}, nil)
				props := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: c.inner}})
				p.datagram(wire.ObjectDatagram{GroupID: 1, Properties: props, Payload: []byte("x")})
				me := p.expectMalformedDatagram()
				assert.Contains(t, me.Reason, c.want)
			})
		})
	}
}
