package moqt

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Objects end to end between two library sessions, over both Pipes in
// synctest bubbles, and the helpers the data tests share.

// trackServer serves one LocalTrack and hands each accepted subscription
// to the test.
func trackServer(t *testing.T, track *LocalTrack) (*Config, chan *ServedSubscription) {
	t.Helper()
	served := make(chan *ServedSubscription, 4)
	return &Config{Handler: HandlerFunc(func(r Request) {
		sr, ok := r.(*SubscribeRequest)
		if !ok || !sr.Track.Equal(track.Name()) {
			DefaultHandler.ServeMOQT(r)
			return
		}
		if ss, err := track.Accept(sr, AcceptOptions{}); err == nil {
			served <- ss
		}
	})}, served
}

// liveTrack is a LocalTrack on a server session and one Established
// subscription to it from the client: the setup most data tests share.
type liveTrack struct {
	track *LocalTrack
	p     *pair
	sub   *Subscription
	ss    *ServedSubscription
	ctx   context.Context
}

// subscribeTrack serves testTrack over scheme and subscribes to it with
// params. serverCfg and clientCfg may be nil.
func subscribeTrack(t *testing.T, scheme string, params wire.Params, serverCfg, clientCfg *Config) *liveTrack {
	t.Helper()
	return subscribeTrackOver(t, overWire(scheme), params, serverCfg, clientCfg)
}

// subscribeTrackOver is subscribeTrack over connect's transport.
func subscribeTrackOver(t *testing.T, connect connector, params wire.Params, serverCfg, clientCfg *Config) *liveTrack {
	t.Helper()
	track, handler, served := newServedTrack(t, testTrack, nil)
	if serverCfg == nil {
		serverCfg = &Config{}
	}
	serverCfg.Handler = handler.Handler
	p := connect(t, serverCfg, clientCfg)
	ctx := testCtx(t, 30*time.Second)
	sub, err := p.client.Subscribe(ctx, testTrack, params)
	require.NoError(t, err)
	return &liveTrack{track: track, p: p, sub: sub, ss: <-served, ctx: ctx}
}

// readSubgroup reads every object of one subgroup stream.
func readSubgroup(t *testing.T, r *SubgroupReader) (ids []uint64, payloads [][]byte) {
	t.Helper()
	ids, payloads, err := readAll(r)
	require.NoError(t, err)
	return ids, payloads
}

// readAll reads every object of one subgroup stream, up to its FIN.
func readAll(r *SubgroupReader) (ids []uint64, payloads [][]byte, err error) { return readAllN(r, -1) }

// readAllN reads n objects of r, or all of them up to its FIN if n < 0.
func readAllN(r *SubgroupReader, n int) (ids []uint64, payloads [][]byte, err error) {
	for ; n != 0; n-- {
		h, err := r.Next()
		if err == io.EOF && n < 0 {
			return ids, payloads, nil
		}
		if err != nil {
			return ids, payloads, err
		}
		p, err := r.readPayload(1 << 20)
		if err != nil {
			return ids, payloads, err
		}
		ids = append(ids, h.Location.Object)
		payloads = append(payloads, p)
	}
	return ids, payloads, nil
}

