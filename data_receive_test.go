package moqt

import (
	"bytes"
	"context"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// clientSessionOver is clientSession over a Pipe imitating raw QUIC
// ("moqt") or WebTransport ("https"). Call it inside inBubble.
func clientSessionOver(t *testing.T, scheme string, cfg *Config) (*Session, *fakePeer) {
	t.Helper()
	return pipeClientSession(t, transport.PipeConfig{WebTransport: scheme == "https"}, cfg)
}

// subscribeFakeWith subscribes to testTrack with params against the fake
// publisher, answers with SUBSCRIBE_OK on alias and returns the
// subscription and the fake's end of its request stream.
func subscribeFakeWith(t *testing.T, s *Session, fp *fakePeer, params wire.Params, alias uint64) (*Subscription, *fakeStream) {
	t.Helper()
	got := make(chan *Subscription, 1)
	go func() {
		sub, err := s.Subscribe(fakeCtx(t), testTrack, params)
		if err == nil {
			got <- sub
		}
		close(got)
	}()
	req := fp.accept()
	expect[*wire.Subscribe](req)
	req.send(&wire.SubscribeOK{TrackAlias: alias})
	sub := recvOrFail(t, got)
	require.NotNil(t, sub)
	return sub, req
}

// expectStopped waits for STOP_SENDING on a stream the fake opened and
// returns its code.
func expectStopped(t *testing.T, str transport.SendStream) uint64 {
	t.Helper()
	select {
	case <-str.Context().Done():
	case <-time.After(fakeGuard):
		t.Fatal("stream not stopped")
	}
	_, err := str.Write([]byte{0})
	var se *transport.StreamError
	require.ErrorAs(t, err, &se)
	return se.Code
}

// TestReceiveFilterAppliesOnReusedAlias: a subscription ended, and the
// publisher gave the next subscription to the track the same alias. The
// late objects of the first, outside the second's filter, must not reach
// the second, whether on streams or in datagrams; objects past its filter's
// end inside one of its streams are skipped too (§3.3.1, §3.1.2). Before,
// a lone subscription on an alias received whatever carried it.
func TestReceiveFilterAppliesOnReusedAlias(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) { testFilterOnReusedAlias(t, tr.wt) })
		})
	}
}

func testFilterOnReusedAlias(t *testing.T, wt bool) {
	s, fp := pipeClientSession(t, transport.PipeConfig{WebTransport: wt}, nil)
	old, oldReq := subscribeFakeWith(t, s, fp, wire.Params{}, 3)
	oldReq.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded})
	oldReq.fin()
	closedOrFail(t, old.dataDone, "first subscription's data plane")

	filter := wire.LocationFilter{Fields: 4, StartGroup: 5, StartObject: 0, EndGroup: 6, EndObject: 2}
	sub, _ := subscribeFakeWith(t, s, fp, wire.Params{LocationFilter: wire.Some(filter)}, 3)

	// Late objects of the first subscription: group 2, before the filter.
	late := fp.openSubgroup(3, 2, []byte("old-0"), []byte("old-1"))
	assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, late), "a stream outside the filter is stopped")
	for _, d := range []wire.ObjectDatagram{
		{TrackAlias: 3, GroupID: 1, ObjectID: 0, DefaultPriority: true, Payload: []byte("old")},
		{TrackAlias: 3, GroupID: 6, ObjectID: 7, DefaultPriority: true, Payload: []byte("past the end")},
		{TrackAlias: 3, GroupID: 5, ObjectID: 1, DefaultPriority: true, Payload: []byte("in")},
	} {
		b, err := d.Append(nil)
		require.NoError(t, err)
		require.NoError(t, fp.conn.SendDatagram(b))
	}

	// The second subscription's own stream, with objects past its end.
	own := fp.openSubgroup(3, 6, []byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e"))
	require.NoError(t, own.Close())

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r, err := sub.AcceptSubgroup(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), r.Header().GroupID, "the late stream was not delivered")
	ids, payloads := readSubgroup(t, r)
	assert.Equal(t, []uint64{0, 1, 2}, ids)
	assert.Equal(t, [][]byte{[]byte("a"), []byte("b"), []byte("c")}, payloads)

	d, err := sub.ReadDatagram(ctx)
	require.NoError(t, err)
	assert.Equal(t, wire.Location{Group: 5, Object: 1}, d.Location, "only the datagram inside the filter arrives")

	short, cancelShort := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancelShort()
	_, err = sub.AcceptSubgroup(short)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "no other stream was delivered")
	_, err = sub.ReadDatagram(short)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "no other datagram was delivered")
	sub.mu.Lock()
	assert.Equal(t, uint64(1), sub.streamsSeen, "the late stream is not counted for PUBLISH_DONE")
	sub.mu.Unlock()
}

