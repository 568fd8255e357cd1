package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// These tests follow subscriptions to a LocalTrack through their life:
// joining while objects are written, ending every way, and what the track
// keeps of them afterwards.

// serveTrack serves every SUBSCRIBE for track with track.Accept and hands
// the served subscriptions to got, if set; a full got is not waited on.
func serveTrack(track *LocalTrack, opts AcceptOptions, got chan<- *ServedSubscription) Handler {
	return HandlerFunc(func(r Request) {
		sr, ok := r.(*SubscribeRequest)
		if !ok || !sr.Track.Equal(track.Name()) {
			DefaultHandler.ServeMOQT(r)
			return
		}
		ss, err := track.Accept(sr, opts)
		if err == nil && got != nil {
			select {
			case got <- ss:
			default:
			}
		}
	})
}

// objectsPerGroup is the size of the groups the join test publishes.
const objectsPerGroup = 4

// received collects the Locations one subscription receives.
type receivedSet struct {
	mu   sync.Mutex
	locs map[wire.Location]int
	err  error
	// top is the largest group received, and progress, if set, is
	// signalled on each object.
	top      uint64
	progress chan struct{}
}

func (r *receivedSet) add(l wire.Location) {
	r.mu.Lock()
	r.locs[l]++
	r.top = max(r.top, l.Group)
	r.mu.Unlock()
	if r.progress != nil {
		select {
		case r.progress <- struct{}{}:
		default:
		}
	}
}

// behind reports whether r's reader is more than lead groups behind group
// g, having joined after group from.
func (r *receivedSet) behind(g, from, lead uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err == nil && max(r.top, from)+lead < g
}

func (r *receivedSet) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
}

// collectLocations reads every subgroup of sub into a new receivedSet until ctx
// ends.
func collectLocations(ctx context.Context, wg *sync.WaitGroup, sub *Subscription) *receivedSet {
	return collectLocationsTo(ctx, wg, sub, nil)
}

// collectLocationsTo is collectLocations signalling progress on each
// object received.
func collectLocationsTo(ctx context.Context, wg *sync.WaitGroup, sub *Subscription, progress chan struct{}) *receivedSet {
	rs := &receivedSet{locs: map[wire.Location]int{}, progress: progress}
	wg.Go(func() {
		for {
			r, err := sub.AcceptSubgroup(ctx)
			if err != nil {
				if ctx.Err() == nil {
					rs.fail(err) // the subscription ended: say why
				}
				return
			}
			wg.Go(func() {
				for {
					h, err := r.Next()
					if err != nil {
						if !errors.Is(err, io.EOF) && ctx.Err() == nil {
							rs.fail(fmt.Errorf("group %d: %w", r.Header().GroupID, err))
						}
						return
					}
					if _, err := r.readPayload(1 << 10); err != nil {
						rs.fail(err)
						return
					}
					rs.add(h.Location)
				}
			})
		}
	})
	return rs
}