// TestDataSubgroupEndToEnd publishes a subgroup through a LocalTrack and
// reads it back; PUBLISH_DONE then counts the one stream (§9.9).
func TestDataSubgroupEndToEnd(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, cfg, served := newServedTrack(t, testTrack, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 9}})
		p := connect(t, cfg, nil)
		ctx := testCtx(t, 10*time.Second)
		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		ss := <-served

		w := track.OpenSubgroup(5, 0, SubgroupOptions{EndOfGroup: true, Properties: true})
		props, err := wire.KVList{{Type: 0x10, Value: 1}}.Append(nil)
		require.NoError(t, err)
		require.NoError(t, writeObject(w, 0, nil, []byte("zero")))
		require.NoError(t, writeObject(w, 2, props, []byte("two")))
		require.NoError(t, writeStatus(w, 3, wire.ObjectEndOfGroup))
		require.NoError(t, w.Close())
		largest, ok := track.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 5, Object: 3}, largest)

		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(5), r.Header().GroupID)
		assert.True(t, r.Header().EndOfGroup)
		assert.True(t, r.Header().FirstObject)
		h, err := r.Next()
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 5, Object: 0}, h.Location)
		assert.Equal(t, wire.Some[uint8](9), h.Priority, "inherits DEFAULT_PUBLISHER_PRIORITY")
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		assert.Equal(t, "zero", string(b))
		h, err = r.Next()
		require.NoError(t, err)
		assert.Equal(t, uint64(2), h.Location.Object)
		assert.Equal(t, props, h.Properties)
		b, err = r.readPayload(100)
		require.NoError(t, err)
		assert.Equal(t, "two", string(b))
		h, err = r.Next()
		require.NoError(t, err)
		assert.Equal(t, wire.ObjectEndOfGroup, h.Status)
		_, err = r.Next()
		assert.Equal(t, io.EOF, err)

		require.NoError(t, ss.End(wire.DoneTrackEnded, ""))
		waitDone(t, ctx, sub.Done(), "subscription")
		var de *DoneError
		require.ErrorAs(t, sub.Err(), &de)
		assert.Equal(t, uint64(1), de.StreamCount)
	})
}

// TestC033_SharedAliasEachSubscriptionGetsItsCopy: two subscriptions to one
// track share its alias (Config.SharedTrackAliases); an object passing both
// filters is sent once per subscription, and each copy reaches the
// subscription whose filter it passes.
func TestC033_SharedAliasEachSubscriptionGetsItsCopy(t *testing.T) {
	eachDraft(t, newerDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			track, cfg, served := newServedTrack(t, testTrack, nil)
			cfg.SharedTrackAliases = true
			p := connect(t, cfg, nil)
			ctx := testCtx(t, 10*time.Second)
			early, err := p.client.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(
				wire.RangeFilterTo(wire.Location{Group: 1, Object: 0}, 2))})
			require.NoError(t, err)
			<-served
			late, err := p.client.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(
				wire.StartFilter(wire.Location{Group: 2, Object: 0}))})
			require.NoError(t, err)
			<-served
			assert.Equal(t, early.TrackAlias(), late.TrackAlias())

			for g := uint64(1); g <= 2; g++ {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, []byte{byte(g)}))
				require.NoError(t, w.Close())
			}
			// Group 2 passes both filters: each subscription gets its
			// own copy of it; group 1 only early's.
			for _, c := range []struct {
				sub    *Subscription
				groups []uint64
			}{{early, []uint64{1, 2}}, {late, []uint64{2}}} {
				var got []uint64
				for range c.groups {
					r, err := c.sub.AcceptSubgroup(ctx)
					require.NoError(t, err)
					g := r.Header().GroupID
					got = append(got, g)
					_, payloads := readSubgroup(t, r)
					assert.Equal(t, [][]byte{{byte(g)}}, payloads)
				}
				assert.ElementsMatch(t, c.groups, got)
			}
		})
	})
}

