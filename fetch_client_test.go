package moqt

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Fake-publisher helpers for the subscriber's side of FETCH.

type fetchResult struct {
	f   *Fetch
	err error
}

// startFetch starts a library Fetch of testTrack and returns the fake's end
// of its request stream, with the FETCH read.
func startFetch(t *testing.T, s *Session, fp *fakePeer, params wire.Params) (<-chan fetchResult, *fakeStream, *wire.Fetch) {
	t.Helper()
	got := make(chan fetchResult, 1)
	go func() {
		f, err := s.Fetch(fakeCtx(t), testTrack, params)
		got <- fetchResult{f, err}
	}()
	req := fp.accept()
	m := expect[*wire.Fetch](req)
	return got, req, m
}

// fetchFake fetches with params and answers FETCH_OK with end.
func fetchFake(t *testing.T, s *Session, fp *fakePeer, params wire.Params, end wire.Location) (*Fetch, *fakeStream, uint64) {
	t.Helper()
	got, req, m := startFetch(t, s, fp, params)
	req.send(&wire.FetchOK{EndLocation: end})
	res := recvOrFail(t, got)
	require.NoError(t, res.err)
	return res.f, req, m.RequestID
}

// fetchEntry is one entry a fake publisher writes on a fetch stream.
type fetchEntry struct {
	o       wire.FetchObject
	payload []byte
}

func fobj(g, o uint64, payload string) fetchEntry {
	return fetchEntry{o: wire.FetchObject{GroupID: g, ObjectID: o, Priority: 7, PayloadLength: uint64(len(payload))}, payload: []byte(payload)}
}

func fgap(kind wire.EndOfRange, g, o uint64) fetchEntry {
	return fetchEntry{o: wire.FetchObject{EndOfRange: kind, GroupID: g, ObjectID: o}}
}

// encodeFetch encodes entries after a FETCH_HEADER for id.
func encodeFetch(t *testing.T, id uint64, desc bool, entries ...fetchEntry) []byte {
	t.Helper()
	b := wire.FetchHeader{RequestID: id}.Append(nil)
	enc := wire.FetchEncoder{Descending: desc}
	for _, e := range entries {
		var err error
		b, err = enc.AppendObject(b, e.o)
		require.NoError(t, err)
		b = append(b, e.payload...)
	}
	return b
}

// openFetchRaw opens a uni stream and writes b on it.
func (fp *fakePeer) openFetchRaw(b []byte) transport.SendStream {
	fp.t.Helper()
	str, err := fp.conn.OpenUniStreamSync(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	_, err = str.Write(b)
	require.NoError(fp.t, err)
	return str
}

// openFetch opens a fetch data stream for id with entries, in ascending
// order.
func (fp *fakePeer) openFetch(id uint64, entries ...fetchEntry) transport.SendStream {
	fp.t.Helper()
	return fp.openFetchRaw(encodeFetch(fp.t, id, false, entries...))
}

// readFetch reads a Fetch to its end.
func readFetch(t *testing.T, f *Fetch) ([]Object, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), fakeGuard)
	defer cancel()
	var out []Object
	for {
		o, err := f.ReadObject(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, o)
	}
}

