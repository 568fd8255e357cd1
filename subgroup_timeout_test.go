package moqt

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestDeliveryTimeoutEffective: the smaller of the publisher's and the
// subscriber's values applies when both are non-zero; 0 is none (§5.2).
func TestDeliveryTimeoutEffective(t *testing.T) {
	cases := []struct {
		publisher, subscriber, want uint64
	}{
		{0, 0, 0},
		{0, 500, 500},
		{500, 0, 500},
		{200, 500, 200},
		{500, 200, 200},
		{300, 300, 300},
		{1, ^uint64(0), 1},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, effectiveTimeout(c.publisher, c.subscriber), "publisher %d, subscriber %d", c.publisher, c.subscriber)
	}
}

// TestDeliveryTimeoutPublisherValue: the publisher's value of each timeout
// is the Object Property on the subgroup's first object when present, the
// Track Property otherwise (§5.2, §10.1, §10.2).
func TestDeliveryTimeoutPublisherValue(t *testing.T) {
	track := trackTimeouts(wire.KVList{
		{Type: wire.PropObjectDeliveryTimeout, Value: 100},
		{Type: wire.PropSubgroupDeliveryTimeout, Value: 900},
	})
	require.Equal(t, deliveryTimeouts{object: 100, subgroup: 900}, track)
	assert.Equal(t, deliveryTimeouts{}, trackTimeouts(nil))
	assert.Equal(t, deliveryTimeouts{object: 100, subgroup: 900}, trackTimeouts(append(immutable(t, wire.KVList{
		{Type: wire.PropObjectDeliveryTimeout, Value: 100},
	}), wire.KeyValue{Type: wire.PropSubgroupDeliveryTimeout, Value: 900})), "inside IMMUTABLE_PROPERTIES too (§10.7)")

	objOnly, err := wire.KVList{{Type: wire.PropObjectDeliveryTimeout, Value: 40}}.Append(nil)
	require.NoError(t, err)
	both, err := wire.KVList{
		{Type: wire.PropObjectDeliveryTimeout, Value: 40},
		{Type: wire.PropSubgroupDeliveryTimeout, Value: 5000},
		{Type: wire.PropPriorObjectIDGap, Value: 3},
	}.Append(nil)
	require.NoError(t, err)
	inside, err := append(wire.KVList{{Type: wire.PropObjectDeliveryTimeout, Value: 40}}, immutable(t, wire.KVList{
		{Type: wire.PropObjectDeliveryTimeout, Value: 30},
		{Type: wire.PropSubgroupDeliveryTimeout, Value: 5000},
	})...).Append(nil)
	require.NoError(t, err)
	cases := []struct {
		name  string
		props []byte
		want  deliveryTimeouts
	}{
		{"no properties", nil, track},
		{"object timeout only", objOnly, deliveryTimeouts{object: 40, subgroup: 900}},
		{"both, among others", both, deliveryTimeouts{object: 40, subgroup: 5000}},
		{"inside IMMUTABLE_PROPERTIES, which wins", inside, deliveryTimeouts{object: 30, subgroup: 5000}},
		{"malformed block overrides nothing", []byte{0x02}, track},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, track.withObjectProperties(c.props))
		})
	}
	assert.Equal(t, time.Duration(1<<63-1)/time.Millisecond*time.Millisecond, millis(^uint64(0)), "capped, not overflowed")
}

// timeoutCase sets OBJECT_DELIVERY_TIMEOUT or SUBGROUP_DELIVERY_TIMEOUT on
// the publisher's side (Track or first object's Property) and the
// subscriber's. One side is short, the other none or an hour, so the test
// ends only if the short one applies.
type timeoutCase struct {
	name        string
	trackValue  uint64 // Track Property, 0 for none
	objectValue uint64 // Object Property on the first object, 0 for none
	subscriber  uint64 // parameter, 0 for none
	immutable   bool   // the properties sit inside IMMUTABLE_PROPERTIES (§10.7)
}

