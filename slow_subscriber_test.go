package moqt

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Tests of the publisher's bound on slow subscribers (served_backlog.go) and of the
// streams that must end with a reset rather than a FIN (§11.3.2).

// lastErr drains ch and returns the error that ended it, nil for a FIN.
func lastErr(t *testing.T, ctx context.Context, ch <-chan received) error {
	t.Helper()
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				return nil
			}
			if o.err != nil {
				return o.err
			}
		case <-ctx.Done():
			require.FailNow(t, "the stream did not end")
		}
	}
}

// requireReset checks that err is a reset of the stream by the peer with
// code.
func requireReset(t *testing.T, err error, code wire.ResetCode) {
	t.Helper()
	var se *transport.StreamError
	require.ErrorAs(t, err, &se, "the stream must end with a reset, not a FIN")
	assert.Equal(t, uint64(code), se.Code, "reset code %s", wire.ResetCode(se.Code))
}

// TestSlowLoneSubscriberTooFarBehind: the only subscriber of a track stops
// reading. The publisher's writes still complete, each within about a
// grace; the subscription ends with PUBLISH_DONE TOO_FAR_BEHIND and its
// stream is reset with TOO_FAR_BEHIND (§12.5). A subscriber that joins
// later gets every object.
func TestSlowLoneSubscriberTooFarBehind(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const (
			grace = 200 * time.Millisecond
			size  = 1000
			n     = 100 // 100 KB: far past the subscriber's 4 KiB stream window
		)
		lt := subscribeTrackOver(t, connect, wire.Params{}, &Config{SubscriberGrace: grace}, slowClient())
		ctx := lt.ctx
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, payloadOf(0, size)))
		r, err := lt.sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		_, err = r.Next()
		require.NoError(t, err)
		// The subscriber reads no more.
		var longest time.Duration
		writes := goErr(func() error {
			for id := uint64(1); id < n; id++ {
				start := time.Now()
				if err := writeObject(w, id, nil, payloadOf(id, size)); err != nil {
					return err
				}
				longest = max(longest, time.Since(start))
			}
			return w.Close()
		})
		select {
		case err := <-writes:
			require.NoError(t, err)
		case <-ctx.Done():
			require.FailNow(t, "the publisher was held up by its only subscriber")
		}
		if bubbled() { // on the wall clock a busy machine could pass the bound
			assert.Less(t, longest, 10*grace, "a write waits about a grace at most")
		}
		waitDone(t, ctx, lt.sub.Done(), "slow subscription")
		var de *DoneError
		require.ErrorAs(t, lt.sub.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)
		require.ErrorAs(t, lt.ss.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)
		_, _, rerr := readAll(r)
		requireReset(t, rerr, wire.ResetTooFarBehind)

		// A later subscriber, which reads, gets everything.
		other := lt.p.another(t, nil)
		sub2, err := other.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		// Served once the track lists it (the old subscription gone).
		settle(t, func() bool {
			subs := lt.track.snapshot()
			return len(subs) == 1 && subs[0] != lt.ss
		}, "the new subscription is served")
		got := readSubgroupAsync(ctx, sub2)
		w = lt.track.OpenSubgroup(1, 0, SubgroupOptions{})
		writeObjects(t, ctx, w, 0, n, fixedSize(size))
		require.NoError(t, w.Close())
		expectObjects(t, ctx, got, 0, n, fixedSize(size))
		expectEnd(t, ctx, got)
		assert.NoError(t, sub2.Err())
	})
}

// TestStalledSubscriberDoesNotHoldOthers: with two subscribers, one of
// which stops reading, the other gets every object while the stalled one
// is cut off with TOO_FAR_BEHIND after a grace, long before its backlog
// bound.
func TestStalledSubscriberDoesNotHoldOthers(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const size = 1000
		f := newFanOutOver(t, connect, &Config{SubscriberGrace: 200 * time.Millisecond}, wire.Params{})
		ctx := f.ctx
		fast := readSubgroupAsync(ctx, f.fast)
		w := f.track.OpenSubgroup(0, 0, SubgroupOptions{})
		writeObjects(t, ctx, w, 0, 64, fixedSize(size))
		expectObjects(t, ctx, fast, 0, 64, fixedSize(size))
		waitDone(t, ctx, f.slow.Done(), "stalled subscription")
		var de *DoneError
		require.ErrorAs(t, f.slow.Err(), &de)
		assert.Equal(t, wire.DoneTooFarBehind, de.Code)
		writeObjects(t, ctx, w, 64, 80, fixedSize(size))
		require.NoError(t, w.Close())
		expectObjects(t, ctx, fast, 64, 80, fixedSize(size))
		expectEnd(t, ctx, fast)
		f.waitNoBacklog(t, f.ssSlow)
	})
}

