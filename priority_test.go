package moqt

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestPriorityTrackGroupOrder reads DEFAULT_PUBLISHER_GROUP_ORDER (§10.5).
func TestPriorityTrackGroupOrder(t *testing.T) {
	assert.Equal(t, wire.GroupOrderAscending, trackGroupOrder(nil))
	assert.Equal(t, wire.GroupOrderDescending, trackGroupOrder(wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 2}}))
	assert.Equal(t, wire.GroupOrderAscending, trackGroupOrder(wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: 1}}))
	desc := wire.KeyValue{Type: wire.PropDefaultPublisherGroupOrder, Value: uint64(wire.GroupOrderDescending)}
	assert.Equal(t, wire.GroupOrderDescending, trackGroupOrder(immutable(t, wire.KVList{desc})), "inside IMMUTABLE_PROPERTIES (§10.7)")
	assert.Equal(t, wire.GroupOrderDescending, trackGroupOrder(append(immutable(t, wire.KVList{desc}),
		wire.KeyValue{Type: wire.PropDefaultPublisherGroupOrder, Value: 1})), "the immutable value wins")
	assert.Equal(t, uint8(128), subscriberPriority(&wire.Params{}))
	assert.Equal(t, uint8(7), subscriberPriority(&wire.Params{SubscriberPriority: wire.Some[uint8](7)}))
}

// newWindowedPair is newPair with the client's receive windows fixed small,
// so the publisher must choose what to send first.
func newWindowedPair(t *testing.T, scheme string, serverCfg *Config, connWindow, streamWindow uint64) *pair {
	t.Helper()
	return newPair(t, scheme, serverCfg, &Config{ConnectionReceiveWindow: connWindow, StreamReceiveWindow: streamWindow})
}

// tracksServer serves several LocalTracks by name and hands each accepted
// subscription to the test.
func tracksServer(tracks ...*LocalTrack) (*Config, chan *ServedSubscription) {
	served := make(chan *ServedSubscription, 8)
	return &Config{Handler: HandlerFunc(func(r Request) {
		sr, ok := r.(*SubscribeRequest)
		if !ok {
			DefaultHandler.ServeMOQT(r)
			return
		}
		for _, track := range tracks {
			if sr.Track.Equal(track.Name()) {
				if ss, err := track.Accept(sr, AcceptOptions{}); err == nil {
					served <- ss
				}
				return
			}
		}
		DefaultHandler.ServeMOQT(r)
	})}, served
}

var (
	trackHigh = wire.FullTrackName{Namespace: wire.NewNamespace("live", "prio"), Name: []byte("high")}
	trackLow  = wire.FullTrackName{Namespace: wire.NewNamespace("live", "prio"), Name: []byte("low")}
)

// prioSetup is one way of having two subgroup streams, high and low, that
// §5.1.2 orders high first.
type prioSetup struct {
	name string
	// highProps and lowProps are the tracks' properties; one track only
	// when same is set, with both streams in one subscription.
	highProps, lowProps wire.KVList
	same                bool
	// highParams and lowParams are the SUBSCRIBE parameters.
	highParams, lowParams wire.Params
	// high and low are the subgroups: group, subgroup, options.
	high, low [2]uint64
	highOpts  SubgroupOptions
	lowOpts   SubgroupOptions
	// update, if set, is sent by the high subscription after the streams
	// opened and before the contended objects are written.
	update *wire.Params
}

// TestPriorityHigherFirstUnderFlowControl: with the subscriber's
// connection window far smaller than what is to be sent, the publisher
// sends the stream §5.1.2 ranks first before the other. Arrival order is
// measured as the bytes of the low stream read by the time the high
// stream's object has been read whole: without priorities they share the
// connection about equally.
func TestPriorityHigherFirstUnderFlowControl(t *testing.T) {
	setups := []prioSetup{
		{
			name:       "subscriber priority",
			highParams: wire.Params{SubscriberPriority: wire.Some[uint8](10)},
			lowParams:  wire.Params{SubscriberPriority: wire.Some[uint8](200)},
		},
		{
			name:      "publisher priority",
			highProps: wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 1}},
			lowProps:  wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 250}},
		},
		{
			name:       "subscriber priority before publisher priority",
			highParams: wire.Params{SubscriberPriority: wire.Some[uint8](10)},
			lowParams:  wire.Params{SubscriberPriority: wire.Some[uint8](20)},
			highOpts:   SubgroupOptions{Priority: wire.Some[uint8](250)},
			lowOpts:    SubgroupOptions{Priority: wire.Some[uint8](0)},
		},
		{
			name:       "subscriber priority changed by REQUEST_UPDATE",
			highParams: wire.Params{SubscriberPriority: wire.Some[uint8](200)},
			lowParams:  wire.Params{SubscriberPriority: wire.Some[uint8](100)},
			update:     &wire.Params{SubscriberPriority: wire.Some[uint8](10)},
		},
		{
			name: "ascending group order",
			same: true,
			high: [2]uint64{1, 0},
			low:  [2]uint64{2, 0},
		},
		{
			name:       "descending group order",
			same:       true,
			highParams: wire.Params{GroupOrder: wire.Some(wire.GroupOrderDescending)},
			high:       [2]uint64{2, 0},
			low:        [2]uint64{1, 0},
		},
		{
			name:      "descending track default group order",
			same:      true,
			highProps: wire.KVList{{Type: wire.PropDefaultPublisherGroupOrder, Value: uint64(wire.GroupOrderDescending)}},
			high:      [2]uint64{2, 0},
			low:       [2]uint64{1, 0},
		},
		{
			name: "lowest subgroup first",
			same: true,
			high: [2]uint64{1, 0},
			low:  [2]uint64{1, 1},
		},
	}
	for _, st := range setups {
		t.Run(st.name, func(t *testing.T) { runPriorityCase(t, st) })
	}
}