// TestReceiveWideningUpdateInFlight: objects the publisher sends under a
// widened filter before its REQUEST_OK arrives belong to the subscription
// (§9.5.1); checking every object against the filter must not drop them.
func TestReceiveWideningUpdateInFlight(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		filter := wire.LocationFilter{Fields: 3, StartGroup: 5, StartObject: 0, EndGroup: 5}
		sub, req := subscribeFakeWith(t, s, fp, wire.Params{LocationFilter: wire.Some(filter)}, 4)
		wider := wire.LocationFilter{Fields: 3, StartGroup: 5, StartObject: 0, EndGroup: 9}
		updated := goErr(func() error {
			return sub.Update(fakeCtx(t), wire.Params{LocationFilter: wire.Some(wider)})
		})
		expect[*wire.RequestUpdate](req)
		// The publisher applies the update and sends group 7 before answering.
		str := fp.openSubgroup(4, 7, []byte("x"))
		require.NoError(t, str.Close())
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		assert.Equal(t, uint64(7), r.Header().GroupID)
		ids, _ := readSubgroup(t, r)
		assert.Equal(t, []uint64{0}, ids)
		req.send(&wire.RequestOK{})
		require.NoError(t, recvOrFail(t, updated))
	})
}

// TestReceiveEarlyStreamsShareOneBudget: streams that arrive before their
// alias are read ahead within Config.MaxPendingBytes, and the bytes stay
// charged to it until the application reads them: binding the alias
// neither frees the budget nor lets a pipe read further ahead (before,
// each bound stream read 256 KiB ahead, uncounted). A later early stream
// that would pass the budget is stopped with EXCESSIVE_LOAD.
func TestReceiveEarlyStreamsShareOneBudget(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const (
			budget  = 64 << 10
			window  = 32 << 10
			streams = 4
			first   = 12 << 10 // each early stream's first object
		)
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: time.Minute, MaxPendingBytes: budget,
			StreamReceiveWindow: window, ConnectionReceiveWindow: 16 << 20})
		got, req := subscribeAgainstFake(t, s, fp)
		var early []transport.SendStream
		for g := range uint64(streams) {
			early = append(early, fp.openSubgroup(5, g, make([]byte, first)))
		}
		synctest.Wait()
		s.routes.mu.Lock()
		require.GreaterOrEqual(t, s.routes.pendingBytes, streams*first, "the early streams are read ahead")
		s.routes.mu.Unlock()
		req.send(&wire.SubscribeOK{TrackAlias: 5})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)

		// A new early stream for another alias does not fit what is left.
		late, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
		require.NoError(t, err)
		enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 6, DefaultPriority: true}}
		b, err := enc.Header.Append(nil)
		require.NoError(t, err)
		// More than the budget minus the bytes the bound streams still hold
		// (their first objects, less what routing read of them).
		b, err = enc.AppendObject(b, wire.SubgroupObject{ObjectID: 0, PayloadLength: budget - 4<<10})
		require.NoError(t, err)
		_, _ = late.Write(append(b, make([]byte, budget-4<<10)...)) // may be stopped before it is all written
		assert.Equal(t, uint64(wire.ResetExcessiveLoad), expectStopped(t, late))

		// The publisher keeps writing on the bound streams; nobody reads them.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var written [streams]atomic.Int64
		var wg sync.WaitGroup
		for i, str := range early {
			wg.Add(1)
			go func() {
				defer wg.Done()
				enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 5, GroupID: uint64(i), DefaultPriority: true}}
				// Past object 0, which openSubgroup sent: deltas follow it.
				_, err := enc.AppendObject(nil, wire.SubgroupObject{ObjectID: 0, PayloadLength: first})
				if !assert.NoError(t, err) {
					return
				}
				for id := uint64(1); ctx.Err() == nil; id++ {
					b, err := enc.AppendObject(nil, wire.SubgroupObject{ObjectID: id, PayloadLength: 4 << 10})
					if !assert.NoError(t, err) {
						return
					}
					b = append(b, make([]byte, 4<<10)...)
					n, err := str.Write(b)
					written[i].Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
		t.Cleanup(func() {
			cancel()
			for _, str := range early {
				str.CancelWrite(uint64(wire.ResetCancelled))
			}
			wg.Wait()
		})

		total := func() int64 {
			var n int64
			for i := range written {
				n += written[i].Load()
			}
			return n
		}
		synctest.Wait() // the writers are blocked on flow control
		last := total()
		// What the publisher could write past the first objects is what the
		// stream windows allow, the one packet a QUIC stack takes beyond
		// them (quic-go's largest, 1452 bytes), and the one read of at most a
		// bufio buffer (4 KiB) a pipe may have had in progress when the alias
		// was bound; a pipe reading ahead would have taken more.
		assert.LessOrEqual(t, last, int64(streams*(window+1452+4<<10)), "bound pipes read no further ahead")
		s.routes.mu.Lock()
		assert.LessOrEqual(t, s.routes.pendingBytes, budget, "what the pipes hold stays within MaxPendingBytes")
		s.routes.mu.Unlock()
	})
}