// TestSubgroupInterruptStuckWrite: with a grace too long to matter, a
// write stuck on a subscriber that does not read returns once Close or
// Reset is called from another goroutine, and the stream that could not
// take the object whole is reset, never finished.
func TestSubgroupInterruptStuckWrite(t *testing.T) {
	for _, how := range []string{"close", "reset"} {
		t.Run(how, func(t *testing.T) {
			forTransports(t, func(t *testing.T, connect connector) {
				lt := subscribeTrackOver(t, connect, wire.Params{}, &Config{SubscriberGrace: time.Hour}, slowClient())
				ctx := lt.ctx
				w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, payloadOf(0, 10)))
				r, err := lt.sub.AcceptSubgroup(ctx)
				require.NoError(t, err)
				write := goErr(func() error { return writeObject(w, 1, nil, payloadOf(1, 256<<10)) })
				settle(t, func() bool { return w.sq.Waiting() }, "the write waits for the stream")
				code := wire.ResetCancelled
				if how == "close" {
					require.NoError(t, w.Close())
				} else {
					code = wire.ResetGoingAway
					w.Reset(code)
				}
				select {
				case err := <-write:
					require.ErrorIs(t, err, ErrSubgroupClosed)
				case <-ctx.Done():
					require.FailNow(t, "the stuck write was not interrupted")
				}
				_, _, rerr := readAll(r)
				requireReset(t, rerr, code)
				assert.NoError(t, lt.sub.Err(), "the subscription goes on")
			})
		})
	}
}

// TestEarlyObjectsWaitForPublishOK: objects of a PUBLISH past
// Config.MaxEarlyObjects wait for PUBLISH_OK instead of being dropped; the
// subscriber gets every one and then the FIN, and the publisher's writes
// do not wait for the answer.
func TestEarlyObjectsWaitForPublishOK(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		const n = 8
		release := make(chan struct{})
		subs := make(chan *Subscription, 1)
		handler := HandlerFunc(func(r Request) {
			pr, ok := r.(*PublishRequest)
			if !ok {
				DefaultHandler.ServeMOQT(r)
				return
			}
			<-release
			if sub, err := pr.Accept(wire.Params{}); err == nil {
				subs <- sub
			}
		})
		p := connect(t, &Config{MaxEarlyObjects: 2}, &Config{Handler: handler})
		ctx := testCtx(t, 20*time.Second)
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		published := goErr(func() error {
			_, err := track.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
			return err
		})
		settle(t, func() bool { return len(track.snapshot()) == 1 }, "the PUBLISH is served before its answer")
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		writeObjects(t, ctx, w, 0, n, fixedSize(100))
		require.NoError(t, w.Close())
		close(release)
		require.NoError(t, <-published)
		sub := <-subs
		got := readSubgroupAsync(ctx, sub)
		expectObjects(t, ctx, got, 0, n, fixedSize(100))
		expectEnd(t, ctx, got)
	})
}

// TestC020_UpdateEndBelowOpenSubgroupResets: a REQUEST_UPDATE that moves
// End Group below an open subgroup leaves its later objects undelivered,
// so the stream is reset, not finished (§11.3.2).
func TestC020_UpdateEndBelowOpenSubgroupResets(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			lt := subscribeTrackOver(t, connect, wire.Params{
				LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, 5))}, nil, nil)
			ctx := lt.ctx
			w := lt.track.OpenSubgroup(3, 0, SubgroupOptions{})
			writeObjects(t, ctx, w, 0, 2, fixedSize(10))
			got := readSubgroupAsync(ctx, lt.sub)
			expectObjects(t, ctx, got, 0, 2, fixedSize(10))
			require.NoError(t, lt.sub.Update(ctx, wire.Params{
				LocationFilter: wire.Some(wire.RangeFilterTo(wire.Location{}, 2))}))
			writeObjects(t, ctx, w, 2, 4, fixedSize(10))
			require.NoError(t, w.Close())
			requireReset(t, lastErr(t, ctx, got), wire.ResetCancelled)
		})
	})
}

