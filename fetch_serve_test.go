package moqt

import (
	"bufio"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// ---- fixtures for the publisher side of FETCH and fill ----

// pubFetchMsg is a FETCH of track with params in the test's draft
// (draftOf): on 18 and 19 a Standalone FETCH whose Start and End Location
// carry params' LOCATION_FILTER, converted by standaloneRange (whose output
// TestDraft18FetchSentStandalone checks), the filter left out.
func pubFetchMsg(t testing.TB, id uint64, track wire.FullTrackName, params wire.Params) *wire.Fetch {
	m := &wire.Fetch{RequestID: id, TrackNamespace: track.Namespace, TrackName: track.Name, Parameters: params}
	v := draftOf(t)
	if !v.Profile().JoiningFetch {
		return m
	}
	start, end, err := standaloneRange(v, params.LocationFilter)
	require.NoError(t, err)
	m.FetchType, m.StartLocation, m.EndLocation = wire.FetchStandalone, start, end
	m.Parameters.LocationFilter = wire.Opt[wire.LocationFilter]{}
	return m
}

// pubSliceCursor yields entries, then io.EOF.
type pubSliceCursor struct{ entries []Object }

func (c *pubSliceCursor) next(context.Context) (Object, error) {
	if len(c.entries) == 0 {
		return Object{}, io.EOF
	}
	o := c.entries[0]
	c.entries = c.entries[1:]
	return o, nil
}

// pubPendingCursor yields before, then waits for an object at at whose
// publication has begun: it reports it timed out once ctx ends, as the
// cache does, and records ctx's error; then after, then io.EOF.
type pubPendingCursor struct {
	before, after []Object
	at            wire.Location
	waited        chan error
	state         int
}

func (c *pubPendingCursor) next(ctx context.Context) (Object, error) {
	switch {
	case len(c.before) > 0:
		o := c.before[0]
		c.before = c.before[1:]
		return o, nil
	case c.state == 0:
		c.state = 1
		<-ctx.Done()
		c.waited <- ctx.Err()
		return Object{Location: c.at, EndOfRange: wire.EndOfTimedOutRange}, nil
	case len(c.after) > 0:
		o := c.after[0]
		c.after = c.after[1:]
		return o, nil
	}
	return Object{}, io.EOF
}

// pubBlockedCursor yields first, then waits until ctx ends or release is
// closed, then io.EOF: a fetch or fill that stays open.
type pubBlockedCursor struct {
	first   []Object
	release chan struct{}
}

func (c *pubBlockedCursor) next(ctx context.Context) (Object, error) {
	if len(c.first) > 0 {
		o := c.first[0]
		c.first = c.first[1:]
		return o, nil
	}
	select {
	case <-ctx.Done():
	case <-c.release:
	}
	return Object{}, io.EOF
}

// pubUseCursor makes every FETCH and fill of s served from the cursors mk
// returns.
func pubUseCursor(s *Session, mk func(w filter.Window, desc bool) fetchCursor) {
	f := func(_ *LocalTrack, w filter.Window, desc bool) fetchCursor { return mk(w, desc) }
	s.serving.source.Store(&f)
}

// pubTrack is a LocalTrack named trackA whose Largest Object is largest,
// if set.
func pubTrack(t *testing.T, largest wire.Opt[wire.Location]) *LocalTrack {
	lt, err := NewLocalTrack(trackA, nil)
	require.NoError(t, err)
	if largest.Set {
		lt.noteObject(largest.Value)
	}
	return lt
}

// fetchHandler serves SUBSCRIBE and FETCH from lt; the error of each
// Fetch goes to the returned channel.
func fetchHandler(lt *LocalTrack) (Handler, <-chan error) {
	errs := make(chan error, 16)
	return HandlerFunc(func(r Request) {
		switch r := r.(type) {
		case *FetchRequest:
			errs <- lt.Fetch(r)
		case *SubscribeRequest:
			_, _ = lt.Accept(r, AcceptOptions{})
		default:
			DefaultHandler.ServeMOQT(r)
		}
	}), errs
}

// pubFetchStream is a fetch data stream the library opened, as the fake reads
// it.
type pubFetchStream struct {
	t   *testing.T
	str transport.ReceiveStream
	br  *bufio.Reader
	dec wire.FetchDecoder
	id  uint64 // the FETCH_HEADER's Request ID
}

// pubEntry is one entry read from a fetch stream.
type pubEntry struct {
	wire.FetchObject
	Payload []byte
}

// acceptPubFetch accepts the library's next unidirectional stream, which must
// be a fetch stream, and reads its FETCH_HEADER.
func (fp *fakePeer) acceptPubFetch(desc bool) *pubFetchStream {
	fp.t.Helper()
	str, err := fp.conn.AcceptUniStream(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	br := bufio.NewReader(str)
	h, err := wire.ReadFetchHeader(br)
	require.NoError(fp.t, err)
	return &pubFetchStream{t: fp.t, str: str, br: br, dec: wire.FetchDecoder{Descending: desc}, id: h.RequestID}
}

// next reads the next entry and its payload.
func (d *pubFetchStream) next() (pubEntry, error) {
	o, err := d.dec.Read(d.br, nil)
	if err != nil {
		return pubEntry{}, err
	}
	p := make([]byte, o.PayloadLength)
	_, err = io.ReadFull(d.br, p)
	return pubEntry{FetchObject: o, Payload: p}, err
}

// all reads every entry up to the FIN, which must come.
func (d *pubFetchStream) all() []pubEntry {
	d.t.Helper()
	var out []pubEntry
	for {
		e, err := d.next()
		if errors.Is(err, io.EOF) && !errors.Is(err, wire.ErrTruncated) {
			return out
		}
		require.NoError(d.t, err)
		out = append(out, e)
	}
}

// expectReset requires the stream to end, after any entries, with a
// reset by the library with code.
func (d *pubFetchStream) expectReset(code wire.ResetCode) {
	d.t.Helper()
	for {
		_, err := d.next()
		if err == nil {
			continue
		}
		var se *transport.StreamError
		require.ErrorAs(d.t, err, &se, "the stream ended with %v", err)
		assert.Equal(d.t, uint64(code), se.Code, "reset code")
		return
	}
}

// locs lists the Locations of entries, End of Range markers included.
func pubLocs(es []pubEntry) []wire.Location {
	out := make([]wire.Location, len(es))
	for i, e := range es {
		out[i] = e.Location()
	}
	return out
}

func pl(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }

func pobj(g, o uint64, payload string) Object {
	return Object{Location: pl(g, o), Payload: []byte(payload)}
}

// ---- FETCH served from a LocalTrack ----

// C085: a FETCH gets exactly one answer: FETCH_OK, then, once the data
// stream is done, FIN and nothing more; a refused one REQUEST_ERROR and
// FIN.
func TestC085_OneFetchAnswer(t *testing.T) {
	t.Run("FETCH_OK", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			lt := pubTrack(t, wire.Some(pl(3, 2)))
			h, errs := fetchHandler(lt)
			s, fp := serverSession(t, &Config{Handler: h})
			pubUseCursor(s, func(filter.Window, bool) fetchCursor {
				return &pubSliceCursor{entries: []Object{pobj(3, 0, "a"), pobj(3, 2, "b")}}
			})
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			fs.fin()
			ok := expect[*wire.FetchOK](fs)
			assert.Equal(t, fetchOKEnd(t, pl(3, 2)), ok.EndLocation)
			assert.False(t, ok.EndOfTrack)
			d := fp.acceptPubFetch(false)
			assert.Equal(t, uint64(0), d.id)
			assert.Equal(t, []wire.Location{pl(3, 0), pl(3, 2)}, pubLocs(d.all()))
			fs.expectFIN() // no second answer
			require.NoError(t, recvOrFail(t, errs))
		})
	})
	t.Run("REQUEST_ERROR", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			lt := pubTrack(t, wire.Some(pl(3, 2)))
			h, errs := fetchHandler(lt)
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{LocationFilter: wire.Some(wire.StartFilter(pl(4, 0)))}))
			fs.fin()
			assert.Equal(t, wire.ReqInvalidRange, expect[*wire.RequestError](fs).ErrorCode)
			fs.expectFIN()
			require.Error(t, recvOrFail(t, errs))
		})
	})
}