// TestReceiveStalledStreamHeaderTimesOut: a unidirectional stream that
// stops inside its type or its header closes the session with
// DATA_STREAM_TIMEOUT once Config.DataStreamTimeout passes (§12.2), rather
// than holding its goroutine and buffer until the connection ends.
func TestReceiveStalledStreamHeaderTimesOut(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
	}{
		{"inside the type", []byte{0x80}},         // the first byte of a two-byte vi64
		{"after the type", []byte{0x10}},          // SUBGROUP_HEADER, nothing more
		{"inside the header", []byte{0x10, 0x07}}, // Track Alias, no Group ID
	}
	const timeout = 200 * time.Millisecond
	for _, c := range cases {
		forClientSessions(t, c.name, func(t *testing.T, connect fakeConnector) {
			s, fp := connect(t, &Config{DataStreamTimeout: timeout})
			str, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
			require.NoError(t, err)
			start := time.Now()
			_, err = str.Write(c.b)
			require.NoError(t, err)
			fp.expectClose(wire.DataStreamTimeout)
			expectSessionError(t, s, wire.DataStreamTimeout)
			if bubbled() {
				assert.Equal(t, timeout, time.Since(start), "closed when DataStreamTimeout passed")
			}
		})
	}
}

// TestReceiveHeaderBehindUnreadDataNotTimedOut: this end's application
// leaves a subscription's stream unread until the connection's flow-control
// window is full, and the peer's next stream, seen already, has its header
// waiting behind that data. The peer cannot send it: the session must not
// be closed with DATA_STREAM_TIMEOUT however long the application waits
// (within its ReadStallTimeout), and once the application reads again
// everything arrives. Before, the header's timer ran regardless and closed
// an honest peer's session after DataStreamTimeout.
func TestReceiveHeaderBehindUnreadDataNotTimedOut(t *testing.T) {
	const timeout = time.Second
	const window = 16 << 10
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				pc := transport.PipeConfig{WebTransport: tr.wt, StreamWindow: window, ConnectionWindow: window}
				s, fp := pipeClientSession(t, pc, &Config{DataStreamTimeout: timeout, ReadStallTimeout: time.Minute})
				sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 1)
				big := bytes.Repeat([]byte("a"), 8<<10)
				first, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
				require.NoError(t, err)
				b := subgroupBytes(t, 1, 0, big, big, big, big) // twice the connection window
				wrote := goErr(func() error {
					if _, err := first.Write(b); err != nil {
						return err
					}
					return first.Close()
				})
				synctest.Wait() // the write waits for flow control: the window is full
				select {
				case err := <-wrote:
					require.FailNow(t, "the first stream was written whole", "%v", err)
				default:
				}
				// The next stream is opened and seen, its header queued
				// behind the window.
				next, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
				require.NoError(t, err)
				_, err = next.Write(subgroupBytes(t, 1, 1, []byte("next")))
				require.NoError(t, err)
				require.NoError(t, next.Close())

				advance(4 * timeout)
				require.NoError(t, context.Cause(s.Context()), "closed while this end held the peer back")

				r, err := sub.AcceptSubgroup(fakeCtx(t))
				require.NoError(t, err)
				ids, payloads := readSubgroup(t, r)
				assert.Equal(t, []uint64{0, 1, 2, 3}, ids)
				assert.Equal(t, [][]byte{big, big, big, big}, payloads)
				require.NoError(t, recvOrFail(t, wrote))
				r, err = sub.AcceptSubgroup(fakeCtx(t))
				require.NoError(t, err)
				assert.Equal(t, uint64(1), r.Header().GroupID)
				ids, payloads = readSubgroup(t, r)
				assert.Equal(t, []uint64{0}, ids)
				assert.Equal(t, [][]byte{[]byte("next")}, payloads)
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}

