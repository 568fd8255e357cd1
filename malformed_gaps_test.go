package moqt

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// The Prior Group ID Gap (§10.8) and Prior Object ID Gap (§10.9) rules,
// which drafts 18 to 21 share: what breaks them makes the track malformed
// on every path objects arrive by, and the publishing paths refuse to send
// it.

// priorGaps is an Object Properties block with a Prior Group ID Gap group
// and a Prior Object ID Gap object, each left out when negative.
func priorGaps(t *testing.T, group, object int) []byte {
	t.Helper()
	var l wire.KVList
	if group >= 0 {
		l = append(l, wire.KeyValue{Type: wire.PropPriorGroupIDGap, Value: uint64(group)})
	}
	if object >= 0 {
		l = append(l, wire.KeyValue{Type: wire.PropPriorObjectIDGap, Value: uint64(object)})
	}
	return propsBlock(t, l)
}

// propsHdr is hdr with the PROPERTIES flag.
func propsHdr(group, subgroup uint64) wire.SubgroupHeader {
	h := hdr(group, subgroup, 1)
	h.HasProperties = true
	return h
}

// expectMalformedNext requires r's next object to reveal a Malformed Track
// whose reason mentions want, and the stream (written through s) to be
// stopped.
func (p *fakePub) expectMalformedNext(r *SubgroupReader, s *fakeSubgroup, want string) {
	p.t.Helper()
	_, err := r.Next()
	me := p.expectMalformed(err)
	assert.Contains(p.t, me.Reason, want)
	s.expectStopSending(wire.ResetMalformedTrack)
}

// TestC022_PriorGroupIDGap: each Malformed Track condition of §10.8, on
// subgroup streams and datagrams, cancels the subscription with
// MALFORMED_TRACK without delivering the object that reveals it (C022,
// C023); gaps that agree with the track are delivered.
func TestC022_PriorGroupIDGap(t *testing.T) {
	t.Run("more than one instance", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			twice := propsBlock(t, wire.KVList{{Type: wire.PropImmutableProperties, Bytes: priorGaps(t, 1, -1)},
				{Type: wire.PropPriorGroupIDGap, Value: 1}})
			s := p.subgroup(propsHdr(5, 0)).write(wire.SubgroupObject{ObjectID: 0, Properties: twice}, "bad")
			p.expectMalformedNext(p.stream(), s, "Prior Group ID Gap more than once")
		})
	})
	t.Run("larger than the Group ID", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.datagram(wire.ObjectDatagram{GroupID: 1, Properties: priorGaps(t, 2, -1), Payload: []byte("bad")})
			assert.Contains(t, p.expectMalformedDatagram().Reason, "larger than its Group ID")
		})
	})
	t.Run("different values in a group", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(propsHdr(5, 0)).write(wire.SubgroupObject{ObjectID: 0, Properties: priorGaps(t, 2, -1)}, "ok")
			readIDs(t, p.stream(), 0)
			p.datagram(wire.ObjectDatagram{GroupID: 5, ObjectID: 1, Properties: priorGaps(t, 1, -1), Payload: []byte("bad")})
			assert.Contains(t, p.expectMalformedDatagram().Reason, "Prior Group ID Gap 2 and 1")
		})
	})
	t.Run("covering a group received", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(3, 0, 1)).objects(0)
			readIDs(t, p.stream(), 0)
			s := p.subgroup(propsHdr(5, 0)).write(wire.SubgroupObject{ObjectID: 0, Properties: priorGaps(t, 2, -1)}, "bad")
			p.expectMalformedNext(p.stream(), s, "covers group 3")
		})
	})
	t.Run("a group within a gap", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.datagram(wire.ObjectDatagram{GroupID: 5, Properties: priorGaps(t, 2, -1), Payload: []byte("ok")})
			p.readDatagram(wire.Location{Group: 5})
			s := p.subgroup(hdr(4, 0, 1)).objects(0)
			p.expectMalformedNext(p.stream(), s, "in the Prior Group ID Gap 2 of group 5")
		})
	})
	t.Run("consistent", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(hdr(1, 0, 1)).objects(0)
			readIDs(t, p.stream(), 0)
			p.datagram(wire.ObjectDatagram{GroupID: 4, Properties: priorGaps(t, 2, -1), Payload: []byte("a")})
			p.readDatagram(wire.Location{Group: 4})
			p.subgroup(propsHdr(4, 1)).write(wire.SubgroupObject{ObjectID: 1, Properties: priorGaps(t, 2, -1)}, "b").
				write(wire.SubgroupObject{ObjectID: 2}, "c")
			readIDs(t, p.stream(), 1, 2)
			p.subgroup(propsHdr(5, 0)).write(wire.SubgroupObject{ObjectID: 0, Properties: priorGaps(t, 0, -1)}, "d")
			readIDs(t, p.stream(), 0)
			assert.NoError(t, p.sub.Err())
		})
	})
}

