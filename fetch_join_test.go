package moqt

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

func joining(id uint64, typ wire.FetchType, joined, start uint64) *wire.Fetch {
	return &wire.Fetch{RequestID: id, FetchType: typ, JoiningRequestID: joined, JoiningStart: start}
}

// A Joining FETCH ends at the Joining Location, the Largest Location of
// SUBSCRIBE_OK (18 §5.1), and starts Joining Start groups before it
// (Relative) or at group Joining Start (Absolute) (18 §10.12.2.1); FETCH_OK
// carries {JL.Group, JL.Object + 1} and the data stream the FETCH's
// Request ID.
func TestDraft18JoiningFetchRangeFromJoiningLocation(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		fp, windows := draftFetchServer(t, v, wire.Some(pl(2, 3)), draftEntries)
		sub := fp.open(subscribeMsg(0, trackA, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())}))
		assert.Equal(t, wire.Some(pl(2, 3)), expect[*wire.SubscribeOK](sub).Parameters.LargestObject)
		cases := []struct {
			typ   wire.FetchType
			js    uint64
			start wire.Location
			locs  []wire.Location
		}{
			{wire.FetchRelativeJoining, 0, pl(2, 0), []wire.Location{pl(2, 0), pl(2, 3)}},
			{wire.FetchRelativeJoining, 1, pl(1, 0), []wire.Location{pl(1, 0), pl(1, 1), pl(2, 0), pl(2, 3)}},
			{wire.FetchRelativeJoining, 7, pl(0, 0), []wire.Location{pl(1, 0), pl(1, 1), pl(2, 0), pl(2, 3)}}, // clamped
			{wire.FetchAbsoluteJoining, 2, pl(2, 0), []wire.Location{pl(2, 0), pl(2, 3)}},
			{wire.FetchAbsoluteJoining, 0, pl(0, 0), []wire.Location{pl(1, 0), pl(1, 1), pl(2, 0), pl(2, 3)}},
		}
		for i, c := range cases {
			id := uint64(2 + 2*i)
			fs := fp.open(joining(id, c.typ, 0, c.js))
			assert.Equal(t, pl(2, 4), expect[*wire.FetchOK](fs).EndLocation, "case %d", i)
			assert.Equal(t, filter.Window{Start: c.start, End: pl(2, 3), Bounded: true}, recvOrFail(t, windows), "case %d", i)
			d := fp.acceptPubFetch(false)
			assert.Equal(t, id, d.id, "case %d", i)
			assert.Equal(t, c.locs, pubLocs(d.all()), "case %d", i)
		}
	})
}

// 18 §10.12.2: a Joining Request ID that is no subscription of the
// session MUST be answered INVALID_JOINING_REQUEST_ID; Forward State 0,
// nothing published, or an Absolute start past the Joining Location are
// INVALID_RANGE.
func TestDraft18JoiningFetchErrors(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		fp, _ := draftFetchServer(t, v, wire.Some(pl(2, 3)), draftEntries)
		sub := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](sub)
		for i, c := range []struct {
			m    *wire.Fetch
			code wire.RequestErrorCode
		}{
			{joining(2, wire.FetchRelativeJoining, 1, 0), wire.ReqInvalidJoiningRequestID}, // this end's parity: none
			{joining(4, wire.FetchRelativeJoining, 2, 0), wire.ReqInvalidJoiningRequestID}, // a FETCH, not a subscription
			{joining(6, wire.FetchAbsoluteJoining, 0, 3), wire.ReqInvalidRange},            // start after JL
		} {
			fs := fp.open(c.m)
			assert.Equal(t, c.code, expect[*wire.RequestError](fs).ErrorCode, "case %d", i)
		}
		// Forward 0 (a session of its own: 18 allows one subscription per
		// track and role).
		fp3, _ := draftFetchServer(t, v, wire.Some(pl(2, 3)), draftEntries)
		paused := fp3.open(subscribeMsg(0, trackA, wire.Params{Forward: wire.Some(false)}))
		expect[*wire.SubscribeOK](paused)
		fs3 := fp3.open(joining(2, wire.FetchRelativeJoining, 0, 0))
		assert.Equal(t, wire.ReqInvalidRange, expect[*wire.RequestError](fs3).ErrorCode, "Forward 0")
		// Nothing published: no Joining Location.
		fp2, _ := draftFetchServer(t, v, wire.Opt[wire.Location]{}, nil)
		sub2 := fp2.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](sub2)
		fs := fp2.open(joining(2, wire.FetchRelativeJoining, 0, 0))
		assert.Equal(t, wire.ReqInvalidRange, expect[*wire.RequestError](fs).ErrorCode)
	})
}

// 18 §10.12.2: a Joining FETCH for a subscription still Pending
// (subscriber) is buffered until it is established, and so is one that
// arrives before its SUBSCRIBE; past Config.FillWait it times out.
func TestDraft18JoiningFetchBufferedWhilePending(t *testing.T) {
	forOldDrafts(t, func(t *testing.T, v wire.Version) {
		lt := pubTrack(t, wire.Some(pl(2, 3)))
		gate := make(chan struct{})
		h := HandlerFunc(func(r Request) {
			switch r := r.(type) {
			case *SubscribeRequest:
				<-gate
				_, _ = lt.Accept(r, AcceptOptions{})
			case *FetchRequest:
				_ = lt.Fetch(r)
			}
		})
		s, fp := pipeServerSession(t, pipeOn(v), draftCfg(v, &Config{Handler: h}))
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			return &pubSliceCursor{entries: []Object{pobj(2, 0, "c")}}
		})
		// The FETCH first, naming a SUBSCRIBE not sent yet.
		fs := fp.open(joining(2, wire.FetchRelativeJoining, 0, 0))
		sub := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		synctest.Wait()
		close(gate)
		expect[*wire.SubscribeOK](sub)
		assert.Equal(t, pl(2, 4), expect[*wire.FetchOK](fs).EndLocation)
		assert.Equal(t, []wire.Location{pl(2, 0)}, pubLocs(fp.acceptPubFetch(false).all()))

		// Never established: TIMEOUT after FillWait.
		late := fp.open(joining(6, wire.FetchRelativeJoining, 4, 0))
		assert.Equal(t, wire.ReqTimeout, expect[*wire.RequestError](late).ErrorCode)
	})
}