// TestReceiveHeaderTimeoutWhileNothingHeld: a peer that opens a stream and
// sends no header on it, while this end holds none of its data back, is
// closed with DATA_STREAM_TIMEOUT once DataStreamTimeout passes. The
// session has a data stream besides, which holds nothing back: a Read
// waits on it ("reading"), it was read to its FIN ("finished"), or the
// application stopped it with data unread ("stopped"). Data arriving on it
// meanwhile ("data flowing") puts the close off, since the peer may send
// higher-priority data first; once it stops, the close comes a
// DataStreamTimeout later, and at most a quarter of one more.
func TestReceiveHeaderTimeoutWhileNothingHeld(t *testing.T) {
	const timeout = time.Second
	for _, tr := range pipeTransports {
		for _, mode := range []string{"reading", "finished", "stopped", "data flowing"} {
			t.Run(tr.name+"/"+mode, func(t *testing.T) {
				inBubble(t, func(t *testing.T) {
					s, fp := pipeClientSession(t, transport.PipeConfig{WebTransport: tr.wt}, &Config{DataStreamTimeout: timeout})
					sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 1)
					live, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
					require.NoError(t, err)
					enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 1, DefaultPriority: true}}
					hdr, err := enc.Header.Append(nil)
					require.NoError(t, err)
					object := func(id uint64) []byte {
						b, err := enc.AppendObject(nil, wire.SubgroupObject{ObjectID: id, PayloadLength: 1})
						require.NoError(t, err)
						return append(b, 'x')
					}
					_, err = live.Write(append(hdr, object(0)...))
					require.NoError(t, err)
					switch mode {
					case "finished":
						require.NoError(t, live.Close())
					case "stopped":
						_, err = live.Write(object(1))
						require.NoError(t, err)
					}
					r, err := sub.AcceptSubgroup(fakeCtx(t))
					require.NoError(t, err)
					read := make(chan uint64, 16)
					reading := goErr(func() error {
						for {
							o, err := r.Next()
							if err != nil {
								return err
							}
							read <- o.Location.Object
							if mode == "stopped" {
								return r.Close()
							}
						}
					})
					assert.Equal(t, uint64(0), recvOrFail(t, read))
					switch mode {
					case "finished":
						assert.ErrorIs(t, recvOrFail(t, reading), io.EOF)
					case "stopped":
						require.NoError(t, recvOrFail(t, reading))
						assert.Equal(t, uint64(wire.ResetCancelled), expectStopped(t, live))
					}

					silent, err := fp.conn.OpenUniStreamSync(fakeCtx(t))
					require.NoError(t, err)
					_, err = silent.Write([]byte{0x10}) // SUBGROUP_HEADER's type, and nothing more
					require.NoError(t, err)
					last := time.Now()
					if mode == "data flowing" {
						for id := uint64(1); id <= 6; id++ {
							advance(timeout / 2)
							_, err := live.Write(object(id))
							require.NoError(t, err)
							assert.Equal(t, id, recvOrFail(t, read))
						}
						require.NoError(t, context.Cause(s.Context()), "closed while data arrived")
						last = time.Now()
					}
					fp.expectClose(wire.DataStreamTimeout)
					expectSessionError(t, s, wire.DataStreamTimeout)
					// The timer looks every quarter of the timeout and needs
					// four looks in a row that find nothing changed: a change
					// at the instant the header's timer starts (the reader
					// taking the other stream's object) costs one more look.
					assert.GreaterOrEqual(t, time.Since(last), timeout, "closed when DataStreamTimeout passed")
					assert.LessOrEqual(t, time.Since(last), timeout+timeout/headerLooks, "closed when DataStreamTimeout passed")
					if mode == "reading" || mode == "data flowing" {
						assert.Error(t, recvOrFail(t, reading))
					}
				})
			})
		}
	}
}

