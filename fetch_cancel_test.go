package moqt

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// openedFetch is a FETCH served by openFetch.
type openedFetch struct {
	s    *Session
	fp   *fakePeer
	fs   *fakeStream     // its request stream
	d    *pubFetchStream // its data stream, the first object read
	errs <-chan error    // what LocalTrack.Fetch returned
	req  *FetchRequest
}

// openFetch serves trackA, Largest {0, 5}, from a cursor that yields one
// object and then waits until the fetch ends, and sends a FETCH with
// params.
func openFetch(t *testing.T, cfg *Config, params wire.Params) *openedFetch {
	t.Helper()
	h, errs := fetchHandler(pubTrack(t, wire.Some(pl(0, 5))))
	reqs := make(chan *FetchRequest, 4)
	cfg.Handler = HandlerFunc(func(r Request) {
		if fr, ok := r.(*FetchRequest); ok {
			reqs <- fr
		}
		h.ServeMOQT(r)
	})
	s, fp := serverSession(t, cfg)
	pubUseCursor(s, func(filter.Window, bool) fetchCursor {
		return &pubBlockedCursor{first: []Object{pobj(0, 0, "a")}}
	})
	fs := fp.open(pubFetchMsg(t, 0, trackA, params))
	expect[*wire.FetchOK](fs)
	d := fp.acceptPubFetch(false)
	_, err := d.next()
	require.NoError(t, err)
	return &openedFetch{s: s, fp: fp, fs: fs, d: d, errs: errs, req: recvOrFail(t, reqs)}
}

// C087: the subscriber's STOP_SENDING on the request stream makes the
// publisher reset the request stream and the data stream; STOP_SENDING on
// the data stream alone ends the fetch as well.
func TestC087_StopSendingResetsFetchStreams(t *testing.T) {
	t.Run("request stream", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			f := openFetch(t, &Config{}, wire.Params{})
			s, fs, d, errs := f.s, f.fs, f.d, f.errs
			fs.stopSending(wire.ResetCancelled)
			d.expectReset(wire.ResetCancelled)
			// The fake no longer reads the request stream: the library's own
			// view must show its reset.
			assert.Eventually(t, f.req.rs.isCancelled, fakeGuard, time.Millisecond)
			assert.ErrorIs(t, recvOrFail(t, errs), ErrCancelled)
			assert.Eventually(t, func() bool { return s.serving.n.Load() == 0 }, fakeGuard, time.Millisecond)
		})
	})
	t.Run("data stream", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			f := openFetch(t, &Config{}, wire.Params{})
			s, fs, d, errs := f.s, f.fs, f.d, f.errs
			d.str.CancelRead(uint64(wire.ResetCancelled))
			fs.expectReset(wire.ResetCancelled)
			assert.Error(t, recvOrFail(t, errs))
			assert.Eventually(t, func() bool { return s.serving.n.Load() == 0 }, fakeGuard, time.Millisecond)
		})
	})
	t.Run("request stream reset", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			f := openFetch(t, &Config{}, wire.Params{})
			fs, d, errs := f.fs, f.d, f.errs
			fs.cancel()
			d.expectReset(wire.ResetCancelled)
			assert.ErrorIs(t, recvOrFail(t, errs), ErrCancelled)
		})
	})
}

// C092: REQUEST_UPDATE on a FETCH changes its priority and is answered
// with REQUEST_OK; a failed one is answered with REQUEST_ERROR and resets
// the data stream.
func TestC092_FailedFetchUpdateResetsDataStream(t *testing.T) {
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		f := openFetch(t, &Config{MaxAuthTokenCacheSize: 100}, wire.Params{})
		s, fs, d := f.s, f.fs, f.d
		fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](7)}})
		expect[*wire.RequestOK](fs)
		assert.Eventually(t, func() bool { return s.serving.n.Load() == 1 }, fakeGuard, time.Millisecond)
		// A token registered and used as a value at once is malformed
		// (§8.9): the update fails.
		fs.send(&wire.RequestUpdate{RequestID: 4, Parameters: wire.Params{AuthorizationTokens: toks(tokReg(2, "b"), tokVal("b"))}})
		assert.Equal(t, wire.ReqMalformedAuthToken, expect[*wire.RequestError](fs).ErrorCode)
		fs.expectFIN()
		d.expectReset(wire.ResetCancelled)
	})
}

