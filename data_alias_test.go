package moqt

import (
	"context"
	"io"
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

// These tests put the library on the subscriber side and a fake publisher
// that controls exactly when data streams and control messages go out.

// openSubgroup opens a data stream from the fake with a SUBGROUP_HEADER for
// alias and the given objects (payloads of objects 0, 1, …).
func (fp *fakePeer) openSubgroup(alias, group uint64, payloads ...[]byte) transport.SendStream {
	fp.t.Helper()
	str, err := fp.conn.OpenUniStreamSync(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	_, err = str.Write(subgroupBytes(fp.t, alias, group, payloads...))
	require.NoError(fp.t, err)
	return str
}

// subgroupBytes encodes a SUBGROUP_HEADER for alias and group and the
// objects 0, 1, … with the given payloads.
func subgroupBytes(t *testing.T, alias, group uint64, payloads ...[]byte) []byte {
	t.Helper()
	enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: alias, GroupID: group, DefaultPriority: true}}
	b, err := enc.Header.Append(nil)
	require.NoError(t, err)
	for i, p := range payloads {
		b, err = enc.AppendObject(b, wire.SubgroupObject{ObjectID: uint64(i), PayloadLength: uint64(len(p))})
		require.NoError(t, err)
		b = append(b, p...)
	}
	return b
}

// subscribeAgainstFake starts a library Subscribe and returns the fake's end
// of the request stream, before any answer.
func subscribeAgainstFake(t *testing.T, s *Session, fp *fakePeer) (<-chan *Subscription, *fakeStream) {
	t.Helper()
	got := make(chan *Subscription, 1)
	go func() {
		sub, err := s.Subscribe(fakeCtx(t), testTrack, wire.Params{})
		if err == nil {
			got <- sub
		}
		close(got)
	}()
	req := fp.accept()
	expect[*wire.Subscribe](req)
	return got, req
}

// TestAliasStreamBeforeSubscribeOK: a stream whose alias arrives before the
// SUBSCRIBE_OK naming it is held and then delivered (§3.1.2).
func TestAliasStreamBeforeSubscribeOK(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: 5 * time.Second})
		got, req := subscribeAgainstFake(t, s, fp)
		data := fp.openSubgroup(7, 3, []byte("early"))
		require.NoError(t, data.Close())
		// Let the library see the stream before the answer.
		synctest.Wait()
		n, _ := pendingStreams(s) // not under the lock: a failed require would keep it
		require.Equal(t, 1, n, "the stream waits for its alias")
		req.send(&wire.SubscribeOK{TrackAlias: 7})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		assert.Equal(t, uint64(3), r.Header().GroupID)
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("early")}, payloads)
	})
}

// TestAliasStreamWaitsForOutstandingSubscribe: a stream that overtakes its
// SUBSCRIBE_OK by more than Config.AliasWait, as on a lossy path where the
// control message is retransmitted, still reaches its subscription: it
// waits for as long as a SUBSCRIBE is unanswered. Once none is, a stream
// whose alias nobody named is refused within AliasWait.
func TestAliasStreamWaitsForOutstandingSubscribe(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const wait = 2 * time.Second
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: wait})
		got, req := subscribeAgainstFake(t, s, fp)
		data := fp.openSubgroup(7, 3, []byte("early"))
		require.NoError(t, data.Close())
		stray := fp.openSubgroup(8, 0, []byte("nobody's"))
		time.Sleep(3 * wait) // the SUBSCRIBE_OK is late
		synctest.Wait()
		require.NoError(t, stray.Context().Err(), "no STOP_SENDING while a SUBSCRIBE is unanswered")
		req.send(&wire.SubscribeOK{TrackAlias: 7})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("early")}, payloads)

		answered := time.Now()
		select {
		case <-stray.Context().Done():
		case <-time.After(fakeGuard):
			t.Fatal("no STOP_SENDING for an alias nobody named")
		}
		assert.LessOrEqual(t, time.Since(answered), wait, "refused within AliasWait of the answer")
	})
}

