package moqt

import (
	"bytes"
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// relayTrackServer serves track's SUBSCRIBEs and TRACK_STATUSes, as a
// relay's handler would.
func relayTrackServer(track *LocalTrack) *Config {
	return &Config{Handler: HandlerFunc(func(r Request) {
		switch r := r.(type) {
		case *SubscribeRequest:
			if r.Track.Equal(track.Name()) {
				_, _ = track.Accept(r, AcceptOptions{})
				return
			}
		case *TrackStatusRequest:
			if r.Track.Equal(track.Name()) {
				_ = track.Status(r)
				return
			}
		}
		DefaultHandler.ServeMOQT(r)
	})}
}

// TestLocalTrackSetLargest: the Largest Object a relay learnt upstream is
// the track's until it publishes past it (§9.7): SUBSCRIBE_OK and
// TRACK_STATUS report it, and a subscription from the Next Object starts
// after it, so objects the relay forwards late from before it are not
// delivered.
func TestLocalTrackSetLargest(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		upstream := wire.Location{Group: 5, Object: 3}
		track.SetLargest(upstream)
		p := connect(t, relayTrackServer(track), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		st, err := p.client.TrackStatus(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		assert.Equal(t, wire.Some(upstream), st.Largest, "TRACK_STATUS")

		sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
		require.NoError(t, err)
		largest, ok := sub.Largest()
		require.True(t, ok, "SUBSCRIBE_OK carries LARGEST_OBJECT")
		assert.Equal(t, upstream, largest, "SUBSCRIBE_OK's LARGEST_OBJECT")

		// Objects up to the upstream's Largest are before the filter's
		// start; the next group is after it.
		w := track.OpenSubgroup(5, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 2, nil, []byte("old")))
		require.NoError(t, writeObject(w, 3, nil, []byte("old")))
		require.NoError(t, w.Close())
		w = track.OpenSubgroup(6, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("new")))
		require.NoError(t, w.Close())
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(6), r.Header().GroupID, "the first subgroup delivered is after the upstream's Largest")
		_, payloads := readSubgroup(t, r)
		assert.Equal(t, [][]byte{[]byte("new")}, payloads)

		// The maximum rule: what the track published is larger now.
		track.SetLargest(wire.Location{Group: 5, Object: 9})
		l, ok := track.Largest()
		require.True(t, ok)
		assert.Equal(t, wire.Location{Group: 6, Object: 0}, l, "a smaller upstream Largest does not lower the track's")
		track.SetLargest(wire.Location{Group: 8, Object: 1})
		l, _ = track.Largest()
		assert.Equal(t, wire.Location{Group: 8, Object: 1}, l, "a larger one raises it")
		sub2, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		l, _ = sub2.Largest()
		assert.Equal(t, wire.Location{Group: 8, Object: 1}, l)
	})
}

// objectLog collects what a LocalTrack's OnObject function sees, copying
// the slices as the function must.
type objectLog struct {
	mu   sync.Mutex
	objs []Object
}

func (l *objectLog) store(o Object) {
	o.Properties = bytes.Clone(o.Properties)
	o.Payload = bytes.Clone(o.Payload)
	l.mu.Lock()
	l.objs = append(l.objs, o)
	l.mu.Unlock()
}

func (l *objectLog) all() []Object {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.objs)
}