// TestC019_FilterEndObjectFinishes: a subscription whose filter ends
// inside a subgroup gets that subgroup's stream finished once past the
// end: every object it covers was sent (§11.3.2). Draft 21 only: in 18
// and 19 a filter ends at a whole group (§5.1.2).
func TestC019_FilterEndObjectFinishes(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{
			LocationFilter: wire.Some(wire.RangeFilterToObject(wire.Location{}, wire.Location{Group: 0, Object: 2}))}, nil, nil)
		ctx := lt.ctx
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		got := readSubgroupAsync(ctx, lt.sub)
		writeObjects(t, ctx, w, 0, 5, fixedSize(10))
		expectObjects(t, ctx, got, 0, 3, fixedSize(10))
		expectEnd(t, ctx, got)
		require.NoError(t, w.Close())
	})
}

// TestC020_JoinMidSubgroup: a subscription served after a subgroup began
// gets a stream without FIRST_OBJECT. If objects it covers came before it
// (its start lies inside the subgroup), the stream ends with a reset;
// if it starts after them, with a FIN (§11.3.2). The objects are read
// before the subgroup ends: a reset may discard what was not read.
func TestC020_JoinMidSubgroup(t *testing.T) {
	cases := []struct {
		name   string
		filter wire.LocationFilter
		reset  bool
	}{
		{"start inside the subgroup", wire.StartFilter(wire.Location{Group: 0, Object: 1}), true},
		{"start after the objects sent", wire.NextObjectFilter(), false},
	}
	for _, tr := range pipeTransports {
		for _, c := range cases {
			t.Run(tr.name+"/"+c.name, func(t *testing.T) {
				forDrafts(t, sharedDrafts, func(t *testing.T) {
					track, cfg, served := newServedTrack(t, testTrack, nil)
					p := newPipePair(t, transport.PipeConfig{WebTransport: tr.wt}, cfg, nil)
					ctx := testCtx(t, 20*time.Second)
					w := track.OpenSubgroup(0, 0, SubgroupOptions{})
					writeObjects(t, ctx, w, 0, 5, fixedSize(10))
					sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(c.filter)})
					require.NoError(t, err)
					<-served
					writeObjects(t, ctx, w, 5, 10, fixedSize(10))
					r, err := sub.AcceptSubgroup(ctx)
					require.NoError(t, err)
					assert.False(t, r.Header().FirstObject, "the stream does not start at the subgroup's first object")
					for id := uint64(5); id < 10; id++ {
						h, err := r.Next()
						require.NoError(t, err)
						require.Equal(t, id, h.Location.Object)
						_, err = r.readPayload(100)
						require.NoError(t, err)
					}
					require.NoError(t, w.Close())
					_, err = r.Next()
					if c.reset {
						requireReset(t, err, wire.ResetCancelled)
					} else {
						assert.ErrorIs(t, err, io.EOF)
					}
				})
			})
		}
	}
}

// TestC020_ForwardResumedMidSubgroup: objects withheld by Forward 0 before
// the subscription had a stream for the subgroup leave a hole, so the
// stream opened once Forward is back to 1 ends with a reset.
func TestC020_ForwardResumedMidSubgroup(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			lt := subscribeTrackOver(t, connect, wire.Params{Forward: wire.Some(false),
				LocationFilter: wire.Some(wire.StartFilter(wire.Location{}))}, nil, nil)
			ctx := lt.ctx
			w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
			writeObjects(t, ctx, w, 0, 3, fixedSize(10))
			require.NoError(t, lt.sub.Update(ctx, wire.Params{Forward: wire.Some(true)}))
			got := readSubgroupAsync(ctx, lt.sub)
			writeObjects(t, ctx, w, 3, 6, fixedSize(10))
			expectObjects(t, ctx, got, 3, 6, fixedSize(10))
			require.NoError(t, w.Close())
			requireReset(t, lastErr(t, ctx, got), wire.ResetCancelled)
		})
	})
}