// sendDatagram sends an OBJECT_DATAGRAM from the fake.
func (fp *fakePeer) sendDatagram(alias, group, object uint64, payload string) {
	fp.t.Helper()
	b, err := wire.ObjectDatagram{TrackAlias: alias, GroupID: group, ObjectID: object, DefaultPriority: true,
		Payload: []byte(payload)}.Append(nil)
	require.NoError(fp.t, err)
	require.NoError(fp.t, fp.conn.SendDatagram(b))
}

// TestAliasDatagramBeforeSubscribeOK: a datagram whose alias arrives before
// the SUBSCRIBE_OK naming it is held and then delivered (§3.1.2).
func TestAliasDatagramBeforeSubscribeOK(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: 5 * time.Second})
		got, req := subscribeAgainstFake(t, s, fp)
		fp.sendDatagram(7, 3, 1, "early")
		synctest.Wait()
		req.send(&wire.SubscribeOK{TrackAlias: 7})
		sub := recvOrFail(t, got)
		require.NotNil(t, sub)
		o, err := sub.ReadDatagram(fakeCtx(t))
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 3, Object: 1}, o.Location)
		assert.Equal(t, []byte("early"), o.Payload)
	})
}

// TestC090_RefusedTrackDatagramsDropped: the datagrams held for the alias
// of a track refused for a Mandatory Track Property (§3.6), in PUBLISH or
// SUBSCRIBE_OK, are dropped with it, as are those that follow: none reaches
// the next subscription the publisher gives the alias, to another track.
func TestC090_RefusedTrackDatagramsDropped(t *testing.T) {
	for _, by := range []string{"PUBLISH", "SUBSCRIBE_OK"} {
		t.Run(by, func(t *testing.T) {
			forDrafts(t, sharedDrafts, func(t *testing.T) {
				s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: time.Minute})
				fp.sendDatagram(7, 0, 0, "before the refusal")
				synctest.Wait()
				switch by {
				case "PUBLISH":
					fs := fp.open(publishMsg(1, trackA, 7, wire.Params{}, mandatoryProp))
					assert.Equal(t, wire.ReqUnsupportedExtension, expect[*wire.RequestError](fs).ErrorCode)
				case "SUBSCRIBE_OK":
					res := startSubscribe(fakeCtx(t), s, trackA, wire.Params{})
					fs, _ := fp.acceptSubscribe()
					fs.send(&wire.SubscribeOK{TrackAlias: 7, TrackProperties: mandatoryProp})
					require.Error(t, recvOrFail(t, res).err)
				}
				fp.sendDatagram(7, 0, 1, "after the refusal")
				synctest.Wait()
				sub, _, _ := establish(t, s, fp, trackB, wire.Params{}, &wire.SubscribeOK{TrackAlias: 7})
				fp.sendDatagram(7, 5, 0, "trackB's")
				o, err := sub.ReadDatagram(fakeCtx(t))
				require.NoError(t, err)
				assert.Equal(t, "trackB's", string(o.Payload), "the first datagram trackB's subscription reads")
			})
		})
	}
}

// TestAliasUnknownTimesOut: a stream whose alias never arrives is dropped
// with STOP_SENDING once Config.AliasWait passes.
func TestAliasUnknownTimesOut(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const wait = 5 * time.Second
		_, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: wait})
		start := time.Now()
		data := fp.openSubgroup(9, 0, []byte("lost"))
		select {
		case <-data.Context().Done():
		case <-time.After(fakeGuard):
			t.Fatal("no STOP_SENDING")
		}
		assert.Equal(t, wait, time.Since(start), "stopped when AliasWait passed")
		_, err := data.Write([]byte{0})
		var se *transport.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, uint64(wire.ResetCancelled), se.Code)
	})
}

// TestAliasPendingStreamLimit: beyond Config.MaxPendingStreams, waiting
// streams are refused with EXCESSIVE_LOAD.
func TestAliasPendingStreamLimit(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		_, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: 5 * time.Second, MaxPendingStreams: 2})
		var streams []transport.SendStream
		for range 3 {
			streams = append(streams, fp.openSubgroup(9, 0, []byte("x")))
		}
		synctest.Wait()
		stopped := 0
		for _, str := range streams {
			if str.Context().Err() != nil {
				_, err := str.Write([]byte{0})
				var se *transport.StreamError
				if assert.ErrorAs(t, err, &se) {
					assert.Equal(t, uint64(wire.ResetExcessiveLoad), se.Code)
				}
				stopped++
			}
		}
		assert.Equal(t, 1, stopped, "exactly the stream beyond the limit is refused")
	})
}