// TestLocalTrackOnObject: every object published through the track goes
// to its store once, whole, with its priority: written objects, status
// objects, streamed ones (Write and ReadFrom) and datagrams, whether a
// subscriber takes them or not; an object closed short does not. The
// subscriber meanwhile gets the same objects, a payload forwarded with
// ReadFrom included.
func TestLocalTrackOnObject(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 7}})
		require.NoError(t, err)
		var log objectLog
		track.OnObject(log.store)
		props, err := wire.KVList{{Type: 0x10, Value: 1}}.Append(nil)
		require.NoError(t, err)

		// Before anyone subscribes: stored all the same.
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("unseen")))
		require.NoError(t, w.Close())

		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		lt.track.OnObject(log.store)
		w = lt.track.OpenSubgroup(1, 2, SubgroupOptions{Properties: true, Priority: wire.Some[uint8](3)})
		payload := []byte("whole")
		require.NoError(t, writeObject(w, 0, props, payload))
		copy(payload, "XXXXX") // the writer kept nothing of it
		ow, err := w.BeginObject(1, 6, props)
		require.NoError(t, err)
		_, err = ow.Write([]byte("str"))
		require.NoError(t, err)
		_, err = ow.Write([]byte("eam"))
		require.NoError(t, err)
		big := bytes.Repeat([]byte("relay"), 20000) // 100 KB: several ReadFrom chunks
		ow, err = w.BeginObject(2, uint64(len(big)), nil)
		require.NoError(t, err)
		// One byte at a time for the first, then the rest: ReadFrom
		// writes what each Read returns.
		n, err := ow.ReadFrom(io.MultiReader(iotest.OneByteReader(bytes.NewReader(big[:3])), bytes.NewReader(big[3:])))
		require.NoError(t, err)
		assert.Equal(t, int64(len(big)), n)
		require.NoError(t, writeStatus(w, 3, wire.ObjectEndOfGroup))
		require.NoError(t, w.Close())

		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)
		ids, got := readSubgroup(t, r)
		require.Equal(t, []uint64{0, 1, 2, 3}, ids, "three objects and the End of Group")
		require.Len(t, got, 4)
		assert.Equal(t, "whole", string(got[0]))
		assert.Equal(t, "stream", string(got[1]))
		assert.True(t, bytes.Equal(big, got[2]), "the ReadFrom payload arrives intact")

		// Closed short: never complete, never stored.
		w = lt.track.OpenSubgroup(2, 0, SubgroupOptions{})
		ow, err = w.BeginObject(0, 10, nil)
		require.NoError(t, err)
		_, err = ow.Write([]byte("short"))
		require.NoError(t, err)
		assert.Error(t, ow.Close())
		w.Reset(wire.ResetCancelled)

		require.NoError(t, lt.track.WriteDatagram(Object{Location: wire.Location{Group: 3, Object: 0}, Payload: []byte("dgram"), EndOfGroup: true}))

		at := func(g, o uint64) wire.Location { return wire.Location{Group: g, Object: o} }
		stored := normalize(log.all())
		require.Len(t, stored, 6)
		assert.True(t, bytes.Equal(big, stored[3].Payload), "the ReadFrom payload is stored whole")
		stored[3].Payload = nil // compared above, not printed
		assert.Equal(t, []Object{
			{Location: at(0, 0), Priority: wire.Some[uint8](7), Payload: []byte("unseen")},
		}, stored[:1], "the first track's store")
		assert.Equal(t, []Object{
			{Location: at(1, 0), SubgroupID: 2, Priority: wire.Some[uint8](3), Properties: props, Payload: []byte("whole")},
			{Location: at(1, 1), SubgroupID: 2, Priority: wire.Some[uint8](3), Properties: props, Payload: []byte("stream")},
			{Location: at(1, 2), SubgroupID: 2, Priority: wire.Some[uint8](3)},
			{Location: at(1, 3), SubgroupID: 2, Priority: wire.Some[uint8](3), Status: wire.ObjectEndOfGroup},
			{Location: at(3, 0), Priority: wire.Some[uint8](defaultPublisherPriority), Payload: []byte("dgram"), Datagram: true, EndOfGroup: true},
		}, stored[1:])

		lt.track.OnObject(nil)
		w = lt.track.OpenSubgroup(4, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("off")))
		require.NoError(t, w.Close())
		assert.Len(t, log.all(), 6, "no store once removed")
	})
}

// normalize makes empty slices nil, as the expected values write them.
func normalize(objs []Object) []Object {
	for i := range objs {
		if len(objs[i].Properties) == 0 {
			objs[i].Properties = nil
		}
		if len(objs[i].Payload) == 0 {
			objs[i].Payload = nil
		}
	}
	return objs
}