// C093: INVALID_RANGE when nothing was published, or when the start is
// past the Largest Object.
func TestC093_FetchInvalidRange(t *testing.T) {
	for _, tc := range []struct {
		name    string
		largest wire.Opt[wire.Location]
		filter  wire.Opt[wire.LocationFilter]
	}{
		{"nothing published", wire.Opt[wire.Location]{}, wire.Opt[wire.LocationFilter]{}},
		{"start past Largest Object", wire.Some(pl(2, 5)), wire.Some(wire.StartFilter(pl(2, 6)))},
		{"start group past Largest Object", wire.Some(pl(2, 5)), wire.Some(wire.RangeFilterTo(pl(3, 0), 9))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				h, _ := fetchHandler(pubTrack(t, tc.largest))
				_, fp := serverSession(t, &Config{Handler: h})
				fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{LocationFilter: tc.filter}))
				assert.Equal(t, wire.ReqInvalidRange, expect[*wire.RequestError](fs).ErrorCode)
				fs.expectFIN()
			})
		})
	}
}

// C095: FETCH_OK reports the end of the range, known when it goes out: the
// requested End Location cut at the Largest Object, and an application
// serving the FETCH may send objects before it.
func TestC095_FetchOKCarriesTheKnownEnd(t *testing.T) {
	t.Run("LocalTrack", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			filter wire.LocationFilter
			end    wire.Location
		}{
			{"end before Largest Object", wire.RangeFilterToObject(pl(1, 0), pl(2, 1)), pl(2, 1)},
			{"end past Largest Object", wire.RangeFilterToObject(pl(1, 0), pl(9, 0)), pl(3, 2)},
			{"whole end group past Largest Object", wire.RangeFilterTo(pl(1, 0), 3), pl(3, 2)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				forDrafts(t, sharedDrafts, func(t *testing.T) {
					h, _ := fetchHandler(pubTrack(t, wire.Some(pl(3, 2))))
					_, fp := serverSession(t, &Config{Handler: h})
					fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{LocationFilter: wire.Some(tc.filter)}))
					assert.Equal(t, fetchOKEnd(t, tc.end), expect[*wire.FetchOK](fs).EndLocation)
					d := fp.acceptPubFetch(false)
					// The track keeps nothing: one unknown range up to the end.
					es := d.all()
					require.Len(t, es, 1)
					assert.Equal(t, wire.EndOfUnknownRange, es[0].EndOfRange)
					assert.Equal(t, tc.end, es[0].Location())
				})
			})
		}
	})
	t.Run("application", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			accept := make(chan struct{})
			h := HandlerFunc(func(r Request) {
				fr := r.(*FetchRequest)
				w := fr.Objects()
				_ = w.WriteObject(pobj(1, 0, "early"))
				<-accept
				_ = fr.Accept(true, pl(1, 0), nil)
				_ = w.Close()
			})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			d := fp.acceptPubFetch(false)
			e, err := d.next()
			require.NoError(t, err)
			assert.Equal(t, "early", string(e.Payload), "the object comes before FETCH_OK")
			close(accept)
			ok := expect[*wire.FetchOK](fs)
			assert.True(t, ok.EndOfTrack)
			assert.Equal(t, fetchOKEnd(t, pl(1, 0)), ok.EndLocation)
			assert.Empty(t, d.all())
			fs.expectFIN()
		})
	})
}