// objectScoped reports whether c sets a timeout as an Object Property,
// which 18 does not have: there both are Track Properties only (18
// {#object-delivery-timeout-ext}; 19 made them Object Properties too).
func (c timeoutCase) objectScoped() bool { return c.objectValue != 0 }

const (
	shortTimeout = 250 // ms
	hour         = 3_600_000
)

var timeoutCases = []timeoutCase{
	{name: "subscriber only", subscriber: shortTimeout},
	{name: "track property only", trackValue: shortTimeout},
	{name: "track shorter than subscriber", trackValue: shortTimeout, subscriber: hour},
	{name: "subscriber shorter than track", trackValue: hour, subscriber: shortTimeout},
	{name: "first object property overrides track", trackValue: hour, objectValue: shortTimeout, subscriber: hour},
	{name: "track property inside IMMUTABLE_PROPERTIES", trackValue: shortTimeout, immutable: true},
	{name: "first object property inside IMMUTABLE_PROPERTIES", trackValue: hour, objectValue: shortTimeout, subscriber: hour, immutable: true},
}

// newDeliverySetup subscribes over connect to a track with c's values for
// property prop / parameter, writes a first small object and hands back
// the subscriber's reader of the subgroup with that object read.
type deliverySetup struct {
	track  *LocalTrack
	sub    *Subscription
	ss     *ServedSubscription
	w      *SubgroupWriter
	r      *SubgroupReader
	expiry chan struct{}
}

func newDeliverySetup(t *testing.T, ctx context.Context, connect connector, prop uint64, c timeoutCase) *deliverySetup {
	t.Helper()
	var props wire.KVList
	if c.trackValue != 0 {
		props = wire.KVList{{Type: prop, Value: c.trackValue}}
		if c.immutable {
			props = immutable(t, props)
		}
	}
	track, cfg, served := newServedTrack(t, testTrack, props)
	expiry := make(chan struct{}, 4)
	cfg.hooks = &sessionHooks{deliveryTimedOut: func() { expiry <- struct{}{} }}
	p := connect(t, cfg, nil)
	var params wire.Params
	if c.subscriber != 0 {
		if prop == wire.PropObjectDeliveryTimeout {
			params.ObjectDeliveryTimeout = wire.Some(c.subscriber)
		} else {
			params.SubgroupDeliveryTimeout = wire.Some(c.subscriber)
		}
	}
	sub, err := p.client.Subscribe(ctx, testTrack, params)
	require.NoError(t, err)
	ss := <-served

	w := track.OpenSubgroup(0, 0, SubgroupOptions{Properties: true})
	var first []byte
	if c.objectValue != 0 {
		objProps := wire.KVList{{Type: prop, Value: c.objectValue}}
		if c.immutable {
			objProps = immutable(t, objProps)
		}
		first, err = objProps.Append(nil)
		require.NoError(t, err)
	}
	require.NoError(t, writeObject(w, 0, first, []byte("first")))
	r, err := sub.AcceptSubgroup(ctx)
	require.NoError(t, err)
	_, payloads := readObjects(t, r, 1)
	require.Equal(t, [][]byte{[]byte("first")}, payloads)
	return &deliverySetup{track: track, sub: sub, ss: ss, w: w, r: r, expiry: expiry}
}

// expectDeliveryTimeout waits for the publisher's reset, makes sure it
// has reached the subscriber (a round trip on the request stream, which
// the reset precedes) and reads the rest of the stream, which must end in
// DELIVERY_TIMEOUT.
func (d *deliverySetup) expectDeliveryTimeout(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-d.expiry:
	case <-ctx.Done():
		require.FailNow(t, "no delivery timeout")
	}
	require.NoError(t, d.sub.Update(ctx, wire.Params{SubscriberPriority: wire.Some[uint8](1)}))
	var err error
	for err == nil {
		if _, err = d.r.Next(); err == nil {
			_, err = io.Copy(io.Discard, d.r)
		}
	}
	var se *transport.StreamError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, uint64(wire.ResetDeliveryTimeout), se.Code, "reset with DELIVERY_TIMEOUT")
	assert.NoError(t, d.sub.Err(), "the subscription goes on")
}