// TestJoinWhilePublishing: with a publisher writing continuously, every
// subscription that joins receives every object after the Largest Object
// its SUBSCRIBE_OK reported, exactly once (§3.1.3, §9.20.18): none lost
// between the answer and the start of delivery. Its filter starts at the
// Next Object, so a subgroup joined midway is complete from there
// (§11.3.2).
func TestJoinWhilePublishing(t *testing.T) {
	const joins, joiners = 40, 4
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		// The publisher writes as fast as it can: on a busy machine a
		// reader can trail it by more than the default grace, which
		// is not what this test is about.
		p := connect(t, &Config{Handler: serveTrack(track, AcceptOptions{}, nil),
			SubscriberGrace: time.Minute}, nil)
		ctx := testCtx(t, 30*time.Second)

		type joined struct {
			sub     *Subscription
			largest wire.Location
			got     *receivedSet
		}
		var (
			mu       sync.Mutex
			subs     []joined
			progress = make(chan struct{}, 1)
		)
		// farBehind reports whether a reader is more than maxLead
		// groups behind group g.
		const maxLead = 32
		farBehind := func(g uint64) bool {
			mu.Lock()
			defer mu.Unlock()
			for _, j := range subs {
				if j.got.behind(g, j.largest.Group, maxLead) {
					return true
				}
			}
			return false
		}

		// The publisher: groups of objectsPerGroup objects, one
		// subgroup each, until stopped. It keeps within maxLead groups
		// of the slowest reader: one that never waited ran hundreds of
		// groups ahead of readers starved of CPU on a busy machine,
		// and their streams waiting for stream credit cut a
		// subscription off as too far behind (maxPendingOpens), 1 run
		// in 5 beside two other suites. On an idle machine the joins
		// are over within about 50 groups, and it never waits.
		stop := make(chan struct{})
		var last atomic.Pointer[wire.Location]
		pubDone := make(chan error, 1)
		go func() {
			for g := uint64(0); ; g++ {
				for farBehind(g) {
					select {
					case <-progress:
					case <-ctx.Done():
						pubDone <- ctx.Err()
						return
					}
				}
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				for id := range uint64(objectsPerGroup) {
					if err := writeObject(w, id, nil, []byte{byte(g), byte(id)}); err != nil {
						pubDone <- err
						return
					}
					last.Store(&wire.Location{Group: g, Object: id})
				}
				if err := w.Close(); err != nil {
					pubDone <- err
					return
				}
				select {
				case <-stop:
					pubDone <- nil
					return
				default:
				}
			}
		}()

		var readers sync.WaitGroup
		readCtx, stopReading := context.WithCancel(ctx)
		// Joins run concurrently, from two sessions.
		clients := []*Session{p.client, p.connect(t, "", nil).client}
		var joiner sync.WaitGroup
		for g := range joiners {
			joiner.Go(func() {
				for range joins / joiners {
					sub, err := clients[g%2].Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
					if !assert.NoError(t, err) {
						return
					}
					l, ok := sub.Largest()
					if !ok {
						// Nothing published yet: everything is after it.
						l = wire.Location{Group: 0, Object: ^uint64(0)}
					}
					mu.Lock()
					subs = append(subs, joined{sub: sub, largest: l, got: collectLocationsTo(readCtx, &readers, sub, progress)})
					mu.Unlock()
				}
			})
		}
		joiner.Wait()
		require.Len(t, subs, joins)
		close(stop)
		require.NoError(t, <-pubDone)
		end := *last.Load()

		for i, j := range subs {
			var want []wire.Location
			for l := (wire.Location{Group: j.largest.Group, Object: j.largest.Object + 1}); !end.Less(l); {
				if l.Object == objectsPerGroup {
					l = wire.Location{Group: l.Group + 1}
					continue
				}
				want = append(want, l)
				l.Object++
			}
			ok := assert.Eventually(t, func() bool {
				j.got.mu.Lock()
				defer j.got.mu.Unlock()
				return len(j.got.locs) >= len(want) || j.got.err != nil
			}, 20*time.Second, 5*time.Millisecond, "subscription %d (Largest %v) stalled", i, j.largest)
			j.got.mu.Lock()
			require.NoError(t, j.got.err, "subscription %d", i)
			wanted := map[wire.Location]bool{}
			var missing, extra []wire.Location
			for _, l := range want {
				wanted[l] = true
				if j.got.locs[l] != 1 {
					missing = append(missing, l)
				}
			}
			for l := range j.got.locs {
				if !wanted[l] {
					extra = append(extra, l)
				}
			}
			j.got.mu.Unlock()
			assert.Empty(t, missing, "subscription %d (Largest %v) did not get these exactly once", i, j.largest)
			assert.Empty(t, extra, "subscription %d (Largest %v) got these outside its promise", i, j.largest)
			if !ok {
				break
			}
		}
		stopReading()
		readers.Wait()
	})
}

// TestTrackReleasesEndedSubscriptions: subscriptions leave their
// LocalTrack as soon as they end, however they end, even if nothing is
// ever written to the track again: it keeps neither them nor, through
// them, their sessions.
func TestTrackReleasesEndedSubscriptions(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		served := make(chan *ServedSubscription, 64)
		p := newPipePair(t, transport.PipeConfig{}, &Config{Handler: serveTrack(track, AcceptOptions{}, served)}, nil)
		ctx := testCtx(t, 10*time.Second)

		// Nothing but the track could keep them; it must not.
		var gone []weak.Pointer[ServedSubscription]
		// Ended by the subscriber, by the publisher, and with their sessions.
		for i := range 24 {
			client := p.client
			var other *pair
			if i%3 == 2 {
				other = p.connect(t, "moqt", nil)
				client = other.client
			}
			sub, err := client.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			ss := recvOrFail(t, served)
			gone = append(gone, weak.Make(ss))
			switch i % 3 {
			case 0:
				require.NoError(t, sub.Close())
			case 1:
				require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
			case 2:
				require.NoError(t, other.client.Close())
			}
		}

		assert.Eventually(t, func() bool {
			runtime.GC()
			for _, w := range gone {
				if w.Value() != nil {
					return false
				}
			}
			return true
		}, 5*time.Second, 10*time.Millisecond, "ended subscriptions are still reachable")
		assert.Empty(t, track.snapshot(), "the track still lists ended subscriptions")
	})
}