// TestAliasEndedDiscardsAtOnce: streams for the alias of a subscription
// that just ended are stopped at once, not held as unknown (§3.1.2).
func TestAliasEndedDiscardsAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{AliasWait: time.Minute})
		got, req := subscribeAgainstFake(t, s, fp)
		req.send(&wire.SubscribeOK{TrackAlias: 4})
		sub := recvOrFail(t, got)
		require.NoError(t, sub.Close())
		start := time.Now()
		data := fp.openSubgroup(4, 0, []byte("late"))
		select {
		case <-data.Context().Done():
		case <-time.After(fakeGuard):
			t.Fatal("late stream was held instead of discarded")
		}
		assert.Zero(t, time.Since(start), "stopped at once, not after AliasWait")
	})
}

// TestAliasRejectedPublishDiscardsAtOnce: a PUBLISH the application
// rejects cancels the subscription it offered, so the objects its publisher
// sent before the answer, and those in flight after it, are discarded at
// once, not held as an unknown alias until AliasWait (§3.1.2).
func TestAliasRejectedPublishDiscardsAtOnce(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := HandlerFunc(func(r Request) { _ = r.Reject(wire.ReqUninterested, "") })
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{Handler: h, AliasWait: time.Minute})
		early := fp.openSubgroup(5, 0, []byte("early"))
		synctest.Wait()
		n, _ := pendingStreams(s)
		require.Equal(t, 1, n, "the early stream waits for its alias")
		fs := fp.open(publishMsg(1, trackA, 5, wire.Params{}, nil))
		assert.Equal(t, wire.ReqUninterested, expect[*wire.RequestError](fs).ErrorCode)
		expectDiscarded(t, early, "the early stream")
		expectDiscarded(t, fp.openSubgroup(5, 1, []byte("late")), "a later stream")
		synctest.Wait() // the stops have run to their end
		n, b := pendingStreams(s)
		assert.Zero(t, n, "streams held")
		assert.Zero(t, b, "bytes held")
	})
}

// TestC036_DataFloodCannotStarveControl: a flood of data streams for an
// alias nobody has named, written until they stall on flow control, must
// not keep the SUBSCRIBE_OK on the request stream from arriving. Waiting
// streams are read into a bounded buffer, so they keep consuming
// connection credit, and those beyond the bound are stopped. (Left unread,
// they would hold the connection window until AliasWait passed.)
func TestC036_DataFloodCannotStarveControl(t *testing.T) {
	cfg := func() *Config { return &Config{AliasWait: time.Minute, MaxPendingBytes: 256 << 10} }
	forDrafts(t, sharedDrafts, func(t *testing.T) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, cfg())
		dataFlood(t, s, fp, func(*atomic.Int64) { synctest.Wait() })
	})
}

