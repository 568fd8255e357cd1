package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The session's end stops new requests from being counted as open, so
// that the snapshot taken after it holds every request it must unblock;
// waitIdle returns once the last one is removed.
func TestOpenRequestsRefuseAfterSessionEnd(t *testing.T) {
	sess, end := context.WithCancel(context.Background())
	o := newOpenRequests(sess)
	require.NoError(t, o.waitIdle(context.Background()), "nothing open is idle")
	a, b := &requestStream{}, &requestStream{}
	require.True(t, o.add(a))
	done, stop := context.WithCancel(context.Background())
	stop()
	assert.ErrorIs(t, o.waitIdle(done), context.Canceled, "an open request is not idle")
	idle := make(chan error, 1)
	go func() { idle <- o.waitIdle(context.Background()) }()
	o.remove(a)
	o.remove(a)
	select {
	case err := <-idle:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("waitIdle did not return once the last request was removed")
	}
	assert.Empty(t, o.snapshot())
	require.True(t, o.add(a))
	end()
	assert.False(t, o.add(b))
	assert.Equal(t, []*requestStream{a}, o.snapshot())
}