// The subscriber priority of a FETCH, and its update, rank the data stream
// (§5.1, §9.20.8).
func TestFetchUpdateAppliesPriority(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := openFetch(t, &Config{}, wire.Params{SubscriberPriority: wire.Some[uint8](40)})
		w := f.req.Objects()
		assert.Equal(t, uint32(40), w.subscriber.Load())
		f.fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](7)}})
		expect[*wire.RequestOK](f.fs)
		assert.Equal(t, uint32(7), w.subscriber.Load())
	})
}

// The cap on fetches served at once: one past it is refused with
// EXCESSIVE_LOAD, and its place is free again once a fetch is over.
func TestFetchCap(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := openFetch(t, &Config{MaxServedFetches: 1}, wire.Params{})
		s, fp, fs, d := f.s, f.fp, f.fs, f.d
		fs2 := fp.open(pubFetchMsg(t, 2, trackA, wire.Params{}))
		refused := expect[*wire.RequestError](fs2)
		assert.Equal(t, wire.ReqExcessiveLoad, refused.ErrorCode)
		assertLoadRetry(t, refused.RetryInterval)
		fs2.expectFIN()
		fs.cancel()
		d.expectReset(wire.ResetCancelled)
		require.Eventually(t, func() bool { return s.serving.n.Load() == 0 }, fakeGuard, time.Millisecond)
		pubUseCursor(s, func(filter.Window, bool) fetchCursor { return &pubSliceCursor{} })
		fs3 := fp.open(pubFetchMsg(t, 4, trackA, wire.Params{}))
		expect[*wire.FetchOK](fs3)
		assert.Empty(t, fp.acceptPubFetch(false).all(), "an empty fetch is FETCH_HEADER and FIN")
	})
}

// FILL_TIMEOUT is the total wait for objects still being published
// (§9.20.6): past it the object is reported timed out and the rest comes;
// 0 never waits; absent, Config.FillTimeout applies.
func TestFetchFillTimeoutBudget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params wire.Params
		cfg    time.Duration
	}{
		{"FILL_TIMEOUT", wire.Params{FillTimeout: wire.Some[uint64](20)}, time.Hour},
		{"FILL_TIMEOUT 0", wire.Params{FillTimeout: wire.Some[uint64](0)}, time.Hour},
		{"Config.FillTimeout", wire.Params{}, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h, _ := fetchHandler(pubTrack(t, wire.Some(pl(0, 2))))
				s, fp := serverSession(t, &Config{Handler: h, FillTimeout: tc.cfg})
				waited := make(chan error, 1)
				pubUseCursor(s, func(filter.Window, bool) fetchCursor {
					return &pubPendingCursor{before: []Object{pobj(0, 0, "a")}, at: pl(0, 1),
						after: []Object{pobj(0, 2, "c")}, waited: waited}
				})
				fs := fp.open(pubFetchMsg(t, 0, trackA, tc.params))
				expect[*wire.FetchOK](fs)
				es := fp.acceptPubFetch(false).all()
				assert.ErrorIs(t, recvOrFail(t, waited), context.DeadlineExceeded)
				require.Len(t, es, 3)
				assert.Equal(t, []wire.Location{pl(0, 0), pl(0, 1), pl(0, 2)}, pubLocs(es))
				assert.Equal(t, wire.EndOfTimedOutRange, es[1].EndOfRange)
				fs.expectFIN()
			})
		})
	}
}

// A fetch whose subscriber stops reading is reset within
// Config.SubscriberGrace (TOO_FAR_BEHIND, on both streams), and holds up
// neither the handler nor the track's other subscribers.
func TestFetchStalledSubscriber(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := pubTrack(t, wire.Some(pl(0, 63)))
		h, errs := fetchHandler(lt)
		s, fp := serverSession(t, &Config{Handler: h, SubscriberGrace: 500 * time.Millisecond})
		big := make([]byte, 256<<10)
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			c := &pubSliceCursor{}
			for i := range uint64(64) {
				c.entries = append(c.entries, Object{Location: pl(0, i), Payload: big})
			}
			return c
		})
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
		expect[*wire.FetchOK](fs)
		fetchData, err := fp.conn.AcceptUniStream(fakeCtx(t))
		require.NoError(t, err)
		// The data stream is not read. Meanwhile the track's live
		// subscriptions go on: a subscriber on it gets its objects.
		sub := fp.open(subscribeMsg(2, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](sub)
		w := lt.OpenSubgroup(1, 0, SubgroupOptions{})
		require.NoError(t, w.WriteObject(Object{Location: pl(1, 0), Payload: []byte("live")}))
		require.NoError(t, w.Close())
		fp.acceptData().expectObjects(0)
		// Past the grace the fetch is reset, both streams, and the handler
		// is free.
		require.Error(t, recvOrFail(t, errs))
		fs.expectReset(wire.ResetTooFarBehind)
		_, err = io.Copy(io.Discard, fetchData)
		var se *transport.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, uint64(wire.ResetTooFarBehind), se.Code)
	})
}