// TestC033_OverlappingFiltersEachGetACopy: two subscriptions with the same
// filter share an alias (Config.SharedTrackAliases); every object is sent
// to each, and the look-alike streams and datagrams are routed one to each
// subscription, never both to one.
func TestC033_OverlappingFiltersEachGetACopy(t *testing.T) {
	eachDraft(t, newerDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			track, cfg, served := newServedTrack(t, testTrack, nil)
			cfg.SharedTrackAliases = true
			p := connect(t, cfg, nil)
			ctx := testCtx(t, 10*time.Second)
			from := wire.Some(wire.StartFilter(wire.Location{Group: 1, Object: 0}))
			var subs []*Subscription
			for range 2 {
				sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{LocationFilter: from})
				require.NoError(t, err)
				<-served
				subs = append(subs, sub)
			}
			require.Equal(t, subs[0].TrackAlias(), subs[1].TrackAlias())

			for g := uint64(1); g <= 2; g++ {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				require.NoError(t, writeObject(w, 0, nil, []byte{byte(g)}))
				require.NoError(t, w.Close())
			}
			require.NoError(t, track.WriteDatagram(Object{Location: wire.Location{Group: 3, Object: 0}, Payload: []byte("d")}))
			for i, sub := range subs {
				// Streams may arrive in any order; had both group-1 copies
				// gone to one subscription, it would see group 1 twice and
				// the other would wait in vain.
				var groups []uint64
				for range 2 {
					r, err := sub.AcceptSubgroup(ctx)
					require.NoError(t, err, "subscription %d", i)
					g := r.Header().GroupID
					groups = append(groups, g)
					_, payloads := readSubgroup(t, r)
					assert.Equal(t, [][]byte{{byte(g)}}, payloads)
				}
				assert.ElementsMatch(t, []uint64{1, 2}, groups, "subscription %d", i)
				d, err := sub.ReadDatagram(ctx)
				require.NoError(t, err, "subscription %d", i)
				assert.Equal(t, wire.Location{Group: 3, Object: 0}, d.Location)
				assert.Equal(t, []byte("d"), d.Payload)
			}
		})
	})
}

// TestDataForwardZeroSendsNothing: with Forward=0 no stream opens; after
// REQUEST_UPDATE Forward=1 objects flow.
func TestDataForwardZeroSendsNothing(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{Forward: wire.Some(false)}, nil, nil)
		track, sub, ctx := lt.track, lt.sub, lt.ctx
		ss := lt.ss
		w := track.OpenSubgroup(1, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("hidden")))
		require.NoError(t, w.Close())
		ss.mu.Lock()
		assert.Zero(t, ss.streams, "no stream opens while Forward is 0")
		ss.mu.Unlock()

		require.NoError(t, sub.Update(ctx, wire.Params{Forward: wire.Some(true)}))
		w = track.OpenSubgroup(2, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("shown")))
		require.NoError(t, w.Close())
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(2), r.Header().GroupID)
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("shown")}, payloads)
	})
}

// TestDataShortObjectResets: an object closed before its declared length
// resets its streams rather than ending them inside the object.
func TestDataShortObjectResets(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		track, p, sub, ctx := lt.track, lt.p, lt.sub, lt.ctx
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		ow, err := w.BeginObject(0, 10, nil)
		require.NoError(t, err)
		_, err = ow.Write([]byte("abc"))
		require.NoError(t, err)
		_, err = ow.Write(make([]byte, 8))
		assert.Error(t, err, "past the declared length")

		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		_, err = r.Next()
		require.NoError(t, err)
		head := make([]byte, 3)
		_, err = io.ReadFull(r, head)
		require.NoError(t, err)
		assert.Equal(t, "abc", string(head))

		assert.Error(t, ow.Close(), "3 of 10 bytes")
		_, err = io.ReadAll(r)
		var se *transport.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, uint64(wire.ResetCancelled), se.Code)
		assert.NoError(t, p.client.Context().Err(), "a reset is not a protocol violation")
	})
}

// TestStreamErrorTyped: a reset data stream reaches the subscriber's reads
// as a *StreamError with the publisher's code.
func TestStreamErrorTyped(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("abc")))
		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)
		_, err = r.Next()
		require.NoError(t, err)
		w.Reset(wire.ResetExcessiveLoad)
		_, err = io.ReadAll(r)
		if err == nil {
			_, err = r.Next()
		}
		var se *StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, wire.ResetExcessiveLoad, se.Code)
		assert.True(t, se.Remote)
		assert.Contains(t, se.Error(), "EXCESSIVE_LOAD")
	})
}