// TestReceiveStalledApplicationFallsBehind: one subscription's application
// never takes its streams while the publisher writes continuously; another
// subscription on the same session reads. The stalled one must end, within
// Config.ReadStallTimeout and a few ticks, with ErrFellBehind, and its
// stopped streams must return their flow-control credit so that the other
// keeps receiving. Before, its unread streams filled the connection window
// and it never ended, while the other starved.
func TestReceiveStalledApplicationFallsBehind(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		stalledName := testTrack
		liveName := wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("audio")}
		tracks := map[string]*LocalTrack{}
		for _, n := range []wire.FullTrackName{stalledName, liveName} {
			lt, err := NewLocalTrack(n, nil)
			require.NoError(t, err)
			tracks[string(n.Name)] = lt
		}
		handler := HandlerFunc(func(r Request) {
			if sr, ok := r.(*SubscribeRequest); ok {
				if lt := tracks[string(sr.Track.Name)]; lt != nil {
					_, _ = lt.Accept(sr, AcceptOptions{})
					return
				}
			}
			DefaultHandler.ServeMOQT(r)
		})
		p := connect(t, &Config{Handler: handler}, &Config{ReadStallTimeout: 500 * time.Millisecond,
			ConnectionReceiveWindow: 1 << 20, StreamReceiveWindow: 256 << 10})
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		stalled, err := p.client.Subscribe(ctx, stalledName, wire.Params{})
		require.NoError(t, err)
		live, err := p.client.Subscribe(ctx, liveName, wire.Params{})
		require.NoError(t, err)

		// Both tracks are written continuously, paced so that an
		// ended subscription does not spin its writer.
		var wg sync.WaitGroup
		payload := make([]byte, 16<<10)
		for _, lt := range tracks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for g := uint64(0); ctx.Err() == nil; g++ {
					w := lt.OpenSubgroup(g, 0, SubgroupOptions{})
					for id := uint64(0); id < 8 && ctx.Err() == nil; id++ {
						if writeObject(w, id, nil, payload) != nil {
							break
						}
						time.Sleep(time.Millisecond)
					}
					_ = w.Close()
				}
			}()
		}
		var received, want atomic.Int64
		want.Store(math.MaxInt64)
		var reachedOnce sync.Once
		reached := make(chan struct{}) // closed once received reaches want
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, err := live.AcceptSubgroup(ctx)
				if err != nil {
					return
				}
				for {
					if _, err := r.Next(); err != nil {
						break
					}
					if _, err := r.readPayload(1 << 20); err != nil {
						break
					}
					if received.Add(1) >= want.Load() {
						reachedOnce.Do(func() { close(reached) })
					}
				}
			}
		}()
		t.Cleanup(func() {
			cancel()
			p.client.Close()
			p.server.Close()
			wg.Wait()
		})

		select {
		case <-stalled.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the stalled subscription never ended")
		}
		assert.ErrorIs(t, stalled.Err(), ErrFellBehind)
		assert.ErrorIs(t, stalled.Err(), ErrCancelled)
		_, err = stalled.AcceptSubgroup(ctx)
		assert.ErrorIs(t, err, ErrFellBehind, "its queued streams were stopped")

		want.Store(received.Load() + 100)
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
			assert.Fail(t, "the other subscription does not keep receiving")
		}
		assert.Equal(t, stateEstablished, live.current())
		assert.NoError(t, context.Cause(p.client.Context()), "the session is up")
		// What an application watching Done does: subscribe again.
		again, err := p.client.Subscribe(ctx, stalledName, wire.Params{})
		require.NoError(t, err, "control messages get through")
		require.NoError(t, again.Close())
	})
}

// TestReceiveTakenStreamStall: a stream the application took but leaves
// unread, with payload waiting, cancels the subscription once
// Config.ReadStallTimeout passes, its stream stopped with EXCESSIVE_LOAD;
// a taken stream with nothing waiting, or one the application is blocked
// reading, is left alone.
func TestReceiveTakenStreamStall(t *testing.T) {
	const stall = 200 * time.Millisecond
	t.Run("unread payload", func(t *testing.T) {
		inBubble(t, func(t *testing.T) { takenStreamUnread(t, stall) })
	})
	t.Run("idle or reading", func(t *testing.T) {
		inBubble(t, func(t *testing.T) { takenStreamIdle(t, stall) })
	})
}