// TestServedSubscriptionErrMatchesContext: however a served subscription
// ends, once its Context is done Err says why, and the context's cause is
// that same error. On the subscriber's side Done and Err agree too.
func TestServedSubscriptionErrMatchesContext(t *testing.T) {
	type ending struct {
		name string
		opts AcceptOptions
		// end ends the subscription; nil leaves it to the options.
		end func(p *pair, sub *Subscription, ss *ServedSubscription)
		// check inspects the error the publisher's end reports.
		check func(t *testing.T, err error)
	}
	doneWith := func(code wire.PublishDoneCode) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			var de *DoneError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, code, de.Code)
		}
	}
	sessionClosed := func(remote bool) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			var se *SessionError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, remote, se.Remote)
		}
	}
	endings := []ending{
		{name: "session closed here",
			end:   func(p *pair, _ *Subscription, _ *ServedSubscription) { _ = p.server.CloseWithError(wire.NoError, "") },
			check: sessionClosed(false)},
		// Close ends the served subscriptions with PUBLISH_DONE first.
		{name: "session closed gracefully here",
			end:   func(p *pair, _ *Subscription, _ *ServedSubscription) { _ = p.server.Close() },
			check: doneWith(wire.DoneGoingAway)},
		{name: "session closed by the peer",
			end: func(p *pair, _ *Subscription, _ *ServedSubscription) { _ = p.client.Close() },
			check: func(t *testing.T, err error) {
				// The peer's streams may end before its connection does.
				if !errors.Is(err, ErrCancelled) {
					sessionClosed(true)(t, err)
				}
			}},
		{name: "cancelled by the subscriber",
			end:   func(_ *pair, sub *Subscription, _ *ServedSubscription) { _ = sub.Close() },
			check: func(t *testing.T, err error) { assert.ErrorIs(t, err, ErrCancelled) }},
		{name: "Done",
			end:   func(_ *pair, _ *Subscription, ss *ServedSubscription) { _ = ss.End(wire.DoneTrackEnded, "over") },
			check: doneWith(wire.DoneTrackEnded)},
		{name: "expired", opts: AcceptOptions{Expires: 50 * time.Millisecond},
			check: doneWith(wire.DoneExpired)},
	}
	for _, tr := range pipeTransports {
		for _, e := range endings {
			t.Run(tr.name+": "+e.name, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					track, err := NewLocalTrack(testTrack, nil)
					require.NoError(t, err)
					served := make(chan *ServedSubscription, 1)
					p := newPipePair(t, transport.PipeConfig{WebTransport: tr.wt}, &Config{Handler: serveTrack(track, e.opts, served)}, nil)
					ctx := testCtx(t, 10*time.Second)
					sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
					require.NoError(t, err)
					ss := recvOrFail(t, served)
					if e.end != nil {
						e.end(p, sub, ss)
					}
					closedOrFail(t, ss.Context().Done(), "the subscription's context did not end")
					err = ss.Err()
					require.Error(t, err, "Err is nil once the context is done")
					assert.Same(t, err, context.Cause(ss.Context()), "the context's cause is not Err")
					assert.Equal(t, stateTerminated, ss.current())
					e.check(t, err)

					closedOrFail(t, sub.Done(), "the subscriber's end did not end")
					assert.Error(t, sub.Err(), "the subscriber's Err is nil once Done is closed")
				})
			})
		}
	}
	t.Run("PUBLISH refused", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			refuse := HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqUninterested, "no") })
			p := newPipePair(t, transport.PipeConfig{}, nil, &Config{Handler: refuse})
			ctx := testCtx(t, 10*time.Second)
			ss, err := p.server.startPublish(ctx, testTrack, wire.Params{}, nil, nil)
			require.NoError(t, err)
			closedOrFail(t, ss.Context().Done(), "the subscription's context did not end")
			var re *RequestError
			require.ErrorAs(t, ss.Err(), &re)
			assert.Equal(t, wire.ReqUninterested, re.Code)
			assert.Same(t, ss.Err(), context.Cause(ss.Context()))
		})
	})
}

