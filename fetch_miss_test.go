package moqt

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// A relay's track (CacheLimits.Miss): what its cache does not know is
// asked upstream with a FETCH on a second session, whose LocalTrack is
// the origin's.

// missRelay is a relay's copy of testTrack: it learnt the origin's
// Largest Object {4, 3} but carried none of groups 0-4, then carried
// groups 5 and 6 (4 objects each), on subgroups with END_OF_GROUP, so that
// it knows where they end. The origin published groups 0-6, without
// {1, 2}. asks counts the calls of Miss, whose ranges go to ranges; miss,
// when set, replaces the upstream FETCH.
type missRelay struct {
	relay, origin *LocalTrack
	down          *pair                // the relay serves down.client
	up            atomic.Pointer[pair] // the origin serves up.client, the relay's upstream session
	asks          atomic.Int64
	ranges        chan [2]wire.Location
	miss          func(ctx context.Context, up *Session, start, end wire.Location) (*Fetch, error)
	stallEnded    chan struct{} // closed when stallTrack's FETCH is cancelled
}

func newMissRelay(t *testing.T, connect connector, limits CacheLimits,
	miss func(ctx context.Context, up *Session, start, end wire.Location) (*Fetch, error)) *missRelay {
	t.Helper()
	m := &missRelay{ranges: make(chan [2]wire.Location, 100), miss: miss, stallEnded: make(chan struct{})}
	origin, err := NewLocalTrack(originTrack, nil)
	require.NoError(t, err)
	origin.SetCache(CacheLimits{Objects: 1000})
	publishGroups(t, origin, 0, 7, 4, map[wire.Location]bool{{Group: 1, Object: 2}: true})
	relay, err := NewLocalTrack(testTrack, nil)
	require.NoError(t, err)
	relay.SetLargest(wire.Location{Group: 4, Object: 3})
	limits.Miss = func(ctx context.Context, start, end wire.Location) (*Fetch, error) {
		m.asks.Add(1)
		m.ranges <- [2]wire.Location{start, end}
		up := m.up.Load().client // set before any FETCH; atomic as the race detector sees no network
		if m.miss != nil {
			return m.miss(ctx, up, start, end)
		}
		return up.Fetch(ctx, originTrack, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(start, end))})
	}
	relay.SetCache(limits)
	publishGroupsWith(t, relay, 5, 7, 4, nil, SubgroupOptions{EndOfGroup: true})
	m.relay, m.origin = relay, origin
	// One server, so that one leak check covers both sessions: it serves
	// the relay's track to down.client and the origin's to up.client.
	m.down = connect(t, &Config{Handler: HandlerFunc(func(r Request) {
		if r, ok := r.(*SubscribeRequest); ok && r.Track.Equal(testTrack) {
			_, _ = relay.Accept(r, AcceptOptions{})
			return
		}
		if r, ok := r.(*FetchRequest); ok {
			switch {
			case r.Track.Equal(originTrack):
				_ = origin.Fetch(r)
			case r.Track.Equal(malformedTrack):
				// Past the End its FETCH_OK reports: a Malformed Track.
				end := wire.Location{Group: 4, Object: 3}
				if r.Accept(false, end, nil) == nil && r.Objects().WriteObject(Object{Location: wire.Location{Group: 0}, Payload: []byte("a")}) == nil {
					_ = r.Objects().WriteObject(Object{Location: wire.Location{Group: 4, Object: 9}, Payload: []byte("b")})
					<-r.Context().Done()
				}
			case r.Track.Equal(stallTrack):
				// One object, then nothing until the FETCH is cancelled.
				if r.Accept(false, wire.Location{Group: 4, Object: 3}, nil) == nil &&
					r.Objects().WriteObject(Object{Location: wire.Location{Group: 0}, Payload: locPayload(wire.Location{})}) == nil {
					<-r.Context().Done()
					close(m.stallEnded)
				}
			default:
				_ = relay.Fetch(r)
			}
			return
		}
		DefaultHandler.ServeMOQT(r)
	})}, nil)
	m.up.Store(m.down.another(t, nil))
	return m
}

// originTrack is the origin's name for the relay's track; malformedTrack
// is an origin's that answers FETCH with an object past its End.
var (
	originTrack    = wire.FullTrackName{Namespace: wire.NewNamespace("origin"), Name: []byte("video")}
	malformedTrack = wire.FullTrackName{Namespace: wire.NewNamespace("origin"), Name: []byte("malformed")}
	stallTrack     = wire.FullTrackName{Namespace: wire.NewNamespace("origin"), Name: []byte("stall")}
)

// want lists the Locations of groups [from, to) of 4 objects, in the given
// group order, without {1, 2}.
func missWant(from, to uint64, desc bool) []wire.Location {
	var ls []wire.Location
	for i := range to - from {
		g := from + i
		if desc {
			g = to - 1 - i
		}
		for o := range uint64(4) {
			if l := (wire.Location{Group: g, Object: o}); l != (wire.Location{Group: 1, Object: 2}) {
				ls = append(ls, l)
			}
		}
	}
	return ls
}

