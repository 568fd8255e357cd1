package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChainDelivers moves batches of several groups through every kind of
// chain to a few subscribers and checks that each subscriber gets every
// object of every group, intact and in order, and each group's end; then
// a short paced run, whose latencies must be one per object and
// subscriber. It makes no claim about speed.
func TestChainDelivers(t *testing.T) {
	needsSockets(t)
	const subscribers = 3
	for _, k := range ChainKinds {
		t.Run(k.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := k.New(ctx, subscribers)
			require.NoError(t, err)
			defer func() { assert.NoError(t, c.Close()) }()
			for _, size := range []int{16, 1200, 16 << 10} {
				require.NoError(t, c.move(ctx, 2*ChainGroupObjects+7, size, true), "size %d", size)
			}
			lat, err := c.Latency(ctx, 2)
			require.NoError(t, err)
			assert.Len(t, lat, 2*MediaGroupObjects*subscribers)
			for _, l := range lat {
				assert.Positive(t, l)
			}
		})
	}
}

// TestForwarderProcessDelivers moves a batch of several groups through
// each chain of ForwarderKinds, whose forwarder runs in a process of its
// own, to two subscribers, checking every object, and reads the forwarder
// process's CPU time before and after; then measures them with
// CompareForwarders in two short rounds. It makes no claim about speed.
func TestForwarderProcessDelivers(t *testing.T) {
	needsSockets(t)
	const subscribers = 2
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, k := range ForwarderKinds {
		t.Run(k.Name, func(t *testing.T) {
			c, err := k.New(ctx, subscribers)
			require.NoError(t, err)
			defer func() { assert.NoError(t, c.Close()) }()
			require.NotNil(t, c.forwarder, "the forwarder runs in this process")
			before, err := c.forwarder()
			require.NoError(t, err)
			require.NoError(t, c.move(ctx, 2*ChainGroupObjects+7, 1200, true))
			after, err := c.forwarder()
			require.NoError(t, err)
			assert.Greater(t, after, before, "the forwarder process spent no CPU time forwarding")
		})
	}
	rows, err := CompareForwarders(ctx, subscribers, []int{100}, 2, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	for i := range ForwarderKinds {
		assert.Positive(t, rows[0].Forwarder[i])
		assert.Positive(t, rows[0].PerObject[i])
		assert.Len(t, rows[0].ForwarderRounds[i], 2)
	}
}

// TestChainCatchesLoss checks the harness itself: a subscriber that is
// told to expect an object more than the publisher writes reports it
// rather than waiting.
func TestChainCatchesLoss(t *testing.T) {
	needsSockets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := NewBareForwarder(ctx, 2)
	require.NoError(t, err)
	defer c.Close()
	first := c.next
	c.next++
	done := make(chan error, 1)
	go func() {
		done <- c.receive(ctx, 1, first, 1, 100, func(uint64) int { return 4 }, true)
	}()
	require.NoError(t, c.publishGroups(ctx, first, 1, 100, func(uint64) int { return 3 }))
	assert.ErrorContains(t, <-done, "object 3")
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	assert.Equal(t, time.Duration(5), Percentile(ds, 50))
	assert.Equal(t, time.Duration(10), Percentile(ds, 99))
	assert.Equal(t, time.Duration(1), Percentile(ds, 1))
	assert.Zero(t, Percentile(nil, 50))
}

// TestIdleMeasures runs the idle-subscription measurement on a few
// subscriptions of every kind.
func TestIdleMeasures(t *testing.T) {
	needsSockets(t)
	for _, k := range IdleKinds {
		t.Run(k.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			row, err := MeasureIdle(ctx, k, 32)
			require.NoError(t, err)
			assert.Equal(t, 32, row.Subscriptions)
			assert.Positive(t, row.HeapAlloc)
		})
	}
}

func TestCheckFiles(t *testing.T) {
	assert.NoError(t, checkFiles(8))
	assert.ErrorContains(t, checkFiles(1<<40), "ulimit -n")
}

func TestParseInts(t *testing.T) {
	got, err := ParseInts(" 1,10, ,1000")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 10, 1000}, got)
	_, err = ParseInts("1,x")
	assert.Error(t, err)
	_, err = ParseInts("0")
	assert.Error(t, err)
}

// TestHoldMeasures runs the paced hold measurement on a few subscriptions
// of every kind: at this size nothing falls behind, so every object
// reaches every subscriber and none is cut.
func TestHoldMeasures(t *testing.T) {
	needsSockets(t)
	pace := HoldPace{Rate: 50, Size: 1200, GroupObjects: 5, Duration: 400 * time.Millisecond}
	for _, k := range HoldKinds {
		t.Run(k.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			row, err := MeasureHold(ctx, k, 4, pace)
			require.NoError(t, err)
			assert.Equal(t, 20, row.Published)
			assert.Zero(t, row.Cut, "%v", row.Why)
			assert.Zero(t, row.Short)
			assert.Positive(t, row.HeapPeak)
			assert.GreaterOrEqual(t, row.Delivered, row.Elapsed)
		})
	}
}