// dataFlood floods s with streams for an unknown alias until settled
// says they make no more progress, then answers the SUBSCRIBE.
func dataFlood(t *testing.T, s *Session, fp *fakePeer, settled func(written *atomic.Int64)) {
	got, req := subscribeAgainstFake(t, s, fp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	chunk := make([]byte, 16<<10)
	var wg sync.WaitGroup
	var written atomic.Int64
	flood := make([]transport.SendStream, 40)
	for i := range flood {
		flood[i] = fp.openSubgroup(99, uint64(i))
		wg.Add(1)
		go func(str transport.SendStream) {
			defer wg.Done()
			for ctx.Err() == nil {
				n, err := str.Write(chunk)
				written.Add(int64(n))
				if err != nil {
					return
				}
			}
		}(flood[i])
	}
	// Wait until the flood makes no more progress: its streams are either
	// blocked on flow control or stopped. Only then does the answer go out.
	settled(&written)
	require.Positive(t, written.Load())
	req.send(&wire.SubscribeOK{TrackAlias: 5})
	select {
	case sub := <-got:
		require.NotNil(t, sub)
		assert.Equal(t, stateEstablished, sub.current())
	case <-time.After(5 * time.Second):
		t.Fatal("SUBSCRIBE_OK starved by data streams")
	}
	cancel()
	for _, str := range flood {
		str.CancelWrite(uint64(wire.ResetCancelled))
	}
	wg.Wait()
	s.routes.mu.Lock()
	assert.LessOrEqual(t, s.routes.pendingBytes, 256<<10, "read-ahead stays within MaxPendingBytes")
	s.routes.mu.Unlock()
}

// TestDataLingerExpiryStopsStreams: PUBLISH_DONE counts three streams but
// only one arrives; when the linger ends the subscription drops its state
// and stops the stream nobody took (STOP_SENDING, §9.9).
func TestDataLingerExpiryStopsStreams(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const linger = 3 * time.Second
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{DoneLinger: linger})
		got, req := subscribeAgainstFake(t, s, fp)
		req.send(&wire.SubscribeOK{TrackAlias: 2})
		sub := recvOrFail(t, got)
		data := fp.openSubgroup(2, 0, []byte("only"))
		synctest.Wait()
		sub.mu.Lock()
		require.Equal(t, uint64(1), sub.streamsSeen, "the stream arrived before PUBLISH_DONE")
		sub.mu.Unlock()
		req.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: 3})
		req.fin()
		start := time.Now()
		closedOrFail(t, sub.dataDone, "data plane after the linger")
		assert.Equal(t, linger, time.Since(start), "the data plane ends when the linger does")
		select {
		case <-data.Context().Done():
		case <-time.After(fakeGuard):
			t.Fatal("the untaken stream was not stopped")
		}
		_, err := data.Write([]byte{0})
		var se *transport.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, uint64(wire.ResetCancelled), se.Code)
		_, err = sub.AcceptSubgroup(fakeCtx(t))
		var de *DoneError
		require.ErrorAs(t, err, &de, "after the linger only the subscription's end remains")
		assert.Equal(t, uint64(3), de.StreamCount)
	})
}

// TestPeerStreamsBoundedUntilRead: a subgroup stream that quic-go has
// whole, FIN included, once its header is read is still the application's
// to read: it holds a goroutine, a read buffer and, on a relay, a
// forwarder. The peer's credit came back as soon as this end had read its
// bytes, so a publisher of tiny streams could make a session hold any
// number of them (a relay held 11,000 forwarders and 380 MB). Now a stream
// counts against MaxIncomingUniStreams until it is read to its end or
// stopped: past that the peer's streams wait in the transport, unread,
// holding its credit, and reading makes room.
func TestPeerStreamsBoundedUntilRead(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const limit = 8
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{MaxIncomingUniStreams: limit})
		sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 1)
		const streams = 8 * limit
		opened := 0
		for g := uint64(0); g < streams; g++ {
			str, err := fp.conn.OpenUniStream()
			if err != nil {
				break // no credit
			}
			_, err = str.Write(subgroupBytes(t, 1, g, []byte{byte(g)}))
			require.NoError(t, err)
			require.NoError(t, str.Close())
			opened++
			synctest.Wait()
		}
		// The fake's control stream holds a slot and credit; the session
		// holds limit-1 streams, and as many wait in the transport.
		assert.Equal(t, 2*(limit-1), opened)

		// Reading the streams to their ends gives the credit back.
		ctx := fakeCtx(t)
		got := map[byte]bool{}
		for g := range streams {
			if g >= opened {
				str, err := fp.conn.OpenUniStreamSync(ctx)
				require.NoError(t, err)
				_, err = str.Write(subgroupBytes(t, 1, uint64(g), []byte{byte(g)}))
				require.NoError(t, err)
				require.NoError(t, str.Close())
			}
			r, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err)
			obj, err := r.ReadObject(nil)
			require.NoError(t, err)
			got[obj.Payload[0]] = true
			_, err = r.ReadObject(nil)
			require.ErrorIs(t, err, io.EOF)
		}
		assert.Len(t, got, streams)
	})
}