// TestC022_PriorObjectIDGap: each Malformed Track condition of §10.9, on
// subgroup streams and datagrams, cancels the subscription with
// MALFORMED_TRACK without delivering the object that reveals it (C022,
// C023); gaps that agree with the track are delivered.
func TestC022_PriorObjectIDGap(t *testing.T) {
	t.Run("more than one instance", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			twice := propsBlock(t, wire.KVList{{Type: wire.PropPriorObjectIDGap, Value: 1}, {Type: wire.PropPriorObjectIDGap, Value: 1}})
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 4, Properties: twice, Payload: []byte("bad")})
			assert.Contains(t, p.expectMalformedDatagram().Reason, "Prior Object ID Gap more than once")
		})
	})
	t.Run("larger than the Object ID", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			s := p.subgroup(propsHdr(1, 0)).write(wire.SubgroupObject{ObjectID: 1, Properties: priorGaps(t, -1, 2)}, "bad")
			p.expectMalformedNext(p.stream(), s, "larger than its Object ID")
		})
	})
	t.Run("covering an object received", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			s := p.subgroup(propsHdr(1, 0)).objects(0, 1, 2).
				write(wire.SubgroupObject{ObjectID: 4, Properties: priorGaps(t, -1, 2)}, "bad")
			r := p.stream()
			readIDs(t, r, 0, 1, 2)
			p.expectMalformedNext(r, s, "covers object 2")
		})
	})
	t.Run("an object within a gap", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(propsHdr(1, 0)).write(wire.SubgroupObject{ObjectID: 10, Properties: priorGaps(t, -1, 2)}, "ok")
			readIDs(t, p.stream(), 10)
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 9, Payload: []byte("bad")})
			assert.Contains(t, p.expectMalformedDatagram().Reason, "in the Prior Object ID Gap of object {1, 10}")
		})
	})
	t.Run("consistent", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			p := newFakePub(t, wire.Params{}, nil)
			p.subgroup(propsHdr(1, 0)).objects(0, 1).
				write(wire.SubgroupObject{ObjectID: 4, Properties: priorGaps(t, -1, 2)}, "a").
				write(wire.SubgroupObject{ObjectID: 5, Properties: priorGaps(t, -1, 0)}, "b")
			readIDs(t, p.stream(), 0, 1, 4, 5)
			p.datagram(wire.ObjectDatagram{GroupID: 1, ObjectID: 7, Properties: priorGaps(t, -1, 1), Payload: []byte("c")})
			p.readDatagram(wire.Location{Group: 1, Object: 7})
			assert.NoError(t, p.sub.Err())
		})
	})
}

// fetchWithProps is a fetch stream object with Object Properties props.
func fetchWithProps(g, o uint64, props []byte) fetchEntry {
	e := fobj(g, o, "x")
	e.o.Properties = props
	return e
}