// TestSubgroupWriterObjectChecks: WriteObject refuses an object that is
// not the writer's, before anything is sent.
func TestSubgroupWriterObjectChecks(t *testing.T) {
	track, err := NewLocalTrack(testTrack, nil)
	require.NoError(t, err)
	w := track.OpenSubgroup(4, 1, SubgroupOptions{Priority: wire.Some[uint8](9)})
	at := wire.Location{Group: 4, Object: 0}
	for name, o := range map[string]Object{
		"another group":       {Location: wire.Location{Group: 5}, SubgroupID: 1},
		"another subgroup":    {Location: at, SubgroupID: 2},
		"another priority":    {Location: at, SubgroupID: 1, Priority: wire.Some[uint8](8)},
		"a datagram":          {Location: at, SubgroupID: 1, Datagram: true},
		"END_OF_GROUP flag":   {Location: at, SubgroupID: 1, EndOfGroup: true},
		"status with payload": {Location: at, SubgroupID: 1, Status: wire.ObjectEndOfTrack, Payload: []byte("x")},
		"unknown status":      {Location: at, SubgroupID: 1, Status: 0x2},
	} {
		assert.Error(t, w.WriteObject(o), name)
	}
	_, ok := track.Largest()
	assert.False(t, ok, "nothing refused moved the Largest Object")
	assert.NoError(t, w.WriteObject(Object{Location: at, SubgroupID: 1, Priority: wire.Some[uint8](9)}))
	assert.Error(t, track.WriteDatagram(Object{Location: at, SubgroupID: 1}), "a datagram has no subgroup")
}

// TestLocalTrackIdle: Idle signals each time the track's last subscription
// ends, and not while one is served.
func TestLocalTrackIdle(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		assertClosed(t, track.Idle(), "no subscription yet")
		p := connect(t, relayTrackServer(track), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()

		for round := range 2 {
			a, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			b, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			idle := track.Idle()
			assertOpen(t, idle, "round %d: two subscriptions", round)
			require.NoError(t, a.Close())
			// The track learns of the first cancellation before the
			// second's: the channel must still be open after it.
			require.Eventually(t, func() bool { return len(track.snapshot()) == 1 }, 5*time.Second, time.Millisecond)
			assertOpen(t, idle, "round %d: one subscription left", round)
			require.NoError(t, b.Close())
			select {
			case <-idle:
			case <-ctx.Done():
				t.Fatalf("round %d: Idle not signalled when the last subscription ended", round)
			}
			assertClosed(t, track.Idle(), "round %d: idle now", round)
		}
	})
}

func assertClosed(t *testing.T, ch <-chan struct{}, msg string, args ...any) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Errorf("open, want closed: "+msg, args...)
	}
}

func assertOpen(t *testing.T, ch <-chan struct{}, msg string, args ...any) {
	t.Helper()
	select {
	case <-ch:
		t.Errorf("closed, want open: "+msg, args...)
	default:
	}
}

// TestObjectWriterReadFromBounds: ReadFrom takes no byte past the declared
// length, leaving the rest in the reader, and a reader that ends short
// leaves the object incomplete: io.ErrUnexpectedEOF, then Close resets the
// subscriber's stream rather than finishing it.
func TestObjectWriterReadFromBounds(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		ow, err := w.BeginObject(0, 4, nil)
		require.NoError(t, err)
		src := bytes.NewReader([]byte("fourmore"))
		n, err := ow.ReadFrom(src)
		require.NoError(t, err)
		assert.Equal(t, int64(4), n)
		assert.Equal(t, 4, src.Len(), "the bytes past the object stay in the reader")
		_, err = ow.ReadFrom(src)
		assert.Error(t, err, "the object is complete")
		// Read before the reset below, which may discard what is unread.
		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)
		ids, payloads, err := readAllN(r, 1)
		require.NoError(t, err)
		assert.Equal(t, []uint64{0}, ids)
		assert.Equal(t, [][]byte{[]byte("four")}, payloads)

		ow, err = w.BeginObject(1, 10, nil)
		require.NoError(t, err)
		n, err = ow.ReadFrom(bytes.NewReader([]byte("short")))
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		assert.Equal(t, int64(5), n)
		assert.Error(t, ow.Close(), "closed short")
		_, _, err = readAll(r)
		assert.Error(t, err, "the stream is reset, not finished")
		assert.NotErrorIs(t, err, io.EOF)
	})
}