// TestFetchReadsObjectsAndGaps: objects and gap markers come out in order,
// each field resolved, then io.EOF at the FIN; this end finishes its
// direction of the request stream then (§6.4.2.2).
func TestFetchReadsObjectsAndGaps(t *testing.T) {
	forClientSessions(t, "fetch", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{Group: 1}, 3))}
		f, req, id := fetchFake(t, s, fp, params, wire.Location{Group: 3, Object: 1})
		assert.Equal(t, wire.Location{Group: 3, Object: 1}, f.End)
		dg := fobj(2, 0, "dgram")
		dg.o.Datagram = true
		withProps := fobj(3, 1, "last")
		withProps.o.Properties = []byte{0x02, 0x05} // type 2 (even), value 5
		withProps.o.SubgroupID = 4
		str := fp.openFetch(id, fobj(1, 0, "a"), fgap(wire.EndOfNonExistentRange, 1, 5), dg, withProps)
		require.NoError(t, str.Close())
		got, err := readFetch(t, f)
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, got, 4)
		assert.Equal(t, wire.Location{Group: 1}, got[0].Location)
		assert.Equal(t, []byte("a"), got[0].Payload)
		assert.Equal(t, wire.Some[uint8](7), got[0].Priority)
		assert.Equal(t, wire.EndOfNonExistentRange, got[1].EndOfRange)
		assert.Equal(t, wire.Location{Group: 1, Object: 5}, got[1].Location)
		assert.True(t, got[2].Datagram)
		assert.Equal(t, []byte("dgram"), got[2].Payload)
		assert.Equal(t, uint64(4), got[3].SubgroupID)
		assert.Equal(t, []byte{0x02, 0x05}, got[3].Properties)
		assert.Equal(t, wire.ObjectStatus(0), got[3].Status)
		req.expectFIN()
		require.NoError(t, f.Close())
		require.NoError(t, f.Close())
		time.Sleep(20 * time.Millisecond)
		assert.NoError(t, req.str.Context().Err(), "Close after the FIN sends no STOP_SENDING: the fetch was complete")
		req.fin()
	})
}

// TestFetchDataBeforeFetchOK: the data stream may come before FETCH_OK
// (§9.12): it is held, then read once FETCH_OK arrives.
func TestFetchDataBeforeFetchOK(t *testing.T) {
	forClientSessions(t, "early", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		got, req, m := startFetch(t, s, fp, wire.Params{})
		str := fp.openFetch(m.RequestID, fobj(0, 0, "x"), fobj(0, 1, "y"))
		require.NoError(t, str.Close())
		select {
		case <-got:
			require.FailNow(t, "Fetch returned before FETCH_OK")
		case <-time.After(50 * time.Millisecond):
		}
		req.send(&wire.FetchOK{EndLocation: wire.Location{Object: 1}})
		res := recvOrFail(t, got)
		require.NoError(t, res.err)
		objs, err := readFetch(t, res.f)
		require.ErrorIs(t, err, io.EOF)
		require.Len(t, objs, 2)
		assert.Equal(t, []byte("y"), objs[1].Payload)
	})
}

// TestFetchRequestErrorAfterObjects: objects sent before a REQUEST_ERROR
// are discarded and the data stream stopped (§3.2.1); the publisher's FIN
// after it has this end finish its direction (§6.4.2.2). Without that FIN a
// publisher whose refusals a relay forwarded waited in Close for the relay
// to finish the streams: moqt pub exited 1 after a minute, "33 request(s)
// not confirmed", when a hostile client sent FETCHes through moqt relay.
func TestFetchRequestErrorAfterObjects(t *testing.T) {
	forClientSessions(t, "reqerr", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		got, req, m := startFetch(t, s, fp, wire.Params{})
		str := fp.openFetch(m.RequestID, fobj(0, 0, "x"))
		req.send(&wire.RequestError{ErrorCode: wire.ReqInvalidRange, ErrorReason: "no"})
		req.fin()
		res := recvOrFail(t, got)
		var re *RequestError
		require.ErrorAs(t, res.err, &re)
		assert.Equal(t, wire.ReqInvalidRange, re.Code)
		assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, str))
		req.expectFIN()
	})
}