// C094: groups go in the FETCH's group order; an entry out of order fails
// and writes nothing.
func TestC094_FetchGroupOrder(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		results := make(chan []error, 1)
		h := HandlerFunc(func(r Request) {
			fr := r.(*FetchRequest)
			w := fr.Objects()
			_ = fr.Accept(false, pl(5, 1), nil)
			results <- []error{
				w.WriteObject(pobj(5, 0, "a")),
				w.WriteObject(pobj(6, 0, "wrong order")),
				w.WriteObject(Object{Location: pl(6, 3), EndOfRange: wire.EndOfUnknownRange}),
				w.WriteObject(pobj(5, 0, "again")),
				w.WriteObject(pobj(5, 1, "b")),
				w.WriteObject(pobj(4, 0, "c")),
				w.Close(),
			}
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)}))
		expect[*wire.FetchOK](fs)
		d := fp.acceptPubFetch(true)
		assert.Equal(t, []wire.Location{pl(5, 0), pl(5, 1), pl(4, 0)}, pubLocs(d.all()))
		errs := recvOrFail(t, results)
		assert.NoError(t, errs[0])
		assert.Error(t, errs[1], "a later group in descending order")
		assert.Error(t, errs[2], "an End of Range in a later group")
		assert.Error(t, errs[3], "an object again")
		assert.NoError(t, errors.Join(errs[4:]...))
	})
}