// TestC022_PriorGapsOnFetch: on a FETCH's stream, where a relay may have
// removed the gap properties (§10.8, §10.9), an object whose gaps
// contradict the objects before it in the stream is a Malformed Track: the
// fetch is cancelled (C022), the object not delivered (C023). An object
// whose gap was removed is not at fault.
func TestC022_PriorGapsOnFetch(t *testing.T) {
	cases := []struct {
		name    string
		entries func(t *testing.T) []fetchEntry
		want    string // in the Malformed Track's reason, which the last entry reveals; "" for none
	}{
		{"group gap covers the group before", func(t *testing.T) []fetchEntry {
			return []fetchEntry{fobj(2, 0, "a"), fetchWithProps(4, 0, priorGaps(t, 2, -1))}
		}, "covers group 2"},
		{"object gap covers the object before", func(t *testing.T) []fetchEntry {
			return []fetchEntry{fobj(4, 1, "a"), fetchWithProps(4, 3, priorGaps(t, -1, 2))}
		}, "covers object 1"},
		{"two IMMUTABLE_PROPERTIES", func(t *testing.T) []fetchEntry {
			return []fetchEntry{fetchWithProps(4, 3, propsBlock(t, wire.KVList{
				{Type: wire.PropImmutableProperties, Bytes: []byte{}}, {Type: wire.PropImmutableProperties, Bytes: []byte{}}}))}
		}, "IMMUTABLE_PROPERTIES more than once"},
		{"gaps kept or removed", func(t *testing.T) []fetchEntry {
			return []fetchEntry{fobj(1, 0, "a"), fetchWithProps(4, 0, priorGaps(t, 2, -1)), fobj(4, 3, "b"),
				fetchWithProps(4, 5, priorGaps(t, 2, 1))}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				s, fp := clientSession(t, nil)
				f, req, id := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 9})
				entries := c.entries(t)
				str := fp.openFetchRaw(encodeFetch(t, id, false, entries...))
				if c.want == "" {
					require.NoError(t, str.Close())
				}
				got, err := readFetch(t, f)
				if c.want == "" {
					assert.ErrorIs(t, err, io.EOF)
					assert.Len(t, got, len(entries))
					return
				}
				bad := entries[len(entries)-1].o
				for _, o := range got {
					assert.NotEqual(t, pl(bad.GroupID, bad.ObjectID), o.Location, "the object that revealed it")
				}
				assert.Contains(t, expectFetchMalformed(t, err, str, req, fp).Reason, c.want)
			})
		})
	}
}

// TestC022_PriorGapsAcrossFill: the rules span the track: a fill object
// (§3.4) inside a Prior Object ID Gap that an object of the subscription
// communicated, or covered by it, whichever the library reads first, is a
// Malformed Track, which cancels the subscription (C022).
func TestC022_PriorGapsAcrossFill(t *testing.T) {
	forClientSessions(t, "fill", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		sub, req, id := subscribeWithFill(t, s, fp, nextObjectWithFill, wire.Location{Group: 7, Object: 2})
		// Objects 1 and 2 of group 7 never exist, says the live object 3;
		// the fill brings object 1.
		enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 1, GroupID: 7, DefaultPriority: true, HasProperties: true}}
		b, err := enc.Header.Append(nil)
		require.NoError(t, err)
		b, err = enc.AppendObject(b, wire.SubgroupObject{ObjectID: 3, Properties: priorGaps(t, -1, 2), PayloadLength: 3})
		require.NoError(t, err)
		live, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
		require.NoError(t, err)
		_, err = live.Write(append(b, "s73"...))
		require.NoError(t, err)
		fill := fp.openFetch(id, fobj(7, 0, "f70"), fobj(7, 1, "f71"))
		require.NoError(t, fill.Close())
		var me *MalformedTrackError
		for range 4 {
			if _, err = sub.ReadObject(fakeCtx(t)); err != nil {
				break
			}
		}
		require.ErrorAs(t, err, &me)
		assert.Contains(t, me.Reason, "Prior Object ID Gap")
		req.expectStopSending(wire.ResetMalformedTrack)
		assert.ErrorAs(t, sub.Err(), &me)
		fp.alive(1)
	})
}