// TestC086_FetchCancelStopsRequestStream: cancelling a FETCH sends
// STOP_SENDING on its request stream (C086) and on its data stream, by
// Close after FETCH_OK and by the context before it.
func TestC086_FetchCancelStopsRequestStream(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "close", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			f, req, id := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 5})
			str := fp.openFetch(id, fobj(0, 0, "x"))
			o, err := f.ReadObject(fakeCtx(t))
			require.NoError(t, err)
			assert.Equal(t, []byte("x"), o.Payload)
			read := goErr(func() error { _, err := f.ReadObject(fakeCtx(t)); return err })
			require.NoError(t, f.Close())
			assert.ErrorIs(t, recvOrFail(t, read), ErrCancelled, "Close interrupts ReadObject")
			req.expectStopSending(wire.ResetCancelled)
			assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, str))
			_, err = f.ReadObject(fakeCtx(t))
			assert.ErrorIs(t, err, ErrCancelled)
		})
		forClientSessions(t, "ctx", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			ctx, cancel := context.WithCancel(t.Context())
			done := goErr(func() error { _, err := s.Fetch(ctx, testTrack, wire.Params{}); return err })
			req := fp.accept()
			expect[*wire.Fetch](req)
			cancel()
			assert.ErrorIs(t, recvOrFail(t, done), context.Canceled)
			req.expectStopSending(wire.ResetCancelled)
		})
		// An object past Config.MaxObjectSize stops the data stream: the
		// fetch is over, so its request stream is stopped too.
		forClientSessions(t, "too large", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, &Config{MaxObjectSize: 4})
			f, req, id := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 5})
			str := fp.openFetch(id, fobj(0, 0, "x"), fobj(0, 1, "too large"))
			_, err := f.ReadObject(fakeCtx(t))
			require.NoError(t, err)
			_, err = f.ReadObject(fakeCtx(t))
			assert.ErrorIs(t, err, ErrObjectTooLarge)
			assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, str))
			req.expectStopSending(wire.ResetCancelled)
		})
	})
}

// TestC091_FetchMandatoryTrackProperty: a FETCH_OK with a Mandatory Track
// Property this end does not understand cancels the fetch (C091).
func TestC091_FetchMandatoryTrackProperty(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "mandatory", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			got, req, _ := startFetch(t, s, fp, wire.Params{})
			req.send(&wire.FetchOK{EndLocation: wire.Location{Group: 1}, TrackProperties: wire.KVList{{Type: 0x4000, Value: 1}}})
			res := recvOrFail(t, got)
			var re *RequestError
			require.ErrorAs(t, res.err, &re)
			assert.Equal(t, wire.ReqUnsupportedExtension, re.Code)
			req.expectStopSending(wire.ResetCancelled)
			fp.alive(1)
		})
	})
}

// TestC096_FetchEndBeforeStart: a FETCH_OK End Location before the
// FETCH's Start Location closes the session with PROTOCOL_VIOLATION. On 18
// and 19 both are in the draft's encoding (fetchOKEnd), so the "end" case
// there is End = Start, a range of no Object (18 §10.13).
func TestC096_FetchEndBeforeStart(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "end", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			got, req, _ := startFetch(t, s, fp, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 5, Object: 2}))})
			req.send(&wire.FetchOK{EndLocation: fetchOKEnd(t, wire.Location{Group: 5, Object: 1})})
			res := recvOrFail(t, got)
			require.Error(t, res.err)
			fp.expectClose(wire.ProtocolViolation)
		})
		forClientSessions(t, "equal", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			got, req, _ := startFetch(t, s, fp, wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 5, Object: 2}))})
			req.send(&wire.FetchOK{EndLocation: fetchOKEnd(t, wire.Location{Group: 5, Object: 2})})
			res := recvOrFail(t, got)
			require.NoError(t, res.err, "End equal to Start is a valid one-object range")
			fp.alive(1)
		})
	})
}

// badFetchStream opens, for a fetch answered with FETCH_OK, a data stream
// of raw entry bytes and expects the session to close with code.
func badFetchStream(t *testing.T, connect fakeConnector, params wire.Params, entries []byte, code wire.SessionErrorCode) {
	s, fp := connect(t, nil)
	f, _, id := fetchFake(t, s, fp, params, wire.Location{Group: wire.MaxVarint, Object: wire.MaxVarint})
	str := fp.openFetchRaw(append(wire.FetchHeader{RequestID: id}.Append(nil), entries...))
	_ = str.Close()
	_, err := readFetch(t, f)
	var se *SessionError
	assert.ErrorAs(t, err, &se)
	fp.expectClose(code)
}