// C102: an object with the Datagram forwarding preference goes on a fetch
// stream with flag 0x40 and no Subgroup ID.
func TestC102_FetchDatagramObjectsFlagged(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		lt := pubTrack(t, wire.Some(pl(0, 1)))
		h, _ := fetchHandler(lt)
		s, fp := serverSession(t, &Config{Handler: h})
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			return &pubSliceCursor{entries: []Object{
				{Location: pl(0, 0), SubgroupID: 7, Payload: []byte("s")},
				{Location: pl(0, 1), Datagram: true, Payload: []byte("d")},
			}}
		})
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
		expect[*wire.FetchOK](fs)
		d := fp.acceptPubFetch(false)
		first, err := d.next()
		require.NoError(t, err)
		assert.False(t, first.Datagram)
		assert.Equal(t, uint64(7), first.SubgroupID)
		flags, err := d.br.Peek(1)
		require.NoError(t, err)
		assert.NotZero(t, flags[0]&0x40, "flags 0x%x", flags[0])
		second, err := d.next()
		require.NoError(t, err)
		assert.True(t, second.Datagram)
		assert.Equal(t, "d", string(second.Payload))
	})
}

// Range filters leave objects out; the track's default publisher priority
// goes with objects that set none; Object Status objects are not carried.
func TestFetchRangeFiltersAndPriority(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt, err := NewLocalTrack(trackA, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 9}})
		require.NoError(t, err)
		lt.noteObject(pl(0, 3))
		h, _ := fetchHandler(lt)
		s, fp := serverSession(t, &Config{Handler: h, MaxFilterRanges: 4})
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			return &pubSliceCursor{entries: []Object{
				{Location: pl(0, 0), Payload: []byte("a")},
				{Location: pl(0, 1), SubgroupID: 1, Priority: wire.Some[uint8](3), Payload: []byte("b")},
				{Location: pl(0, 2), Payload: []byte("c")},
				{Location: pl(0, 3), Status: wire.ObjectEndOfGroup},
			}}
		})
		rf := wire.RangeFilter{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: 0, End: 0}}}
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rf}}))
		expect[*wire.FetchOK](fs)
		es := fp.acceptPubFetch(false).all()
		assert.Equal(t, []wire.Location{pl(0, 0), pl(0, 2)}, pubLocs(es))
		for _, e := range es {
			assert.Equal(t, uint8(9), e.Priority)
		}
	})
}

