package moqt

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// oldDrafts are the drafts whose FETCH has Fetch Types (18/19 §10.12).
var oldDrafts = []wire.Version{wire.Draft18, wire.Draft19}

// pipeOn is a raw-QUIC Pipe negotiating v.
func pipeOn(v wire.Version) transport.PipeConfig { return transport.PipeConfig{Protocol: v.ALPN()} }

// draftCfg is cfg speaking v.
func draftCfg(v wire.Version, cfg *Config) *Config {
	cfg.Versions = []wire.Version{v}
	return cfg
}

// forOldDrafts runs f in a bubble for each of 18 and 19.
func forOldDrafts(t *testing.T, f func(t *testing.T, v wire.Version)) {
	for _, v := range oldDrafts {
		t.Run(v.String(), func(t *testing.T) { inBubble(t, func(t *testing.T) { f(t, v) }) })
	}
}

// draftFetchServer is a library server on v serving trackA, Largest
// {2, 3}, whose FETCHes and fills read the given entries; windows reports
// each window served.
func draftFetchServer(t *testing.T, v wire.Version, largest wire.Opt[wire.Location], entries []Object) (*fakePeer, <-chan filter.Window) {
	t.Helper()
	lt := pubTrack(t, largest)
	h, _ := fetchHandler(lt)
	s, fp := pipeServerSession(t, pipeOn(v), draftCfg(v, &Config{Handler: h}))
	windows := make(chan filter.Window, 16)
	pubUseCursor(s, func(w filter.Window, _ bool) fetchCursor {
		windows <- w
		var in []Object
		for _, o := range entries {
			if w.Contains(o.Location) {
				in = append(in, o)
			}
		}
		return &pubSliceCursor{entries: in}
	})
	return fp, windows
}

func standalone(id uint64, start, end wire.Location) *wire.Fetch {
	return &wire.Fetch{RequestID: id, FetchType: wire.FetchStandalone, TrackNamespace: trackA.Namespace,
		TrackName: trackA.Name, StartLocation: start, EndLocation: end}
}

var draftEntries = []Object{pobj(1, 0, "a"), pobj(1, 1, "b"), pobj(2, 0, "c"), pobj(2, 3, "d")}

// A Standalone FETCH's End Location is the last Object plus one, Object 0
// the whole End Group, and FETCH_OK answers in the same encoding, {Largest.
// Group, Largest.Object + 1} past the Largest Object (18 §10.12.1, §10.13).
func TestDraft18StandaloneFetchServedEndPlusOne(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		fp, windows := draftFetchServer(t, v, wire.Some(pl(2, 3)), draftEntries)
		cases := []struct {
			start, end, ok wire.Location
			window         filter.Window
			locs           []wire.Location
		}{
			// Whole of group 1: FETCH_OK says {1, 0} again.
			{pl(1, 0), pl(1, 0), pl(1, 0), filter.Window{Start: pl(1, 0), End: pl(1, wholeGroup), Bounded: true}, []wire.Location{pl(1, 0), pl(1, 1)}},
			// Through object 0 of group 2.
			{pl(1, 1), pl(2, 1), pl(2, 1), filter.Window{Start: pl(1, 1), End: pl(2, 0), Bounded: true}, []wire.Location{pl(1, 1), pl(2, 0)}},
			// Past the Largest Object: cut there.
			{pl(0, 0), pl(9, 0), pl(2, 4), filter.Window{Start: pl(0, 0), End: pl(2, 3), Bounded: true}, []wire.Location{pl(1, 0), pl(1, 1), pl(2, 0), pl(2, 3)}},
		}
		for i, c := range cases {
			fs := fp.open(standalone(uint64(2*i), c.start, c.end))
			ok := expect[*wire.FetchOK](fs)
			assert.Equal(t, c.ok, ok.EndLocation, "case %d", i)
			assert.Equal(t, c.window, recvOrFail(t, windows), "case %d", i)
			d := fp.acceptPubFetch(false)
			assert.Equal(t, c.locs, pubLocs(d.all()), "case %d", i)
		}
	})
}