// TestEndNotHeldByStalledSubscriber: LocalTrack.End reaches every
// subscriber although one of them leaves its request stream unread: that
// one's PUBLISH_DONE cannot be written, so after Config.PublishDoneTimeout
// its request stream is reset with TOO_FAR_BEHIND, and End returns.
func TestEndNotHeldByStalledSubscriber(t *testing.T) {
	forWindowedServers(t, func(t *testing.T, client windowedClientFunc) {
		// A SUBSCRIBE_OK larger than the stalled subscriber's window leaves
		// no room to buffer the PUBLISH_DONE after it.
		track, err := NewLocalTrack(testTrack, wire.KVList{{Type: 0x3b, Bytes: make([]byte, 1300)}})
		require.NoError(t, err)
		served := make(chan *ServedSubscription, 4)
		cfg := &Config{Handler: serveTrack(track, AcceptOptions{}, served), PublishDoneTimeout: 200 * time.Millisecond}

		// The stalled subscriber first: End used to wait for it before the
		// others. Its window takes the SUBSCRIBE_OK, not the PUBLISH_DONE.
		stalled := client(cfg, 256)

		fs := stalled.open(subscribeMsg(0, testTrack, wire.Params{}))
		recvOrFail(t, served)
		healthy := client(cfg, 0)
		hs := healthy.open(subscribeMsg(0, testTrack, wire.Params{}))
		expect[*wire.SubscribeOK](hs)
		recvOrFail(t, served)

		reason := strings.Repeat("r", wire.MaxReasonLen)
		ended := goErr(func() error { track.End(wire.DoneTrackEnded, reason); return nil })
		done := expect[*wire.PublishDone](hs)
		assert.Equal(t, wire.DoneTrackEnded, done.StatusCode)
		hs.expectFIN()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "End is held up by the stalled subscriber")
		}
		// The stalled one's request stream ends in a reset, not a FIN.
		fs.expectReset(wire.ResetTooFarBehind)
		assert.Empty(t, track.snapshot())
	})
}

// TestFreshAliasPerSubscription: the library publisher gives every
// subscription a Track Alias of its own, so objects of one that is ending
// never pass for another's (§3.1.2, §11.3): concurrent subscriptions to a
// track, and one started while the previous is still ending.
func TestFreshAliasPerSubscription(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs1 := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		fs2 := fp.open(subscribeMsg(2, trackA, wire.Params{}))
		a1 := expect[*wire.SubscribeOK](fs1).TrackAlias
		a2 := expect[*wire.SubscribeOK](fs2).TrackAlias
		assert.NotEqual(t, a1, a2, "concurrent subscriptions to one track share an alias")
		ss1, other := recvOrFail(t, served), recvOrFail(t, served)
		if ss1.requestID() != 0 {
			ss1 = other
		}
		// The first ends; the subscriber has not read its PUBLISH_DONE yet
		// when the next subscription starts.
		require.NoError(t, ss1.End(wire.DoneTrackEnded, ""))
		fs3 := fp.open(subscribeMsg(4, trackA, wire.Params{}))
		a3 := expect[*wire.SubscribeOK](fs3).TrackAlias
		assert.NotEqual(t, a1, a3)
		assert.NotEqual(t, a2, a3)
	})
}