func fetchOrder(desc bool) wire.Params {
	if desc {
		return wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)}
	}
	return wire.Params{}
}

// TestC070_MissFetchedUpstream: a FETCH reaching the range the relay's
// cache does not know waits for the upstream's FETCH of it and serves its
// objects in their place, in the requested group order (one upstream
// FETCH per group when descending), payloads intact, the gap the origin
// has at {1, 2} still a gap; the relay keeps them, so a second FETCH is
// answered without asking upstream again. The range runs to the end of
// group 4: past the Largest Object it learnt, the relay cannot tell
// whether the origin published more of group 4 (§2.1).
func TestC070_MissFetchedUpstream(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		for _, desc := range []bool{false, true} {
			name := "ascending"
			if desc {
				name = "descending"
			}
			t.Run(name, func(t *testing.T) {
				forTransports(t, func(t *testing.T, connect connector) {
					m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, nil)
					ctx := testCtx(t, 30*time.Second)
					for round := range 2 {
						f, err := m.down.client.Fetch(ctx, testTrack, fetchOrder(desc))
						require.NoError(t, err)
						assert.Equal(t, wire.Location{Group: 6, Object: 3}, f.End)
						got := readFetchAll(t, ctx, f)
						want := append(missWant(0, 5, false), missWant(5, 7, false)...)
						if desc {
							want = missWant(0, 7, true)
						}
						assert.Equal(t, want, locations(got), "round %d", round)
						for _, o := range got {
							assert.Equal(t, locPayload(o.Location), o.Payload)
						}
						asks := int64(1)
						if desc {
							asks = 5 // a group at a time
						}
						assert.Equal(t, asks, m.asks.Load(), "round %d: only the first FETCH asks upstream", round)
					}
					first := <-m.ranges
					if desc {
						assert.Equal(t, [2]wire.Location{{Group: 4}, {Group: 4, Object: ^uint64(0)}}, first, "the highest group first")
					} else {
						assert.Equal(t, [2]wire.Location{{}, {Group: 4, Object: ^uint64(0)}}, first, "the unknown range")
					}
				})
			})
		}
	})
}

// fetchTimedOut fetches the relay's track with FILL_TIMEOUT ms and checks
// that the range it lacks is reported timed out (unknown on 18 and 19,
// timedOutGap), and the rest served.
func fetchTimedOut(t *testing.T, m *missRelay, ms uint64) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	f, err := m.down.client.Fetch(ctx, testTrack, wire.Params{FillTimeout: wire.Some(ms)})
	require.NoError(t, err)
	got := readFetchAll(t, ctx, f)
	require.NotEmpty(t, got)
	assert.Equal(t, Object{Location: wire.Location{Group: 4, Object: ^uint64(0)}, EndOfRange: timedOutGap(t)}, got[0])
	assert.Equal(t, missWant(5, 7, false), locations(got[1:]))
}

// TestC071_FillTimeoutZeroTimedOut: with FILL_TIMEOUT 0 the relay serves
// what it has and reports the rest as a Timed-Out gap, without asking
// upstream (§9.20.6).
func TestC071_FillTimeoutZeroTimedOut(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, nil)
			fetchTimedOut(t, m, 0)
			assert.Zero(t, m.asks.Load(), "no upstream FETCH")
		})
	})
}

// TestC071_BudgetSpentTimedOut: an upstream that does not answer within
// FILL_TIMEOUT leaves the range timed out, and the relay serves the rest.
func TestC071_BudgetSpentTimedOut(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, func(ctx context.Context, _ *Session, _, _ wire.Location) (*Fetch, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			})
			fetchTimedOut(t, m, 200)
		})
	})
}

// TestMissFailedUnknown: an upstream that cannot be asked leaves the range
// unknown, and the fetch asks no more; so does an upstream FETCH that
// yields objects outside the range asked, which is cancelled.
func TestMissFailedUnknown(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, func(context.Context, *Session, wire.Location, wire.Location) (*Fetch, error) {
			return nil, errors.New("no upstream")
		})
		ctx := testCtx(t, 30*time.Second)
		f, err := m.down.client.Fetch(ctx, testTrack, fetchOrder(true))
		require.NoError(t, err)
		got := readFetchAll(t, ctx, f)
		require.NotEmpty(t, got)
		assert.Equal(t, missWant(5, 7, true), locations(got[:8]))
		all := ^uint64(0)
		assert.Equal(t, []Object{
			{Location: wire.Location{Group: 5, Object: all}, EndOfRange: wire.EndOfNonExistentRange},
			{Location: wire.Location{Group: 0, Object: all}, EndOfRange: wire.EndOfUnknownRange},
		}, got[8:], "what the cache knows of groups 5 down to 0")
		assert.Equal(t, int64(1), m.asks.Load(), "asked once")
	})
}