// takenStreamUnread: a taken stream left unread with payload waiting
// stalls its subscription within a ReadStallTimeout and its ticks.
func takenStreamUnread(t *testing.T, stall time.Duration) {
	s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{ReadStallTimeout: stall})
	sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 2)
	str := fp.openSubgroup(2, 0, make([]byte, 1<<10))
	r, err := sub.AcceptSubgroup(fakeCtx(t))
	require.NoError(t, err)
	_, err = r.Next() // the payload is left unread
	require.NoError(t, err)
	start := time.Now()
	closedOrFail(t, sub.Done(), "the stalled subscription")
	assert.GreaterOrEqual(t, time.Since(start), stall, "not before ReadStallTimeout")
	assert.LessOrEqual(t, time.Since(start), stall+2*stallTick(stall), "within a tick or two after it")
	assert.ErrorIs(t, sub.Err(), ErrFellBehind)
	assert.Equal(t, uint64(wire.ResetExcessiveLoad), expectStopped(t, str))
}

// takenStreamIdle: taken streams with nothing waiting, or blocked in a
// read, do not stall their subscription.
func takenStreamIdle(t *testing.T, stall time.Duration) {
	s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{ReadStallTimeout: stall})
	sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 2)
	idle := fp.openSubgroup(2, 0, []byte("x"))
	r, err := sub.AcceptSubgroup(fakeCtx(t))
	require.NoError(t, err)
	_, err = r.Next()
	require.NoError(t, err)
	_, err = r.readPayload(16)
	require.NoError(t, err) // nothing more has come: idle, not behind
	reading := fp.openSubgroup(2, 1, []byte("z"))
	r2, err := sub.AcceptSubgroup(fakeCtx(t))
	require.NoError(t, err)
	ids, _, err := readAllN(r2, 1)
	require.NoError(t, err)
	require.Equal(t, []uint64{0}, ids)
	next := goErr(func() error { _, err := r2.Next(); return err }) // blocks: nothing more yet
	select {
	case <-sub.Done():
		t.Fatalf("cancelled: %v", sub.Err())
	case <-time.After(5 * stall):
	}
	assert.Equal(t, stateEstablished, sub.current())
	// The blocked reader gets what comes next.
	enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 2, GroupID: 1, DefaultPriority: true}}
	_, err = enc.AppendObject(nil, wire.SubgroupObject{ObjectID: 0, PayloadLength: 1}) // sent already
	require.NoError(t, err)
	b, err := enc.AppendObject(nil, wire.SubgroupObject{ObjectID: 1, PayloadLength: 1})
	require.NoError(t, err)
	_, err = reading.Write(append(b, 'y'))
	require.NoError(t, err)
	assert.NoError(t, recvOrFail(t, next))
	_ = idle
}

// TestReceiveIgnoresForwardState: an object that arrives while the
// subscriber holds the Forward State at 0 was sent under a state it has
// not heard of yet (a PUBLISH_STATE_NOTIFY of Forward 1 still on its way,
// §9.10), so it is the subscription's: the receive side checks the
// Location and Range filters, never Forward.
func TestReceiveIgnoresForwardState(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, _ := subscribeFakeWith(t, s, fp, wire.Params{Forward: wire.Some(false)}, 4)
		str := fp.openSubgroup(4, 7, []byte("x"), []byte("y"))
		require.NoError(t, str.Close())
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		ids, payloads := readSubgroup(t, r)
		assert.Equal(t, []uint64{0, 1}, ids)
		assert.Equal(t, [][]byte{[]byte("x"), []byte("y")}, payloads)
	})
}

// TestReceiveSerialReaderNotBehind: an application that reads one
// subgroup at a time, at pace, leaves the next stream waiting untaken for
// longer than ReadStallTimeout; that is not falling behind, since it keeps
// reading. Once it stops reading altogether, it is.
func TestReceiveSerialReaderNotBehind(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const stall = time.Second
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{ReadStallTimeout: stall})
		sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 2)
		objects := make([][]byte, 10)
		for i := range objects {
			objects[i] = []byte{byte(i)}
		}
		first := fp.openSubgroup(2, 0, objects...)
		require.NoError(t, first.Close())
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		second := fp.openSubgroup(2, 1, []byte("waits its turn"))
		// Object by object, over two and a half stall timeouts, with the
		// second stream untaken all along.
		for range objects {
			_, err := r.Next()
			require.NoError(t, err)
			_, err = r.readPayload(16)
			require.NoError(t, err)
			advance(stall / 4)
		}
		require.NoError(t, sub.Err(), "a serial reader reading at pace is not behind")
		assert.Equal(t, stateEstablished, sub.current())
		// The application stops: the waiting stream now stalls it.
		closedOrFail(t, sub.Done(), "the stalled subscription")
		assert.ErrorIs(t, sub.Err(), ErrFellBehind)
		assert.Equal(t, uint64(wire.ResetExcessiveLoad), expectStopped(t, second))
	})
}