// Over both transports, in memory and real: a FETCH, ascending and
// descending, answered with FETCH_OK and read raw, objects and gaps; and a
// SUBSCRIBE's fill fetch stream.
func TestFetchOverTransports(t *testing.T) {
	entries := func(desc bool) []Object {
		es := []Object{pobj(1, 0, "a"), pobj(1, 1, "b"), {Location: pl(2, 5), EndOfRange: wire.EndOfUnknownRange},
			pobj(3, 0, "c")}
		if desc {
			es = []Object{pobj(3, 0, "c"), {Location: pl(2, 5), EndOfRange: wire.EndOfUnknownRange},
				pobj(1, 0, "a"), pobj(1, 1, "b")}
		}
		return es
	}
	for _, desc := range []bool{false, true} {
		name := "ascending"
		params := wire.Params{LocationFilter: wire.Some(wire.StartFilter(pl(1, 0)))}
		if desc {
			name = "descending"
			params.GroupOrder = wire.Some(wire.GroupOrderDescending)
		}
		forServerSessions(t, "fetch "+name, func(t *testing.T, connect fakeConnector) {
			h, errs := fetchHandler(pubTrack(t, wire.Some(pl(3, 0))))
			s, fp := connect(t, &Config{Handler: h})
			pubUseCursor(s, func(_ filter.Window, d bool) fetchCursor {
				return &pubSliceCursor{entries: entries(d)}
			})
			fs := fp.open(pubFetchMsg(t, 0, trackA, params))
			fs.fin()
			ok := expect[*wire.FetchOK](fs)
			assert.Equal(t, pl(3, 0), ok.EndLocation)
			d := fp.acceptPubFetch(desc)
			assert.Equal(t, uint64(0), d.id)
			es := d.all()
			want := entries(desc)
			require.Len(t, es, len(want))
			for i, e := range es {
				assert.Equal(t, want[i].Location, e.Location())
				assert.Equal(t, want[i].EndOfRange, e.EndOfRange)
				assert.Equal(t, string(want[i].Payload), string(e.Payload))
			}
			fs.expectFIN()
			require.NoError(t, recvOrFail(t, errs))
		})
	}
	forServerSessions(t, "fill", func(t *testing.T, connect fakeConnector) {
		lt := pubTrack(t, wire.Some(pl(2, 3)))
		h, _ := fetchHandler(lt)
		s, fp := connect(t, &Config{Handler: h})
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			return &pubSliceCursor{entries: []Object{pobj(2, 3, "last")}}
		})
		fs := fp.open(subscribeMsg(4, trackA, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(1))}}))
		assert.Equal(t, wire.Some(pl(2, 3)), expect[*wire.SubscribeOK](fs).Parameters.LargestObject)
		d := fp.acceptPubFetch(false)
		assert.Equal(t, uint64(4), d.id)
		es := d.all()
		require.Len(t, es, 1)
		assert.Equal(t, "last", string(es[0].Payload))
	})
}

// A REQUEST_ERROR may follow objects (§3.2.1): the application's Reject
// after writing resets the data stream; the request stream gets the
// REQUEST_ERROR and FIN.
func TestFetchRejectAfterObjects(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		written := make(chan struct{})
		h := HandlerFunc(func(r Request) {
			fr := r.(*FetchRequest)
			_ = fr.Objects().WriteObject(pobj(0, 0, "cached"))
			<-written
			_ = fr.Reject(wire.ReqTimeout, "upstream gave up")
			assert.Error(t, fr.Objects().WriteObject(pobj(0, 1, "late")))
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
		d := fp.acceptPubFetch(false)
		e, err := d.next()
		require.NoError(t, err)
		assert.Equal(t, "cached", string(e.Payload))
		close(written)
		assert.Equal(t, wire.ReqTimeout, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		d.expectReset(wire.ResetCancelled)
	})
}

// FETCH for a track nobody serves: DOES_NOT_EXIST, from DefaultHandler
// and from another track's LocalTrack.Fetch; a FETCH in a namespace
// reaches the ServeMux handler of that namespace.
func TestFetchRouting(t *testing.T) {
	t.Run("DefaultHandler", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			_, fp := serverSession(t, nil)
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
		})
	})
	t.Run("another track", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, errs := fetchHandler(pubTrack(t, wire.Some(pl(0, 0))))
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(pubFetchMsg(t, 0, trackB, wire.Params{}))
			assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
			assert.Error(t, recvOrFail(t, errs))
		})
	})
	t.Run("ServeMux", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, errs := fetchHandler(pubTrack(t, wire.Some(pl(0, 0))))
			mux := NewServeMux()
			mux.Handle(trackA.Namespace, h)
			_, fp := serverSession(t, &Config{Handler: mux})
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			expect[*wire.FetchOK](fs)
			require.NoError(t, recvOrFail(t, errs))
		})
	})
}