// TestC019_ForwardResumedPastWithheld: the objects Forward 0 withheld
// leave no hole when the REQUEST_UPDATE turning Forward back to 1 also
// moves the Start Location past them (to the Next Object, as a relay
// does): they are before the subscription's start, which §11.3.2 excepts,
// so the new stream ends with a FIN. The same with a stream cut by
// Forward 0. Before, either was reset.
func TestC019_ForwardResumedPastWithheld(t *testing.T) {
	for _, cut := range []bool{false, true} {
		t.Run(fmt.Sprintf("cut=%v", cut), func(t *testing.T) {
			forTransports(t, func(t *testing.T, connect connector) {
				lt := subscribeTrackOver(t, connect, wire.Params{Forward: wire.Some(cut)}, nil, nil)
				ctx := lt.ctx
				w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
				if cut {
					got := readSubgroupAsync(ctx, lt.sub)
					writeObjects(t, ctx, w, 0, 2, fixedSize(10))
					expectObjects(t, ctx, got, 0, 2, fixedSize(10))
					require.NoError(t, lt.sub.Update(ctx, wire.Params{Forward: wire.Some(false)}))
					writeObjects(t, ctx, w, 2, 4, fixedSize(10))
					requireReset(t, lastErr(t, ctx, got), wire.ResetCancelled)
				} else {
					writeObjects(t, ctx, w, 0, 4, fixedSize(10))
				}
				require.NoError(t, lt.sub.Update(ctx, wire.Params{Forward: wire.Some(true),
					LocationFilter: wire.Some(wire.NextObjectFilter())}))
				got := readSubgroupAsync(ctx, lt.sub)
				writeObjects(t, ctx, w, 4, 6, fixedSize(10))
				expectObjects(t, ctx, got, 4, 6, fixedSize(10))
				require.NoError(t, w.Close())
				assert.NoError(t, lastErr(t, ctx, got), "a FIN")
			})
		})
	}
}

// TestResetCodeFor: data streams of a subscription that ends are reset
// with the §12.5 code matching its PUBLISH_DONE code.
func TestResetCodeFor(t *testing.T) {
	for done, reset := range map[wire.PublishDoneCode]wire.ResetCode{
		wire.DoneTooFarBehind:   wire.ResetTooFarBehind,
		wire.DoneGoingAway:      wire.ResetGoingAway,
		wire.DoneExcessiveLoad:  wire.ResetExcessiveLoad,
		wire.DoneMalformedTrack: wire.ResetMalformedTrack,
		wire.DoneInternalError:  wire.ResetInternalError,
		wire.DoneExpired:        wire.ResetCancelled,
		wire.DoneTrackEnded:     wire.ResetCancelled,
		wire.DoneUpdateFailed:   wire.ResetCancelled,
	} {
		assert.Equal(t, reset, resetCodeFor(done), "%s", done)
	}
}

// TestSubgroupDeliveryTimersReleased: a subscriber-chosen
// SUBGROUP_DELIVERY_TIMEOUT starts a timer per finished stream. They are
// capped per subscription (the oldest fires early, resetting its stream)
// and all stopped when the session ends, so they keep nothing in memory.
func TestSubgroupDeliveryTimersReleased(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		timedOut := make(chan struct{}, 2*maxSubgroupTimers)
		cfg := &Config{hooks: &sessionHooks{deliveryTimedOut: func() { timedOut <- struct{}{} }}}
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{SubgroupDeliveryTimeout: wire.Some[uint64](3_600_000)}, cfg, nil)
		ctx := lt.ctx
		const extra = 3
		var outs []*subgroupOut
		for g := range uint64(maxSubgroupTimers + extra) {
			w := lt.track.OpenSubgroup(g, 0, SubgroupOptions{})
			require.NoError(t, writeObject(w, 0, nil, []byte{1}))
			require.NoError(t, w.Close())
			outs = append(outs, w.outs[lt.ss])
		}
		assert.Equal(t, maxSubgroupTimers, lt.ss.wp.timers.count(), "capped")
		for range extra {
			select {
			case <-timedOut:
			case <-ctx.Done():
				require.FailNow(t, "the oldest streams were not reset")
			}
		}

		require.NoError(t, lt.p.client.Close())
		waitDone(t, ctx, lt.ss.Context().Done(), "served subscription")
		settle(t, func() bool { return lt.ss.wp.timers.count() == 0 }, "the timers are stopped")
		for i, out := range outs {
			assert.False(t, out.dl.subgroup.Stop(), "timer %d still running", i)
		}
	})
}

// TestSlowSubscriberPauseWithinGrace is a control: a lone subscriber that
// pauses for less than a grace and then reads holds the publisher back
// without being cut off, and gets every object.
func TestSlowSubscriberPauseWithinGrace(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const grace = 5 * time.Second
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{}, &Config{SubscriberGrace: grace}, slowClient())
		ctx := lt.ctx
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		writes := goErr(func() error {
			for id := range uint64(64) {
				if err := writeObject(w, id, nil, payloadOf(id, 1000)); err != nil {
					return err
				}
			}
			return w.Close()
		})
		advance(grace * 4 / 5) // the subscriber pauses, the writer blocked meanwhile
		got := readSubgroupAsync(ctx, lt.sub)
		expectObjects(t, ctx, got, 0, 64, fixedSize(1000))
		expectEnd(t, ctx, got)
		require.NoError(t, <-writes)
		assert.NoError(t, lt.sub.Err())
	})
}