// varints encodes vs.
func varints(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = wire.AppendVarint(b, v)
	}
	return b
}

// TestC098_FetchFirstObjectAbsolute: a first object without Group ID and
// Object ID Deltas closes the session (C098).
func TestC098_FetchFirstObjectAbsolute(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "nogroup", func(t *testing.T, connect fakeConnector) {
			// flags: object delta + priority; no group delta.
			badFetchStream(t, connect, wire.Params{}, append(varints(0x04|0x10, 0), append([]byte{1}, varints(0)...)...), wire.ProtocolViolation)
		})
		forClientSessions(t, "noobject", func(t *testing.T, connect fakeConnector) {
			// flags: group delta + priority; no object delta.
			badFetchStream(t, connect, wire.Params{}, append(varints(0x08|0x10, 0), append([]byte{1}, varints(0)...)...), wire.ProtocolViolation)
		})
	})
}

// TestC099_FetchFirstObjectRefersToPrior: a first object taking its
// Subgroup ID or Priority from a prior object closes the session (C099).
func TestC099_FetchFirstObjectRefersToPrior(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "subgroup", func(t *testing.T, connect fakeConnector) {
			badFetchStream(t, connect, wire.Params{}, append(varints(0x08|0x04|0x10|0x01, 0, 0), append([]byte{1}, varints(0)...)...), wire.ProtocolViolation)
		})
		forClientSessions(t, "priority", func(t *testing.T, connect fakeConnector) {
			badFetchStream(t, connect, wire.Params{}, varints(0x08|0x04, 0, 0, 0), wire.ProtocolViolation)
		})
	})
}

// TestC100_FetchGroupOutOfRange: a Group ID Delta that leaves 0..2^64-1
// closes the session (C100): below 0 in descending order, above 2^64-1 in
// ascending.
func TestC100_FetchGroupOutOfRange(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "underflow", func(t *testing.T, connect fakeConnector) {
			first := append(varints(0x08|0x04|0x10, 1, 0), append([]byte{1}, varints(0)...)...)
			next := varints(0x08|0x04, 1, 0, 0) // group 1 - (1 + 1) < 0
			badFetchStream(t, connect, wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)}, append(first, next...), wire.ProtocolViolation)
		})
		forClientSessions(t, "overflow", func(t *testing.T, connect fakeConnector) {
			first := append(varints(0x08|0x04|0x10, wire.MaxVarint-1, 0), append([]byte{1}, varints(0)...)...)
			next := varints(0x08|0x04, 1, 0, 0) // MaxVarint - 1 + 1 + 1
			badFetchStream(t, connect, wire.Params{}, append(first, next...), wire.ProtocolViolation)
		})
	})
}

// TestC101_FetchObjectOverflow: an Object ID past 2^64-1 closes the
// session (C101).
func TestC101_FetchObjectOverflow(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "overflow", func(t *testing.T, connect fakeConnector) {
			first := append(varints(0x08|0x04|0x10, 0, wire.MaxVarint), append([]byte{1}, varints(0)...)...)
			next := varints(0x00, 0) // object ID MaxVarint + 1; payload length 0
			badFetchStream(t, connect, wire.Params{}, append(first, next...), wire.ProtocolViolation)
		})
	})
}

// TestFetchBadStreamData: invalid Serialization Flags and a stream that
// ends inside an object close the session (§11.4.1).
func TestFetchBadStreamData(t *testing.T) {
	forClientSessions(t, "flags", func(t *testing.T, connect fakeConnector) {
		badFetchStream(t, connect, wire.Params{}, varints(0x80, 0, 0), wire.ProtocolViolation)
	})
	forClientSessions(t, "truncated", func(t *testing.T, connect fakeConnector) {
		first := append(varints(0x08|0x04|0x10, 0, 0), append([]byte{1}, varints(10)...)...)
		badFetchStream(t, connect, wire.Params{}, append(first, "short"...), wire.ProtocolViolation)
	})
}

