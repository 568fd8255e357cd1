package moqt

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestStallTicksBound: the watchdog's tick count never calls a stream
// stalled before ReadStallTimeout has passed since it was touched, and
// sees it within a tick after.
func TestStallTicksBound(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, time.Millisecond, 2500 * time.Microsecond,
		3 * time.Millisecond, 200 * time.Millisecond, 10 * time.Second, 10*time.Second + 1} {
		tick, n := stallTick(d), stallTicks(d)
		// Touched in the tick after look j, stalled at look j+n: at
		// least n-1 whole ticks have passed, at most n.
		assert.GreaterOrEqual(t, time.Duration(n-1)*tick, d, "d=%v: not before the timeout", d)
		assert.LessOrEqual(t, time.Duration(n)*tick, d+2*tick, "d=%v: within a tick after it", d)
	}
}

// TestReceiveStallWaitingReader: an application waiting inside Next or
// Read for data the publisher has not sent yet is reading, not behind,
// even with bytes of the stream already buffered: the subscription stays
// up past ReadStallTimeout, and the call returns once the data comes.
func TestReceiveStallWaitingReader(t *testing.T) {
	const stall = 200 * time.Millisecond
	enc := func() *wire.SubgroupEncoder {
		return &wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 2, GroupID: 1, DefaultPriority: true}}
	}
	// open sends the subgroup's header and b, and returns the stream and
	// the subscriber's reader of it.
	open := func(t *testing.T, b []byte) (*Subscription, transport.SendStream, *SubgroupReader) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{ReadStallTimeout: stall})
		sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 2)
		str := fp.openSubgroup(2, 1)
		_, err := str.Write(b)
		require.NoError(t, err)
		r, err := sub.AcceptSubgroup(fakeCtx(t))
		require.NoError(t, err)
		return sub, str, r
	}
	// alive checks the subscription outlasts several timeouts while call
	// waits, then sends rest and expects call to succeed.
	alive := func(t *testing.T, sub *Subscription, str transport.SendStream, call <-chan error, rest []byte) {
		select {
		case <-sub.Done():
			t.Fatalf("cancelled while its application waits for data: %v", sub.Err())
		case err := <-call:
			t.Fatalf("the call returned before its data came: %v", err)
		case <-time.After(5 * stall):
		}
		assert.Equal(t, stateEstablished, sub.current())
		_, err := str.Write(rest)
		require.NoError(t, err)
		assert.NoError(t, recvOrFail(t, call))
	}

	t.Run("in Read, mid-payload", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			e := enc()
			b, err := e.AppendObject(nil, wire.SubgroupObject{ObjectID: 0, PayloadLength: 100})
			require.NoError(t, err)
			sub, str, r := open(t, append(b, make([]byte, 10)...))
			_, err = r.Next()
			require.NoError(t, err)
			call := goErr(func() error { _, err := io.ReadFull(r, make([]byte, 100)); return err })
			alive(t, sub, str, call, make([]byte, 90))
		})
	})
	t.Run("in Next, mid-header", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			e := enc()
			b, err := e.AppendObject(nil, wire.SubgroupObject{ObjectID: 0, PayloadLength: 1})
			require.NoError(t, err)
			b = append(b, 'x')
			next, err := e.AppendObject(nil, wire.SubgroupObject{ObjectID: 1, PayloadLength: 1})
			require.NoError(t, err)
			next = append(next, 'y')
			sub, str, r := open(t, append(b, next[:1]...)) // the next header's first byte is buffered
			_, err = r.Next()
			require.NoError(t, err)
			_, err = r.readPayload(16)
			require.NoError(t, err)
			call := goErr(func() error { _, err := r.Next(); return err })
			alive(t, sub, str, call, next[1:])
		})
	})
	t.Run("in Next, skipping a payload", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			e := enc()
			b, err := e.AppendObject(nil, wire.SubgroupObject{ObjectID: 0, PayloadLength: 100})
			require.NoError(t, err)
			sub, str, r := open(t, append(b, make([]byte, 10)...))
			_, err = r.Next()
			require.NoError(t, err)
			next, err := e.AppendObject(nil, wire.SubgroupObject{ObjectID: 1, PayloadLength: 1})
			require.NoError(t, err)
			call := goErr(func() error { _, err := r.Next(); return err }) // skips object 0's payload
			alive(t, sub, str, call, append(append(make([]byte, 90), next...), 'y'))
		})
	})
}