// The session's end ends the fetch: the handler's Fetch returns and the
// fetch's place is free.
func TestFetchEndsWithSession(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := openFetch(t, &Config{}, wire.Params{})
		require.NoError(t, f.s.Close())
		assert.Error(t, recvOrFail(t, f.errs))
		assert.Eventually(t, func() bool { return f.s.serving.n.Load() == 0 }, fakeGuard, time.Millisecond)
	})
}

// A REQUEST_UPDATE on a FETCH may carry only what a FETCH's update allows
// (§9.20.2): FORWARD there closes the session.
func TestFetchUpdateParamsChecked(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		f := openFetch(t, &Config{}, wire.Params{})
		f.fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{Forward: wire.Some(false)}})
		f.fp.expectClose(wire.ProtocolViolation)
	})
}

// Over both transports, in memory and real: the subscriber's STOP_SENDING
// on a FETCH resets its data stream (C087), and a subscription's end
// resets its open fill (C088).
func TestFetchCancelOverTransports(t *testing.T) {
	blocked := func(filter.Window, bool) fetchCursor {
		return &pubBlockedCursor{first: []Object{pobj(0, 0, "a")}}
	}
	forServerSessions(t, "fetch cancelled", func(t *testing.T, connect fakeConnector) {
		h, errs := fetchHandler(pubTrack(t, wire.Some(pl(0, 5))))
		s, fp := connect(t, &Config{Handler: h})
		pubUseCursor(s, blocked)
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
		expect[*wire.FetchOK](fs)
		d := fp.acceptPubFetch(false)
		_, err := d.next()
		require.NoError(t, err)
		fs.stopSending(wire.ResetCancelled)
		d.expectReset(wire.ResetCancelled)
		assert.ErrorIs(t, recvOrFail(t, errs), ErrCancelled)
	})
	forServerSessions(t, "fill reset", func(t *testing.T, connect fakeConnector) {
		h, _ := fetchHandler(pubTrack(t, wire.Some(pl(0, 5))))
		s, fp := connect(t, &Config{Handler: h})
		pubUseCursor(s, blocked)
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{FillParameters: wholeTrack()}))
		expect[*wire.SubscribeOK](fs)
		d := fp.acceptPubFetch(false)
		_, err := d.next()
		require.NoError(t, err)
		fs.cancel()
		d.expectReset(wire.ResetCancelled)
	})
}

// A fetch stream whose subscriber reads slowly but steadily is not too
// far behind: an object that takes longer than Config.SubscriberGrace to
// go out, while the subscriber keeps taking bytes, arrives whole. In a
// synctest bubble: the pace is the bubble's clock, not the scheduler's.
func TestFetchSlowReaderKeepsUp(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				lt := pubTrack(t, wire.Some(pl(0, 0)))
				h, errs := fetchHandler(lt)
				s, fp := pipeServerSession(t, transport.PipeConfig{WebTransport: tr.wt},
					&Config{Handler: h, SubscriberGrace: 200 * time.Millisecond})
				big := make([]byte, 3<<20)
				pubUseCursor(s, func(filter.Window, bool) fetchCursor {
					return &pubSliceCursor{entries: []Object{{Location: pl(0, 0), Payload: big}}}
				})
				fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
				expect[*wire.FetchOK](fs)
				str, err := fp.conn.AcceptUniStream(fakeCtx(t))
				require.NoError(t, err)
				// 64 KiB every 20 ms: about a second in all, five graces.
				var n int
				buf := make([]byte, 64<<10)
				for {
					m, err := io.ReadFull(str, buf)
					n += m
					if err != nil {
						require.ErrorIs(t, err, io.ErrUnexpectedEOF, "the stream ends with its FIN, after %d bytes", n)
						break
					}
					advance(20 * time.Millisecond)
				}
				assert.Greater(t, n, len(big))
				require.NoError(t, recvOrFail(t, errs))
			})
		})
	}
}