// TestC103_FetchDatagramIgnoresSubgroupBits: with 0x40 set, the two low
// bits are ignored (C103): the object is a datagram with no Subgroup ID,
// and the session stays up.
func TestC103_FetchDatagramIgnoresSubgroupBits(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forClientSessions(t, "bits", func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			f, _, id := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 1})
			// 0x40 | 0x03: were the bits read, a Subgroup ID field would be
			// expected, and the payload length would be parsed as one.
			entry := append(varints(0x40|0x08|0x04|0x10|0x03, 0, 0), append([]byte{9}, varints(2)...)...)
			str := fp.openFetchRaw(append(append(wire.FetchHeader{RequestID: id}.Append(nil), entry...), "hi"...))
			require.NoError(t, str.Close())
			objs, err := readFetch(t, f)
			require.ErrorIs(t, err, io.EOF)
			require.Len(t, objs, 1)
			assert.True(t, objs[0].Datagram)
			assert.Equal(t, uint64(0), objs[0].SubgroupID)
			assert.Equal(t, []byte("hi"), objs[0].Payload)
			fp.alive(1)
		})
	})
}

// TestFetchResetMidStream: a reset after some objects is reported with its
// code, after the objects.
func TestFetchResetMidStream(t *testing.T) {
	forClientSessions(t, "reset", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		f, req, id := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 2})
		str := fp.openFetch(id, fobj(0, 0, "x"))
		o, err := f.ReadObject(fakeCtx(t))
		require.NoError(t, err)
		assert.Equal(t, []byte("x"), o.Payload)
		str.CancelWrite(uint64(wire.ResetUnknownObjectStatus))
		_, err = f.ReadObject(fakeCtx(t))
		var se *StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.ResetUnknownObjectStatus, se.Code)
		// The fetch is over (§3.2.1): this end finishes its direction of
		// the request stream without waiting for Close, and forgets it.
		req.expectFIN()
		settle(t, func() bool { return s.fetches.lookup(id) == nil }, "fetch route dropped")
	})
}

// TestFetchMalformedEntries: an entry outside the fetched range, or out of
// order, is a Malformed Track (§12.1): the fetch is cancelled and
// ReadObject says why; the session stays up.
func TestFetchMalformedEntries(t *testing.T) {
	cases := map[string][]fetchEntry{
		"past-end":     {fobj(2, 0, "a"), fobj(2, 6, "b")},
		"before-start": {fobj(1, 9, "a")},
		"backwards":    {fobj(2, 3, "a"), fgap(wire.EndOfUnknownRange, 2, 1)},
	}
	for name, entries := range cases {
		forClientSessions(t, name, func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			params := wire.Params{LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 2}))}
			f, req, id := fetchFake(t, s, fp, params, wire.Location{Group: 2, Object: 5})
			str := fp.openFetch(id, entries...)
			_, err := readFetch(t, f)
			expectFetchMalformed(t, err, str, req, fp)
		})
	}
}

// expectFetchMalformed requires err, from a Fetch's reads, to report a
// Malformed Track, the fetch's data stream str to be stopped and its
// request stream req to see STOP_SENDING, both with MALFORMED_TRACK, and
// the session to go on.
func expectFetchMalformed(t *testing.T, err error, str transport.SendStream, req *fakeStream, fp *fakePeer) *MalformedTrackError {
	t.Helper()
	var me *MalformedTrackError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, uint64(wire.ResetMalformedTrack), expectStopped(t, str))
	req.expectStopSending(wire.ResetMalformedTrack)
	fp.alive(1)
	return me
}