// TestDoneResetsWithMatchingCode: PUBLISH_DONE resets the subscription's
// open data streams first, with the §12.5 code matching its status.
func TestDoneResetsWithMatchingCode(t *testing.T) {
	for _, tr := range pipeTransports {
		for _, code := range []wire.PublishDoneCode{wire.DoneTooFarBehind, wire.DoneGoingAway, wire.DoneExpired} {
			t.Run(tr.name+"/"+code.String(), func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					lt := subscribeTrackOver(t, overPipe(tr.wt), wire.Params{}, nil, nil)
					ctx := lt.ctx
					w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
					got := readSubgroupAsync(ctx, lt.sub)
					writeObjects(t, ctx, w, 0, 1, fixedSize(10))
					expectObjects(t, ctx, got, 0, 1, fixedSize(10))
					require.NoError(t, lt.ss.End(code, "test"))
					requireReset(t, lastErr(t, ctx, got), resetCodeFor(code))
					waitDone(t, ctx, lt.sub.Done(), "subscription")
				})
			})
		}
	}
}

// streamEnd reads ch, from readSubgroupAsync, until the stream ends: with
// a FIN (finished) or an error. It returns neither if the stream does not
// end within d.
func streamEnd(ctx context.Context, ch <-chan received, d time.Duration) (finished bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		select {
		case o, ok := <-ch:
			if !ok {
				return true, nil
			}
			if o.err != nil {
				return false, o.err
			}
		case <-ctx.Done():
			return false, nil
		}
	}
}

// TestC020_ForwardOffAndOnMidSubgroup: a subgroup's stream cut by Forward 0
// (reset, §11.3.2) does not keep the subscription from the rest of the
// subgroup once Forward is back to 1: the objects written then come on a
// new stream, which ends with a reset since it lacks those before. They
// were lost before: a relay that accepts a PUBLISH at Forward 0 and turns it
// to 1 for its first subscriber lost the rest of the group in flight.
func TestC020_ForwardOffAndOnMidSubgroup(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		ctx := lt.ctx
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		got := readSubgroupAsync(ctx, lt.sub)
		writeObjects(t, ctx, w, 0, 3, fixedSize(10))
		expectObjects(t, ctx, got, 0, 3, fixedSize(10))

		require.NoError(t, lt.sub.Update(ctx, wire.Params{Forward: wire.Some(false)}))
		writeObjects(t, ctx, w, 3, 6, fixedSize(10)) // withheld: the stream is cut
		requireReset(t, lastErr(t, ctx, got), wire.ResetCancelled)

		require.NoError(t, lt.sub.Update(ctx, wire.Params{Forward: wire.Some(true)}))
		got = readSubgroupAsync(ctx, lt.sub)
		writeObjects(t, ctx, w, 6, 9, fixedSize(10))
		expectObjects(t, ctx, got, 6, 9, fixedSize(10))
		require.NoError(t, w.Close())
		requireReset(t, lastErr(t, ctx, got), wire.ResetCancelled)
	})
}

// TestEndWaitsForSlowSubscriber: End delivers the backlog of a complete
// subgroup to a subscriber that takes it slowly but steadily, far past
// SubscriberGrace, before PUBLISH_DONE: every object, the FIN, then
// TRACK_ENDED. A fixed bound of SubscriberGrace plus cutLinger reset the
// stream, so a file published over a lossy path lost its end while the
// publisher and subscriber both exited 0.
func TestEndWaitsForSlowSubscriber(t *testing.T) {
	const objects, size = 3, 1 << 20
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		ctx := lt.ctx
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		ended := goErr(func() error {
			for id := range uint64(objects) {
				if err := writeObject(w, id, nil, payloadOf(id, size)); err != nil {
					return err
				}
			}
			if err := w.Close(); err != nil {
				return err
			}
			lt.track.End(wire.DoneTrackEnded, "done")
			return nil
		})
		r, err := lt.sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		buf := make([]byte, 64<<10)
		for id := range uint64(objects) {
			o, err := r.Next()
			require.NoError(t, err, "object %d", id)
			require.Equal(t, id, o.Location.Object)
			got := 0
			for got < size {
				n, err := r.Read(buf)
				got += n
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				advance(500 * time.Millisecond) // 64 KiB a half second: 24 s in all
			}
			require.Equal(t, size, got)
		}
		_, err = r.Next()
		require.ErrorIs(t, err, io.EOF, "the FIN, not a reset")
		require.NoError(t, <-ended)
		<-lt.sub.Done()
		var de *DoneError
		require.ErrorAs(t, lt.sub.Err(), &de)
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
	})
}