// TestLocalTrackAcceptOtherTrack: a LocalTrack does not serve a SUBSCRIBE
// for another track under its objects; the subscriber gets DOES_NOT_EXIST.
func TestLocalTrackAcceptOtherTrack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		track, err := NewLocalTrack(trackA, nil)
		require.NoError(t, err)
		accepted := make(chan error, 1)
		h := HandlerFunc(func(r Request) {
			_, err := track.Accept(r.(*SubscribeRequest), AcceptOptions{})
			accepted <- err
		})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackB, wire.Params{}))
		assert.Equal(t, wire.ReqDoesNotExist, expect[*wire.RequestError](fs).ErrorCode)
		assert.Error(t, <-accepted)
		assert.Empty(t, track.snapshot(), "nothing served")
	})
}

// blockingReader blocks every Read until release is closed, counting the
// reads and the largest buffer it was given.
type blockingReader struct {
	entered chan struct{} // if set, gets a value as each Read starts
	release chan struct{}
	data    []byte
	reads   int
	maxBuf  int
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if b.entered != nil {
		b.entered <- struct{}{}
	}
	if b.release != nil {
		<-b.release
	}
	b.reads++
	b.maxBuf = max(b.maxBuf, len(p))
	if len(b.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

// TestObjectWriterReadFromStalledUpstream: a ReadFrom waiting on a stalled
// upstream holds up neither Close nor Reset of its subgroup, and fails
// once the subgroup is closed.
func TestObjectWriterReadFromStalledUpstream(t *testing.T) {
	track, err := NewLocalTrack(testTrack, nil)
	require.NoError(t, err)
	w := track.OpenSubgroup(0, 0, SubgroupOptions{})
	ow, err := w.BeginObject(0, 100, nil)
	require.NoError(t, err)
	br := &blockingReader{entered: make(chan struct{}, 2), release: make(chan struct{}), data: []byte("x")}
	result := make(chan error, 1)
	go func() {
		_, err := ow.ReadFrom(br)
		result <- err
	}()
	<-br.entered // ReadFrom waits in the upstream's Read
	closed := make(chan struct{})
	go func() {
		_ = w.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		close(br.release)
		require.FailNow(t, "Close waits behind the upstream's Read")
	}
	close(br.release)
	assert.ErrorIs(t, <-result, ErrSubgroupClosed)
}

// TestObjectWriterReadFromBuffer: ReadFrom reads in chunks of its full
// buffer whatever the size of the first object it forwarded.
func TestObjectWriterReadFromBuffer(t *testing.T) {
	track, err := NewLocalTrack(testTrack, nil)
	require.NoError(t, err)
	w := track.OpenSubgroup(0, 0, SubgroupOptions{})
	ow, err := w.BeginObject(0, 1, nil)
	require.NoError(t, err)
	_, err = ow.ReadFrom(&blockingReader{data: []byte("a")})
	require.NoError(t, err)
	const size = 100 << 10
	ow, err = w.BeginObject(1, size, nil)
	require.NoError(t, err)
	br := &blockingReader{data: make([]byte, size)}
	n, err := ow.ReadFrom(br)
	require.NoError(t, err)
	assert.Equal(t, int64(size), n)
	assert.Equal(t, readFromChunk, br.maxBuf)
	assert.LessOrEqual(t, br.reads, size/readFromChunk+2)
	require.NoError(t, w.Close())
}

// TestSetWriteDeadlineClock: a deadline the application sets is on the
// clock the write path reads, in a synctest bubble as outside one.
func TestSetWriteDeadlineClock(t *testing.T) {
	check := func(t *testing.T) {
		track, err := NewLocalTrack(testTrack, nil)
		require.NoError(t, err)
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		defer w.Close()
		w.SetWriteDeadline(time.Now().Add(time.Hour))
		left := time.Duration(w.userDeadline.Load() - mono.Now())
		assert.InDelta(t, float64(time.Hour), float64(left), float64(time.Minute))
	}
	t.Run("wall", check)
	t.Run("bubble", func(t *testing.T) { synctest.Test(t, check) })
}