// TestFilterRangesRefusedBeforeSending: the library's subscriber does not
// send range filters with more Ranges than the peer's MAX_FILTER_RANGES
// allows (§9.1.6), in SUBSCRIBE or REQUEST_UPDATE: it fails with
// ErrFilterRanges and sends nothing.
func TestFilterRangesRefusedBeforeSending(t *testing.T) {
	sub1 := wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 1)}}
	t.Run("SUBSCRIBE, peer allows none", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp := clientSession(t, nil)
			_, err := s.Subscribe(fakeCtx(t), trackA, sub1)
			require.ErrorIs(t, err, ErrFilterRanges)
			// Nothing went out: the next request is the first the peer sees.
			_, _, m := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
			assert.Equal(t, uint64(0), m.RequestID)
			assert.Empty(t, m.Parameters.RangeFilters)
		})
	})
	t.Run("REQUEST_UPDATE, counting the filters after it", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			s, fp, dialed := pipeClientDial(t, transport.PipeConfig{}, nil)
			fp.readPeerSetup()
			fp.sendSetup(&wire.Setup{MaxFilterRanges: wire.Some[uint64](2)})
			require.NoError(t, recvOrFail(t, dialed))
			_, err := s.Subscribe(fakeCtx(t), trackA, wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 3)}})
			require.ErrorIs(t, err, ErrFilterRanges)
			sub, fs, _ := establish(t, s, fp, trackA, sub1, &wire.SubscribeOK{TrackAlias: 1})
			// 1 Subgroup Range kept + 2 Object ID Ranges is 3.
			more := wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamObjectIDFilter, 0, 2)}}
			require.ErrorIs(t, sub.Update(fakeCtx(t), more), ErrFilterRanges)
			// Replacing the Subgroup filter with 2 Ranges is 2: sent.
			fine := wire.Params{RangeFilters: []wire.RangeFilter{rangeFilter(wire.ParamSubgroupFilter, 0, 2)}}
			res := goErr(func() error { return sub.Update(fakeCtx(t), fine) })
			u := expect[*wire.RequestUpdate](fs)
			require.Len(t, u.Parameters.RangeFilters, 1)
			assert.Equal(t, wire.ParamSubgroupFilter, u.Parameters.RangeFilters[0].Type)
			fs.send(&wire.RequestOK{})
			require.NoError(t, recvOrFail(t, res))
		})
	})
}

// TestEndDuringAccept: a track ended while a SUBSCRIBE_OK is still being
// written ends that subscription too: its PUBLISH_DONE follows the
// SUBSCRIBE_OK, and End does not wait for either. A subscriber that takes
// neither within Config.PublishDoneTimeout has its request stream reset.
func TestEndDuringAccept(t *testing.T) {
	for _, reads := range []bool{true, false} {
		t.Run(fmt.Sprintf("subscriber reads %v", reads), func(t *testing.T) {
			forWindowedServers(t, func(t *testing.T, client windowedClientFunc) {
				endDuringAccept(t, client, reads)
			})
		})
	}
}

func endDuringAccept(t *testing.T, client windowedClientFunc, reads bool) {
	// A SUBSCRIBE_OK too large to be buffered blocks the write
	// until the subscriber reads it.
	track, err := NewLocalTrack(testTrack, wire.KVList{{Type: 0x3b, Bytes: make([]byte, 4000)}})
	require.NoError(t, err)
	accepted := make(chan error, 1)
	h := HandlerFunc(func(r Request) {
		_, err := track.Accept(r.(*SubscribeRequest), AcceptOptions{})
		accepted <- err
	})
	const timeout = time.Second
	fp := client(&Config{Handler: h, PublishDoneTimeout: timeout}, 256)
	fs := fp.open(subscribeMsg(0, testTrack, wire.Params{}))
	settle(t, func() bool { return len(track.snapshot()) == 1 }, "the subscription is being accepted")

	start := time.Now()
	ended := goErr(func() error { track.End(wire.DoneTrackEnded, "over"); return nil })
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "End waits for a SUBSCRIBE_OK being written")
	}
	if !reads {
		// Read nothing until the publisher gave up.
		assert.ErrorIs(t, recvOrFail(t, accepted), os.ErrDeadlineExceeded)
		fs.expectReset(wire.ResetTooFarBehind)
		if bubbled() {
			assert.Equal(t, timeout, time.Since(start), "reset when PublishDoneTimeout passed")
		}
		assert.Empty(t, track.snapshot())
		return
	}
	expect[*wire.SubscribeOK](fs)
	done := expect[*wire.PublishDone](fs)
	assert.Equal(t, wire.DoneTrackEnded, done.StatusCode)
	fs.expectFIN()
	require.NoError(t, recvOrFail(t, accepted))
	assert.Empty(t, track.snapshot())
}

// windowedClientFunc connects a fake client, whose streams take at most
// window bytes until it reads them (0 keeps the default), to a library
// server with cfg. Every call of one test connects to servers with the
// first call's cfg.
type windowedClientFunc func(cfg *Config, window int) *fakePeer

// forWindowedServers runs f over both transports in memory, in a synctest
// bubble.
func forWindowedServers(t *testing.T, f func(t *testing.T, client windowedClientFunc)) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				var first *Config
				f(t, func(cfg *Config, window int) *fakePeer {
					if first == nil {
						first = cfg
					}
					_, fp := pipeServerSession(t, transport.PipeConfig{StreamWindow: window, WebTransport: tr.wt}, first)
					return fp
				})
			})
		})
	}
}