// 18 §10.12.3: nothing published, or a Start past the Largest Object, is
// INVALID_RANGE; so is an End before the Start, a range that selects nothing.
func TestDraft18StandaloneFetchInvalidRange(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		fp, _ := draftFetchServer(t, v, wire.Some(pl(2, 3)), draftEntries)
		for i, c := range [][2]wire.Location{
			{pl(3, 0), pl(4, 0)}, // start after Largest
			{pl(2, 4), pl(3, 0)}, // start after Largest, in its group
			{pl(2, 0), pl(1, 0)}, // end group before start
			{pl(1, 2), pl(1, 2)}, // end (plus one) at the start: nothing
		} {
			fs := fp.open(standalone(uint64(2*i), c[0], c[1]))
			assert.Equal(t, wire.ReqInvalidRange, expect[*wire.RequestError](fs).ErrorCode, "case %d", i)
		}
		fp2, _ := draftFetchServer(t, v, wire.Opt[wire.Location]{}, nil)
		fs := fp2.open(standalone(0, pl(0, 0), pl(1, 0)))
		assert.Equal(t, wire.ReqInvalidRange, expect[*wire.RequestError](fs).ErrorCode, "nothing published")
	})
}

// The client sends a Standalone FETCH with the range in 18's encoding and
// no LOCATION_FILTER, and reports FETCH_OK's End inclusive.
func TestDraft18FetchSentStandalone(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		s, fp := pipeClientSession(t, pipeOn(v), draftCfg(v, &Config{}))
		type res struct {
			f   *Fetch
			err error
		}
		cases := []struct {
			lf         wire.Opt[wire.LocationFilter]
			start, end wire.Location
			okEnd, got wire.Location
		}{
			{wire.Some(wire.RangeFilterToObject(pl(1, 0), pl(2, 3))), pl(1, 0), pl(2, 4), pl(2, 4), pl(2, 3)},
			{wire.Some(wire.RangeFilterTo(pl(1, 2), 3)), pl(1, 2), pl(3, 0), pl(3, 0), pl(3, wholeGroup)},
			{wire.Some(wire.StartFilter(pl(5, 1))), pl(5, 1), pl(wire.MaxVarint, 0), pl(6, 1), pl(6, 0)},
			{wire.Opt[wire.LocationFilter]{}, pl(0, 0), pl(wire.MaxVarint, 0), pl(6, 1), pl(6, 0)},
		}
		for i, c := range cases {
			done := make(chan res, 1)
			go func() {
				f, err := s.Fetch(context.Background(), trackA, wire.Params{LocationFilter: c.lf})
				done <- res{f, err}
			}()
			fs := fp.accept()
			m := expect[*wire.Fetch](fs)
			assert.Equal(t, wire.FetchStandalone, m.FetchType, "case %d", i)
			assert.Equal(t, c.start, m.StartLocation, "case %d", i)
			assert.Equal(t, c.end, m.EndLocation, "case %d", i)
			assert.False(t, m.Parameters.LocationFilter.Set, "case %d", i)
			fs.send(&wire.FetchOK{EndLocation: c.okEnd})
			r := recvOrFail(t, done)
			require.NoError(t, r.err)
			assert.Equal(t, c.got, r.f.End, "case %d", i)
			_ = r.f.Close()
		}
		// A relative start has no Standalone form: refused before sending.
		next := s.ids.next.Load()
		_, err := s.Fetch(context.Background(), trackA, wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(2))})
		require.ErrorIs(t, err, wire.ErrNotInDraft)
		assert.Equal(t, next, s.ids.next.Load(), "no request was opened")
	})
}

// 18 §10.13: a FETCH_OK End Location smaller than the FETCH's Start closes
// the session with PROTOCOL_VIOLATION, compared in 18's encoding.
func TestDraft18FetchOKEndBeforeStartMustClose(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		s, fp := pipeClientSession(t, pipeOn(v), draftCfg(v, &Config{}))
		go func() {
			_, _ = s.Fetch(context.Background(), trackA, wire.Params{LocationFilter: wire.Some(wire.RangeFilterTo(pl(2, 1), 3))})
		}()
		fs := fp.accept()
		expect[*wire.Fetch](fs)
		fs.send(&wire.FetchOK{EndLocation: pl(2, 1)}) // through object 0 of group 2
		fp.expectClose(wire.ProtocolViolation)
	})
}

// 18 and 19 have no End of Timed-Out Range: a timed-out gap goes as an
// End of Unknown Range (docs/drafts.md §5).
func TestDraft18TimedOutRangeSentAsUnknown(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		fp, _ := draftFetchServer(t, v, wire.Some(pl(2, 3)), []Object{pobj(1, 0, "a"),
			{Location: pl(1, 5), EndOfRange: wire.EndOfTimedOutRange}, pobj(2, 0, "c")})
		fs := fp.open(standalone(0, pl(1, 0), pl(3, 0)))
		expect[*wire.FetchOK](fs)
		es := fp.acceptPubFetch(false).all()
		require.Len(t, es, 3)
		assert.Equal(t, wire.EndOfUnknownRange, es[1].EndOfRange)
	})
}

var _ = errors.New