// TestC020_ObjectDeliveryTimeoutResetsStream: an object that cannot be
// passed to the transport in time, because the subscriber reads nothing
// and flow control is exhausted, gets its stream reset with
// DELIVERY_TIMEOUT (§5.2, §11.3.2); the effective timeout is the smaller
// non-zero of the publisher's and the subscriber's; no new stream is
// opened for the rest of the subgroup. Every case runs in memory on the
// bubble's clock, one over each real transport.
func TestC020_ObjectDeliveryTimeoutResetsStream(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTimeoutCases(t, func(t *testing.T, connect connector, c timeoutCase) {
			ctx := testCtx(t, 20*time.Second)
			d := newDeliverySetup(t, ctx, connect, wire.PropObjectDeliveryTimeout, c)

			// Far more than the subscriber's receive windows.
			written := make(chan error, 1)
			go func() { written <- writeObject(d.w, 1, nil, make([]byte, 8<<20)) }()
			select {
			case err := <-written:
				require.NoError(t, err, "the late copy is dropped, the write goes on")
			case <-ctx.Done():
				require.FailNow(t, "the blocked write was not released by the timeout")
			}
			d.expectDeliveryTimeout(t, ctx)

			require.NoError(t, writeObject(d.w, 2, nil, []byte("later")))
			require.NoError(t, d.w.Close())
			d.ss.mu.Lock()
			assert.Equal(t, uint64(1), d.ss.streams, "no new stream for the rest of the subgroup")
			d.ss.mu.Unlock()
		})
	})
}

// TestC020_ObjectDeliveryTimeoutSlowPayload: an object whose payload the
// application produces too late is reset as well: its bytes would reach
// the transport after the timeout (§5.2).
func TestC020_ObjectDeliveryTimeoutSlowPayload(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			ctx := testCtx(t, 20*time.Second)
			d := newDeliverySetup(t, ctx, connect, wire.PropObjectDeliveryTimeout, timeoutCase{subscriber: shortTimeout})
			// Before BeginObject, which starts the object's timer: a lower
			// bound that no delay of this goroutine can break.
			start := time.Now()
			ow, err := d.w.BeginObject(1, 10, nil)
			require.NoError(t, err)
			_, err = ow.Write([]byte("abc"))
			require.NoError(t, err)
			d.expectDeliveryTimeout(t, ctx)
			assert.GreaterOrEqual(t, time.Since(start), shortTimeout*time.Millisecond, "not before the timeout")
			_, err = ow.Write([]byte("defghij"))
			require.NoError(t, err, "the object completes for the subscriptions still served")
			require.NoError(t, ow.Close())
			require.NoError(t, d.w.Close())
		})
	})
}

// TestC020_SubgroupDeliveryTimeoutResetsAfterFin: the subgroup timer
// starts at the FIN (Close); a subgroup the subscriber has not taken by
// then is reset with DELIVERY_TIMEOUT (§5.2). quic-go does not report
// acknowledgements, so the reset comes whether or not the data arrived.
func TestC020_SubgroupDeliveryTimeoutResetsAfterFin(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTimeoutCases(t, func(t *testing.T, connect connector, c timeoutCase) {
			ctx := testCtx(t, 20*time.Second)
			d := newDeliverySetup(t, ctx, connect, wire.PropSubgroupDeliveryTimeout, c)
			require.NoError(t, writeObject(d.w, 1, nil, make([]byte, 64<<10)))
			select {
			case <-d.expiry:
				require.FailNow(t, "the subgroup timer started before the FIN")
			case <-time.After(2 * shortTimeout * time.Millisecond):
			}
			start := time.Now()
			require.NoError(t, d.w.Close())
			d.expectDeliveryTimeout(t, ctx)
			assert.GreaterOrEqual(t, time.Since(start), shortTimeout*time.Millisecond, "not before the timeout")
		})
	})
}