func runPriorityCase(t *testing.T, st prioSetup) {
	const (
		connWindow   = 64 << 10
		streamWindow = 256 << 10
		size         = 1 << 20
		bound        = size / 4 // without priorities, about size - connWindow
	)
	hTrack, err := NewLocalTrack(trackHigh, st.highProps)
	require.NoError(t, err)
	lTrack := hTrack
	if !st.same {
		lTrack, err = NewLocalTrack(trackLow, st.lowProps)
		require.NoError(t, err)
	}
	cfg, served := tracksServer(hTrack, lTrack)
	p := newWindowedPair(t, "moqt", cfg, connWindow, streamWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	hSub, err := p.client.Subscribe(ctx, trackHigh, st.highParams)
	require.NoError(t, err)
	<-served
	lSub := hSub
	if !st.same {
		lSub, err = p.client.Subscribe(ctx, trackLow, st.lowParams)
		require.NoError(t, err)
		<-served
	}

	// Each stream opens with a small object, read at once, so the test
	// holds both readers before the contention starts.
	hw := hTrack.OpenSubgroup(st.high[0], st.high[1], st.highOpts)
	lw := lTrack.OpenSubgroup(st.low[0], st.low[1], st.lowOpts)
	require.NoError(t, writeObject(hw, 0, nil, []byte("h")))
	require.NoError(t, writeObject(lw, 0, nil, []byte("l")))
	var hr, lr *SubgroupReader
	if st.same {
		for range 2 {
			r, err := hSub.AcceptSubgroup(ctx)
			require.NoError(t, err)
			if h := r.Header(); h.GroupID == st.high[0] && h.SubgroupID == st.high[1] {
				hr = r
			} else {
				lr = r
			}
		}
	} else {
		hr, err = hSub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		lr, err = lSub.AcceptSubgroup(ctx)
		require.NoError(t, err)
	}
	require.NotNil(t, hr)
	require.NotNil(t, lr)
	for _, r := range []*SubgroupReader{hr, lr} {
		_, payloads := readObjects(t, r, 1)
		require.Len(t, payloads, 1)
	}
	if st.update != nil {
		require.NoError(t, hSub.Update(ctx, *st.update))
	}

	// The high object is written first and is seen arriving, so its
	// stream has data waiting at the publisher before the low object is
	// written: from then on the publisher has both to choose from.
	payload := make([]byte, size)
	writes := make(chan error, 2)
	go func() { writes <- writeObject(hw, 1, nil, payload) }()
	hh, err := hr.Next()
	require.NoError(t, err)
	require.Equal(t, uint64(1), hh.Location.Object)
	first := make([]byte, 1)
	_, err = io.ReadFull(hr, first)
	require.NoError(t, err)
	go func() { writes <- writeObject(lw, 1, nil, payload) }()

	var lowRead atomic.Int64
	var lowAtHighEnd int64
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		n, err := io.Copy(io.Discard, hr)
		assert.NoError(t, err)
		assert.Equal(t, int64(size-1), n)
		lowAtHighEnd = lowRead.Load()
	}()
	go func() {
		defer wg.Done()
		lh, err := lr.Next()
		if !assert.NoError(t, err) {
			return
		}
		assert.Equal(t, uint64(1), lh.Location.Object)
		buf := make([]byte, 16<<10)
		for {
			n, err := lr.Read(buf)
			lowRead.Add(int64(n))
			if err == io.EOF {
				return
			}
			if !assert.NoError(t, err) {
				return
			}
		}
	}()
	wg.Wait()
	require.NoError(t, <-writes)
	require.NoError(t, <-writes)
	assert.Equal(t, int64(size), lowRead.Load(), "the low stream is delivered whole too")
	assert.LessOrEqual(t, lowAtHighEnd, int64(bound),
		"low-priority bytes read before the high-priority object was complete")
	t.Logf("low bytes read when high completed: %d of %d", lowAtHighEnd, size)
	require.NoError(t, hw.Close())
	require.NoError(t, lw.Close())
}

// readObjects reads n objects of a subgroup stream.
func readObjects(t *testing.T, r *SubgroupReader, n int) (ids []uint64, payloads [][]byte) {
	t.Helper()
	for range n {
		h, err := r.Next()
		require.NoError(t, err)
		p, err := r.readPayload(1 << 20)
		require.NoError(t, err)
		ids = append(ids, h.Location.Object)
		payloads = append(payloads, p)
	}
	return ids, payloads
}

// TestPriorityControlBeforeData: on raw QUIC the control stream and the
// request streams rank above every data stream (§5.1.2).
func TestPriorityControlBeforeData(t *testing.T) {
	assert.Less(t, transport.UrgencyControl, transport.UrgencyRequest)
	assert.Less(t, transport.UrgencyRequest, transport.UrgencyDataMin)
	assert.Equal(t, int8(7), transport.UrgencyDataMax, "quic-go's least urgent level")
}

// TestPriorityWebTransportHasNoTable: webtransport-go has no stream
// priorities, so data streams are not ranked there.
func TestPriorityWebTransportHasNoTable(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				p := newPipePair(t, transport.PipeConfig{WebTransport: tr.wt}, nil, nil)
				assert.Equal(t, tr.wt, p.server.priorities() == nil)
			})
		})
	}
}