// Window resolves the FETCH's range (§3.3.1, §9.11, C093).
func TestFetchRequestWindow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		filter     wire.Opt[wire.LocationFilter]
		largest    wire.Opt[wire.Location]
		start, end wire.Location
		code       wire.RequestErrorCode // 0: no error
	}{
		{"no filter", wire.Opt[wire.LocationFilter]{}, wire.Some(pl(4, 2)), pl(0, 0), pl(4, 2), 0},
		{"end cut at Largest Object", wire.Some(wire.RangeFilterToObject(pl(1, 1), pl(9, 9))), wire.Some(pl(4, 2)), pl(1, 1), pl(4, 2), 0},
		{"whole end group", wire.Some(wire.RangeFilterTo(pl(1, 1), 2)), wire.Some(pl(4, 2)), pl(1, 1), pl(2, wire.MaxVarint), 0},
		{"nothing published", wire.Opt[wire.LocationFilter]{}, wire.Opt[wire.Location]{}, pl(0, 0), pl(0, 0), wire.ReqInvalidRange},
		{"start past Largest Object", wire.Some(wire.StartFilter(pl(5, 0))), wire.Some(pl(4, 2)), pl(0, 0), pl(0, 0), wire.ReqInvalidRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &FetchRequest{Params: wire.Params{LocationFilter: tc.filter}}
			start, end, err := r.Window(tc.largest)
			if tc.code != 0 {
				var re *RequestError
				require.ErrorAs(t, err, &re)
				assert.Equal(t, tc.code, re.Code)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.start, start)
			assert.Equal(t, tc.end, end)
		})
	}
}

// The checks before the application: range filters beyond
// MAX_FILTER_RANGES are refused as for SUBSCRIBE; INCLUDE_PROPERTIES 0
// leaves the Track Properties out of FETCH_OK (§9.20.22).
func TestFetchParamsChecked(t *testing.T) {
	rf := wire.RangeFilter{Type: wire.ParamSubgroupFilter, Ranges: []wire.Range{{Start: 0, End: 0}}}
	t.Run("MAX_FILTER_RANGES", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			h, _ := fetchHandler(pubTrack(t, wire.Some(pl(0, 0))))
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{RangeFilters: []wire.RangeFilter{rf}}))
			assert.Equal(t, wire.ReqInvalidFilter, expect[*wire.RequestError](fs).ErrorCode)
		})
	})
	t.Run("INCLUDE_PROPERTIES", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			props := wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 9}}
			lt, err := NewLocalTrack(trackA, props)
			require.NoError(t, err)
			lt.noteObject(pl(0, 0))
			h, _ := fetchHandler(lt)
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			assert.Len(t, expect[*wire.FetchOK](fs).TrackProperties, 1)
			fs = fp.open(pubFetchMsg(t, 2, trackA, wire.Params{IncludeProperties: wire.Some(false)}))
			assert.Empty(t, expect[*wire.FetchOK](fs).TrackProperties)
		})
	})
}