// forTimeoutCases runs f for every timeout case the test's draft has over
// both transports in memory, in a synctest bubble.
func forTimeoutCases(t *testing.T, f func(t *testing.T, connect connector, c timeoutCase)) {
	for _, tr := range pipeTransports {
		for _, c := range timeoutCases {
			if c.objectScoped() && draftOf(t) == wire.Draft18 {
				continue
			}
			t.Run(tr.name+"/"+c.name, func(t *testing.T) {
				inBubble(t, func(t *testing.T) { f(t, overPipe(tr.wt), c) })
			})
		}
	}
}

// TestDeliveryTimeoutNoneKeepsStream: with no timeout on either side a
// blocked object waits for the subscriber and is delivered whole.
func TestDeliveryTimeoutNoneKeepsStream(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ctx := testCtx(t, 20*time.Second)
		d := newDeliverySetup(t, ctx, overPipe(false), wire.PropObjectDeliveryTimeout, timeoutCase{})
		const size = 4 << 20
		written := make(chan error, 1)
		go func() { written <- writeObject(d.w, 1, nil, make([]byte, size)) }()
		advance(defaultSubscriberGrace / 2) // nothing times out
		h, err := d.r.Next()
		require.NoError(t, err)
		assert.Equal(t, uint64(1), h.Location.Object)
		assert.Equal(t, uint64(size), d.r.PayloadLen())
		n, err := io.Copy(io.Discard, d.r)
		require.NoError(t, err)
		assert.Equal(t, int64(size), n)
		require.NoError(t, <-written)
		require.NoError(t, d.w.Close())
		_, err = d.r.Next()
		assert.Equal(t, io.EOF, err)
		assert.Empty(t, d.expiry)
	})
}

// TestDeliveryTimeoutHotPathAllocs: what the object path adds per object
// (reading the subscriber's parameters, arming, checking and disarming an
// object timer once the stream has one) allocates nothing.
func TestDeliveryTimeoutHotPathAllocs(t *testing.T) {
	ss := &ServedSubscription{params: wire.Params{ObjectDeliveryTimeout: wire.Some[uint64](hour)}}
	ss.refreshView()
	out := &subgroupOut{ss: ss}
	out.armObject(mono.Now(), hour) // creates the timer once
	out.disarmObject()
	allocs := testing.AllocsPerRun(1000, func() {
		dp := ss.dataView().dp
		out.armObject(mono.Now(), effectiveTimeout(0, dp.objectTimeout))
		if out.late() {
			panic("late")
		}
		out.disarmObject()
	})
	assert.Zero(t, allocs)
	out.stopTimers()
	assert.False(t, out.dl.expired.Load())
}

// TestDeliveryTimeoutDatagramLate: a datagram is dropped for a subscription
// once the smaller of its non-zero timeouts has passed since the
// application provided it; for datagrams SUBGROUP_DELIVERY_TIMEOUT acts as
// OBJECT_DELIVERY_TIMEOUT does (§5.2).
func TestDeliveryTimeoutDatagramLate(t *testing.T) {
	start := mono.Now() - int64(50*time.Millisecond)
	cases := []struct {
		name       string
		publisher  deliveryTimeouts
		subscriber dataParams
		late       bool
	}{
		{"no timeouts", deliveryTimeouts{}, dataParams{}, false},
		{"publisher object timeout passed", deliveryTimeouts{object: 10}, dataParams{}, true},
		{"publisher object timeout ahead", deliveryTimeouts{object: 10_000}, dataParams{}, false},
		{"subscriber subgroup timeout passed", deliveryTimeouts{}, dataParams{subgroupTimeout: 10}, true},
		{"smaller of the two sides", deliveryTimeouts{object: 10_000}, dataParams{objectTimeout: 10}, true},
		{"smaller of the two kinds", deliveryTimeouts{object: 10_000, subgroup: 10}, dataParams{}, true},
		{"both ahead", deliveryTimeouts{object: 10_000, subgroup: 20_000}, dataParams{objectTimeout: 30_000}, false},
	}
	for _, c := range cases {
		assert.Equal(t, c.late, datagramLate(start, c.publisher, c.subscriber), c.name)
	}
	assert.False(t, datagramLate(mono.Now(), deliveryTimeouts{object: 10_000}, dataParams{}), "fresh datagram")
}