// TestMissOutsideRangeRefused: entries an upstream FETCH yields outside
// the range asked are refused: that FETCH is cancelled and the range is
// unknown from there.
func TestMissOutsideRangeRefused(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, func(ctx context.Context, up *Session, _, _ wire.Location) (*Fetch, error) {
			return up.Fetch(ctx, originTrack, wire.Params{}) // the whole track, not the range asked
		})
		ctx := testCtx(t, 30*time.Second)
		f, err := m.down.client.Fetch(ctx, testTrack, wire.Params{
			LocationFilter: wire.Some(wire.RangeFilterToObject(wire.Location{Group: 2}, wire.Location{Group: 5, Object: 1}))})
		require.NoError(t, err)
		got := readFetchAll(t, ctx, f)
		require.NotEmpty(t, got)
		assert.Equal(t, Object{Location: wire.Location{Group: 4, Object: ^uint64(0)}, EndOfRange: wire.EndOfUnknownRange}, got[0])
		assert.Equal(t, []wire.Location{{Group: 5}, {Group: 5, Object: 1}}, locations(got[1:]))
	})
}

// TestC077_MissMalformedUpstream: an upstream FETCH that turns out to be a
// Malformed Track resets the relay's fetch stream with MALFORMED_TRACK
// (§12.1), rather than serving the rest as if nothing happened.
func TestC077_MissMalformedUpstream(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, func(ctx context.Context, up *Session, start, end wire.Location) (*Fetch, error) {
				return up.Fetch(ctx, malformedTrack, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(start, end))})
			})
			ctx := testCtx(t, 30*time.Second)
			f, err := m.down.client.Fetch(ctx, testTrack, wire.Params{})
			var serr *StreamError
			for err == nil {
				// The reset may overtake FETCH_OK, failing Fetch itself.
				_, err = f.ReadObject(ctx)
				require.NotErrorIs(t, err, io.EOF, "the stream must not end cleanly")
			}
			require.ErrorAs(t, err, &serr)
			assert.Equal(t, wire.ResetMalformedTrack, serr.Code)
		})
	})
}

// TestC070_MissFill: a fill fetch stream (a SUBSCRIBE with
// FILL_PARAMETERS) reaching what the relay's cache does not know waits
// for the upstream's objects as a FETCH does: the subscriber gets the
// whole track, the upstream's part first, in order, then the live objects.
//
// On 18 and 19 the fill goes as a Joining FETCH right after the SUBSCRIBE
// (subscription_join.go), which the publisher must buffer while the
// subscription is pending (18 §10.12.2): this test found the window in
// which it was refused INVALID_JOINING_REQUEST_ID instead.
func TestC070_MissFill(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) { testC070MissFill(t) })
}

func testC070MissFill(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, nil)
		ctx := testCtx(t, 30*time.Second)
		sub, err := m.down.client.Subscribe(ctx, testTrack, wire.Params{
			LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter())},
		})
		require.NoError(t, err)
		want := append(missWant(0, 5, false), missWant(5, 7, false)...)
		var got []wire.Location
		for range want {
			o, err := sub.ReadObject(ctx)
			require.NoError(t, err)
			require.Zero(t, o.EndOfRange, "at %v", o.Location)
			assert.Equal(t, locPayload(o.Location), o.Payload)
			got = append(got, o.Location)
		}
		assert.Equal(t, want, got)
		assert.Equal(t, int64(1), m.asks.Load())
		publishGroups(t, m.relay, 7, 8, 1, nil)
		o, err := sub.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 7}, o.Location, "then the subscription's own")
	})
}

// TestMissCancelledWithDownstream: a downstream fetch that is cancelled
// while the relay waits on the upstream cancels the upstream FETCH.
func TestMissCancelledWithDownstream(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, func(ctx context.Context, up *Session, start, end wire.Location) (*Fetch, error) {
			return up.Fetch(ctx, stallTrack, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(start, end))})
		})
		ctx := testCtx(t, 30*time.Second)
		f, err := m.down.client.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		o, err := f.ReadObject(ctx)
		require.NoError(t, err)
		assert.Equal(t, wire.Location{}, o.Location, "the upstream's first object is served at once")
		require.NoError(t, f.Close())
		waitDone(t, ctx, m.stallEnded, "the upstream FETCH's cancel")
	})
}

// TestC040_MissUnsupportedExtensionResets: an upstream FETCH refused for
// a Mandatory Track Property this end does not understand (§3.6) resets
// the relay's fetch stream, already answered with FETCH_OK and carrying
// data, rather than ending it as if the range were merely unknown.
func TestC040_MissUnsupportedExtensionResets(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			m := newMissRelay(t, connect, CacheLimits{Objects: 1000}, func(context.Context, *Session, wire.Location, wire.Location) (*Fetch, error) {
				return nil, &RequestError{Code: wire.ReqUnsupportedExtension, Reason: "mandatory property"}
			})
			ctx := testCtx(t, 30*time.Second)
			f, err := m.down.client.Fetch(ctx, testTrack, fetchOrder(true)) // the cached groups first
			var serr *StreamError
			for err == nil {
				_, err = f.ReadObject(ctx)
				require.NotErrorIs(t, err, io.EOF, "the stream must not end cleanly")
			}
			require.ErrorAs(t, err, &serr)
		})
	})
}