// TestFetchStreamRouting: a FETCH_HEADER naming a Request ID this end never
// used closes the session; a second stream for one FETCH, and a stream for
// a FETCH that ended, are stopped with CANCELLED.
func TestFetchStreamRouting(t *testing.T) {
	forClientSessions(t, "unknown", func(t *testing.T, connect fakeConnector) {
		_, fp := connect(t, nil)
		fp.openFetch(1, fobj(0, 0, "x")) // odd: the fake's own parity
		fp.expectClose(wire.ProtocolViolation)
	})
	forClientSessions(t, "unused", func(t *testing.T, connect fakeConnector) {
		_, fp := connect(t, nil)
		fp.openFetch(40, fobj(0, 0, "x")) // even, not allocated yet
		fp.expectClose(wire.ProtocolViolation)
	})
	forClientSessions(t, "second-and-ended", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		f, _, id := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 1})
		first := fp.openFetch(id, fobj(0, 0, "x"))
		_, err := f.ReadObject(fakeCtx(t))
		require.NoError(t, err)
		second := fp.openFetch(id, fobj(0, 0, "y"))
		assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, second))
		require.NoError(t, first.Close())
		_, err = f.ReadObject(fakeCtx(t))
		require.ErrorIs(t, err, io.EOF)
		late := fp.openFetch(id, fobj(0, 0, "z"))
		assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, late))
		fp.alive(1)
	})
}

// TestFetchHeldStreamsBounded: data streams that arrive before their
// FETCH_OK are held within Config.MaxPendingStreams; beyond that they are
// stopped with EXCESSIVE_LOAD and their fetch fails; a publisher repeating
// one Request ID gets CANCELLED for every stream past the first.
func TestFetchHeldStreamsBounded(t *testing.T) {
	forClientSessions(t, "bounded", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, &Config{MaxPendingStreams: 2})
		type started struct {
			got <-chan fetchResult
			req *fakeStream
			str transport.SendStream
		}
		var all []started
		for range 3 {
			got, req, m := startFetch(t, s, fp, wire.Params{})
			str := fp.openFetch(m.RequestID, fobj(0, 0, "x"))
			waitRouted(t, s, m.RequestID)
			if len(all) == 0 {
				for range 5 {
					dup := fp.openFetch(m.RequestID, fobj(0, 0, "dup"))
					assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, dup))
				}
			}
			all = append(all, started{got, req, str})
		}
		assert.Equal(t, uint64(wire.ResetExcessiveLoad), expectStopped(t, all[2].str))
		for i, st := range all {
			_ = st.str.Close() // the third was stopped
			st.req.send(&wire.FetchOK{EndLocation: wire.Location{Group: 1}})
			res := recvOrFail(t, st.got)
			require.NoError(t, res.err)
			objs, err := readFetch(t, res.f)
			if i < 2 {
				require.ErrorIs(t, err, io.EOF)
				assert.Len(t, objs, 1)
			} else {
				assert.True(t, errors.Is(err, errHeldStreams), "%v", err)
			}
		}
		settle(t, func() bool {
			s.routes.mu.Lock()
			defer s.routes.mu.Unlock()
			return s.routes.pendingStreams == 0
		}, "held slots released")
	})
}

// waitRouted waits until the data stream of this end's request id has been
// routed to its Fetch (streams need not arrive in the order they opened).
func waitRouted(t *testing.T, s *Session, id uint64) {
	t.Helper()
	settle(t, func() bool {
		f, _ := s.fetches.lookup(id).(*Fetch)
		if f == nil {
			return false
		}
		f.data.mu.Lock()
		defer f.data.mu.Unlock()
		return f.data.r != nil || f.data.err != nil
	}, "data stream routed")
}