// TestPriorGapsNeverSent: the publishing paths refuse, before anything is
// sent or recorded, an object a receiver would take for malformed by
// §10.7 to §10.9: IMMUTABLE_PROPERTIES, a Prior Group ID Gap or a Prior
// Object ID Gap more than once, a gap larger than its ID, or gaps that
// contradict what the track published. The subscriber goes on reading the
// track, the objects written after the refusals included.
func TestPriorGapsNeverSent(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{}, nil, nil)
		w := lt.track.OpenSubgroup(1, 0, SubgroupOptions{Properties: true})
		for id := range uint64(3) {
			require.NoError(t, writeObject(w, id, nil, []byte("ok")))
		}
		bad := map[string][]byte{
			"IMMUTABLE_PROPERTIES more than once": propsBlock(t, wire.KVList{
				{Type: wire.PropImmutableProperties, Bytes: []byte{}}, {Type: wire.PropImmutableProperties, Bytes: []byte{}}}),
			"Prior Group ID Gap more than once": propsBlock(t, wire.KVList{
				{Type: wire.PropImmutableProperties, Bytes: priorGaps(t, 0, -1)}, {Type: wire.PropPriorGroupIDGap, Value: 0}}),
			"larger than its Group ID":  priorGaps(t, 2, -1),
			"larger than its Object ID": priorGaps(t, -1, 4),
			"covers object 2":           priorGaps(t, -1, 1),
		}
		for want, props := range bad {
			err := writeObject(w, 3, props, []byte("bad"))
			require.Error(t, err, "WriteObject, %s", want)
			assert.Contains(t, err.Error(), want)
			assert.ErrorIs(t, err, ErrMalformingObject)
			_, err = w.BeginObject(3, 3, props)
			assert.ErrorContains(t, err, want, "BeginObject")
		}
		g3 := lt.track.OpenSubgroup(3, 0, SubgroupOptions{Properties: true})
		assert.ErrorContains(t, writeObject(g3, 0, priorGaps(t, 2, -1), []byte("bad")), "covers group 1")
		require.NoError(t, writeObject(g3, 0, priorGaps(t, 1, -1), []byte("g3")), "group 2 never exists")
		assert.ErrorContains(t, lt.track.WriteDatagram(Object{Location: pl(2, 0), Payload: []byte("bad")}),
			"in the Prior Group ID Gap 1 of group 3")
		assert.ErrorContains(t, lt.track.WriteDatagram(Object{Location: pl(3, 5), Properties: priorGaps(t, 0, -1),
			Payload: []byte("bad")}), "Prior Group ID Gap 1 and 0")
		largest, ok := lt.track.Largest()
		require.True(t, ok)
		assert.Equal(t, pl(3, 0), largest, "a refused object is not recorded")
		require.NoError(t, writeObject(w, 4, priorGaps(t, -1, 1), []byte("next")), "object 3 never exists")
		require.NoError(t, w.Close())
		require.NoError(t, g3.Close())
		got := map[uint64][]uint64{}
		for range 2 {
			r, err := lt.sub.AcceptSubgroup(lt.ctx)
			require.NoError(t, err)
			got[r.Header().GroupID], _ = readSubgroup(t, r)
		}
		assert.Equal(t, map[uint64][]uint64{1: {0, 1, 2, 4}, 3: {0}}, got)
		assert.NoError(t, lt.sub.Err(), "the subscriber saw a malformed track")
	})
	t.Run("fetch", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			objs := fetchWrittenBy(t, pl(4, 3), func(w *FetchWriter) error {
				if err := w.WriteObject(pobj(2, 0, "a")); err != nil {
					return err
				}
				for _, props := range [][]byte{priorGaps(t, 2, -1), priorGaps(t, -1, 2)} {
					o := pobj(4, 1, "bad")
					o.Properties = props
					if err := w.WriteObject(o); err == nil {
						return errors.New("an object whose gaps make the track malformed was written")
					}
				}
				o := pobj(4, 1, "b")
				o.Properties = priorGaps(t, 1, 1)
				return w.WriteObject(o)
			})
			require.Len(t, objs, 2)
			assert.Equal(t, pl(4, 1), objs[1].Location)
		})
	})
}