// TestFetchUpdate: REQUEST_UPDATE on a FETCH waits for its answer; a
// refused one returns *RequestError.
func TestFetchUpdate(t *testing.T) {
	forClientSessions(t, "update", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		f, req, _ := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 1})
		done := goErr(func() error { return f.Update(fakeCtx(t), wire.Params{SubscriberPriority: wire.Some[uint8](3)}) })
		u := expect[*wire.RequestUpdate](req)
		assert.Equal(t, wire.Some[uint8](3), u.Parameters.SubscriberPriority)
		req.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, done))
		done = goErr(func() error { return f.Update(fakeCtx(t), wire.Params{SubscriberPriority: wire.Some[uint8](4)}) })
		expect[*wire.RequestUpdate](req)
		req.send(&wire.RequestError{ErrorCode: wire.ReqInternalError, ErrorReason: "no"})
		var re *RequestError
		require.ErrorAs(t, recvOrFail(t, done), &re)
		assert.Error(t, f.Update(fakeCtx(t), wire.Params{Forward: wire.Some(true)}), "FORWARD is not a FETCH's")
	})
}

// TestFetchGoaway: a FETCH the publisher closes after GOAWAY without an
// answer fails with ErrGoingAway; after the session's GOAWAY no FETCH is
// sent (§9.2).
func TestFetchGoaway(t *testing.T) {
	forClientSessions(t, "goaway", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		got, req, _ := startFetch(t, s, fp, wire.Params{})
		req.send(&wire.Goaway{})
		req.fin()
		assert.ErrorIs(t, recvOrFail(t, got).err, ErrGoingAway)
		fp.sendControl(&wire.Goaway{})
		settle(t, func() bool { return s.away.received() }, "GOAWAY received")
		_, err := s.Fetch(fakeCtx(t), testTrack, wire.Params{})
		assert.ErrorIs(t, err, ErrGoingAway)
	})
}

// TestFetchSessionEnd: the session's end wakes a blocked ReadObject and
// releases the fetch (the package's goroutine-leak check).
func TestFetchSessionEnd(t *testing.T) {
	forClientSessions(t, "end", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		f, _, _ := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 1})
		read := goErr(func() error { _, err := f.ReadObject(fakeCtx(t)); return err })
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, s.Close())
		assert.Error(t, recvOrFail(t, read))
		_, err := f.ReadObject(fakeCtx(t))
		assert.Error(t, err)
		require.NoError(t, f.Close())
	})
}

// TestFetchDescending: with GROUP_ORDER Descending the stream's Group ID
// Deltas count down (§11.4.1.1), and groups must come in that order.
func TestFetchDescending(t *testing.T) {
	forClientSessions(t, "desc", func(t *testing.T, connect fakeConnector) {
		s, fp := connect(t, nil)
		params := wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)}
		f, _, id := fetchFake(t, s, fp, params, wire.Location{Group: 5, Object: 1})
		str := fp.openFetchRaw(encodeFetch(t, id, true, fobj(5, 0, "a"), fobj(5, 1, "b"), fobj(3, 0, "c"), fgap(wire.EndOfNonExistentRange, 1, 4), fobj(0, 2, "d")))
		require.NoError(t, str.Close())
		objs, err := readFetch(t, f)
		require.ErrorIs(t, err, io.EOF)
		var locs []wire.Location
		for _, o := range objs {
			locs = append(locs, o.Location)
		}
		assert.Equal(t, []wire.Location{{Group: 5}, {Group: 5, Object: 1}, {Group: 3}, {Group: 1, Object: 4}, {Group: 0, Object: 2}}, locs)
	})
}

// TestFetchAnswerRules: a FETCH has exactly one answer (C085, seen from
// the subscriber): a second FETCH_OK, or a REQUEST_OK with no
// REQUEST_UPDATE outstanding, closes the session.
func TestFetchAnswerRules(t *testing.T) {
	for name, m := range map[string]wire.Message{
		"second-ok":  &wire.FetchOK{EndLocation: wire.Location{Group: 1}},
		"request-ok": &wire.RequestOK{},
	} {
		forClientSessions(t, name, func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, nil)
			_, req, _ := fetchFake(t, s, fp, wire.Params{}, wire.Location{Group: 1})
			req.send(m)
			fp.expectClose(wire.ProtocolViolation)
		})
	}
}
