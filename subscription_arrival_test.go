package moqt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// arrivalPayload is the payload of object o of subgroup s of group g.
func arrivalPayload(g, s, o uint64, size int) []byte {
	b := fmt.Appendf(nil, "%d/%d/%d:", g, s, o)
	for len(b) < size {
		b = append(b, byte(len(b)))
	}
	return b
}

// arrivalProps are the Object Properties of object o of group g: odd
// objects have some.
func arrivalProps(g, o uint64) []byte {
	if o%2 == 0 {
		return nil
	}
	b, _ := wire.KVList{{Type: 0x10, Value: g<<32 | o}}.Append(nil)
	return b
}

// writeSubgroups writes groups × subgroups subgroups of n objects of size
// bytes, all at once, each closed with a FIN.
func writeSubgroups(t *testing.T, track *LocalTrack, groups, subgroups, n, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, groups*subgroups)
	for g := range uint64(groups) {
		for s := range uint64(subgroups) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := track.OpenSubgroup(g, s, SubgroupOptions{Properties: true})
				for i := range uint64(n) {
					o := s*1000 + i // Object IDs are unique in a group
					if err := writeObject(w, o, arrivalProps(g, o), arrivalPayload(g, s, o, size)); err != nil {
						errs <- err
						return
					}
				}
				errs <- w.Close()
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// arrivalCheck checks what Subscription.ReadObject returns: every object once,
// each subgroup's in order, each with its own payload.
type arrivalCheck struct {
	t    *testing.T
	seen map[wire.Location]bool
	last map[[2]uint64]int64 // last Object ID per (group, subgroup)
	size int
}

func newArrivalCheck(t *testing.T, size int) *arrivalCheck {
	return &arrivalCheck{t: t, seen: map[wire.Location]bool{}, last: map[[2]uint64]int64{}, size: size}
}

func (a *arrivalCheck) add(obj Object) {
	a.t.Helper()
	assert.False(a.t, a.seen[obj.Location], "object %v twice", obj.Location)
	a.seen[obj.Location] = true
	if obj.Datagram {
		assert.Equal(a.t, fmt.Sprintf("datagram %v", obj.Location), string(obj.Payload))
		return
	}
	key := [2]uint64{obj.Location.Group, obj.SubgroupID}
	last, ok := a.last[key]
	if !ok {
		last = int64(obj.SubgroupID*1000) - 1
	}
	assert.Equal(a.t, last+1, int64(obj.Location.Object), "subgroup %v out of order", key)
	a.last[key] = int64(obj.Location.Object)
	assert.Equal(a.t, arrivalPayload(obj.Location.Group, obj.SubgroupID, obj.Location.Object, a.size), obj.Payload)
	assert.Equal(a.t, arrivalProps(obj.Location.Group, obj.Location.Object), obj.Properties)
}

// TestReadObjectArrival: objects of many subgroups and datagrams all come
// out of Subscription.ReadObject exactly once, and after PUBLISH_DONE and
// the last FIN it returns the *DoneError.
func TestReadObjectArrival(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		const groups, subgroups, n, datagrams = 4, 3, 25, 20
		got := newArrivalCheck(t, 300)
		done := make(chan error, 1)
		go func() {
			for range groups*subgroups*n + datagrams {
				obj, err := lt.sub.ReadObject(lt.ctx)
				if err != nil {
					done <- err
					return
				}
				got.add(obj)
			}
			done <- nil
		}()
		for i := range uint64(datagrams) {
			loc := wire.Location{Group: 100 + i, Object: 0}
			require.NoError(t, lt.track.WriteDatagram(Object{Location: loc, Payload: fmt.Appendf(nil, "datagram %v", loc)}))
		}
		writeSubgroups(t, lt.track, groups, subgroups, n, 300)
		require.NoError(t, <-done)
		assert.Len(t, got.seen, groups*subgroups*n+datagrams)
		assert.Zero(t, lt.sub.DroppedDatagrams())

		lt.track.End(wire.DoneTrackEnded, "over")
		_, err := lt.sub.ReadObject(lt.ctx)
		var de *DoneError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, wire.DoneTrackEnded, de.Code)
		_, err = lt.sub.ReadObject(lt.ctx)
		assert.ErrorAs(t, err, &de, "the end is sticky")
	})
}

// TestReadObjectSlowReader: a reader that pauses holds the objects back,
// within the documented bound, and loses none of them.
func TestReadObjectSlowReader(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil,
			&Config{StreamReceiveWindow: 64 << 10, ConnectionReceiveWindow: 256 << 10})
		const groups, subgroups, n, size = 2, 2, 40, 16 << 10 // 2.5 MiB
		written := make(chan struct{})
		go func() {
			defer close(written)
			writeSubgroups(t, lt.track, groups, subgroups, n, size)
		}()
		got := newArrivalCheck(t, size)
		obj, err := lt.sub.ReadObject(lt.ctx)
		require.NoError(t, err)
		got.add(obj)

		// The reader pauses: the queue fills to its bound and stops
		// there, and the streams are left unread.
		a := &lt.sub.arrival
		require.Eventually(t, func() bool { return len(a.items) == arrivalObjects || a.reserved() > arrivalBytes-size },
			5*time.Second, time.Millisecond, "the queue fills")
		time.Sleep(200 * time.Millisecond) // let it overfill, if it would
		assert.LessOrEqual(t, len(a.items), arrivalObjects)
		assert.LessOrEqual(t, a.reserved(), arrivalBytes)
		select {
		case <-written:
			t.Fatal("the publisher finished while the subscriber held back")
		default:
		}

		for range groups*subgroups*n - 1 {
			obj, err := lt.sub.ReadObject(lt.ctx)
			require.NoError(t, err)
			got.add(obj)
			assert.LessOrEqual(t, a.reserved(), arrivalBytes)
		}
		<-written
		assert.Len(t, got.seen, groups*subgroups*n)
	})
}

// TestReadObjectContext: a ReadObject whose context ends returns its
// error and loses nothing; the next call gets the next object.
func TestReadObjectContext(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		short, cancel := context.WithTimeout(lt.ctx, 50*time.Millisecond)
		defer cancel()
		_, err := lt.sub.ReadObject(short)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		writeSubgroups(t, lt.track, 1, 1, 3, 10)
		got := newArrivalCheck(t, 10)
		for range 3 {
			obj, err := lt.sub.ReadObject(lt.ctx)
			require.NoError(t, err)
			got.add(obj)
		}
		assert.Len(t, got.seen, 3)
	})
}

// TestReadObjectClose: Close interrupts a blocked ReadObject, which then
// returns the subscription's error, as every later call does; the
// goroutines behind it end (the pair's goleak check).
func TestReadObjectClose(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		// An open stream with an object read and more to come.
		w := lt.track.OpenSubgroup(1, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, []byte("first")))
		obj, err := lt.sub.ReadObject(lt.ctx)
		require.NoError(t, err)
		assert.Equal(t, "first", string(obj.Payload))

		read := make(chan error, 1)
		go func() {
			_, err := lt.sub.ReadObject(lt.ctx)
			read <- err
		}()
		time.Sleep(20 * time.Millisecond)
		require.NoError(t, lt.sub.Close())
		select {
		case err := <-read:
			assert.ErrorIs(t, err, ErrCancelled)
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not interrupt ReadObject")
		}
		_, err = lt.sub.ReadObject(lt.ctx)
		assert.ErrorIs(t, err, ErrCancelled)
		closedOrFail(t, lt.sub.arrival.drained, "the reader's goroutines, with the subscription")
		w.Reset(wire.ResetCancelled)
	})
}

// TestReadObjectReset: a stream the publisher resets is reported with a
// stream error carrying the code, after its objects; the subscription
// goes on.
func TestReadObjectReset(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
		w := lt.track.OpenSubgroup(2, 5, SubgroupOptions{})
		require.NoError(t, writeObject(w, 5000, nil, arrivalPayload(2, 5, 5000, 10)))
		got := newArrivalCheck(t, 10)
		obj, err := lt.sub.ReadObject(lt.ctx)
		require.NoError(t, err)
		got.add(obj)
		w.Reset(wire.ResetDeliveryTimeout)
		failed, err := lt.sub.ReadObject(lt.ctx)
		require.NoError(t, err, "a reset subgroup is news in band, not the subscription's end")
		assert.Equal(t, uint64(2), failed.Location.Group)
		assert.Equal(t, uint64(5), failed.SubgroupID)
		assert.Nil(t, failed.Payload)
		var se2 *StreamError
		require.ErrorAs(t, failed.Incomplete, &se2)
		assert.Equal(t, wire.ResetDeliveryTimeout, se2.Code)

		writeSubgroups(t, lt.track, 1, 1, 2, 10)
		for range 2 {
			obj, err := lt.sub.ReadObject(lt.ctx)
			require.NoError(t, err)
			got.add(obj)
		}
		assert.Len(t, got.seen, 3)
	})
}

// TestReadObjectFellBehind: objects left waiting for ReadObject longer than
// Config.ReadStallTimeout cancel the subscription with ErrFellBehind.
func TestReadObjectFellBehind(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, &Config{ReadStallTimeout: 200 * time.Millisecond})
		short, cancel := context.WithTimeout(lt.ctx, 10*time.Millisecond)
		defer cancel()
		_, err := lt.sub.ReadObject(short) // starts the reader; nothing yet
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// More than the queue holds: a stream is left unread.
		written := make(chan struct{})
		go func() {
			defer close(written)
			writeSubgroups(t, lt.track, 1, 1, 200, 10<<10)
		}()
		select {
		case <-lt.sub.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the subscription was not cancelled")
		}
		assert.ErrorIs(t, lt.sub.Err(), ErrFellBehind)
		_, err = lt.sub.ReadObject(lt.ctx)
		assert.ErrorIs(t, err, ErrFellBehind)
		closedOrFail(t, lt.sub.arrival.drained, "the reader's goroutines, with the subscription")
		<-written
	})
}

// TestReadObjectTooLarge: an object larger than Config.MaxObjectSize is not
// read into memory; its stream is stopped and reported in band.
func TestReadObjectTooLarge(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{}, nil, &Config{MaxObjectSize: 1000})
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, writeObject(w, 0, nil, arrivalPayload(0, 0, 0, 1000)))
		require.NoError(t, writeObject(w, 1, nil, arrivalPayload(0, 0, 1, 1001)))
		obj, err := lt.sub.ReadObject(lt.ctx)
		require.NoError(t, err)
		assert.Len(t, obj.Payload, 1000)
		failed, err := lt.sub.ReadObject(lt.ctx)
		require.NoError(t, err)
		assert.ErrorIs(t, failed.Incomplete, ErrObjectTooLarge)
		assert.Equal(t, uint64(0), failed.Location.Group)
		assert.False(t, errors.Is(lt.sub.Err(), ErrCancelled), "the subscription goes on")
	})
}

// reserved is the bytes the reader holds.
func (a *arrival) reserved() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bytes
}

// TestReadObjectMalformedTrack: a stream that reveals a Malformed Track
// ends ReadObject with the *MalformedTrackError; the offending object is
// not returned and the streams are stopped with MALFORMED_TRACK.
func TestReadObjectMalformedTrack(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		p := newFakePub(t, wire.Params{}, nil)
		a := p.subgroup(hdr(1, 0, 10)).objects(0)
		obj, err := p.sub.ReadObject(p.ctx)
		require.NoError(t, err)
		assert.Equal(t, wire.Location{Group: 1, Object: 0}, obj.Location)
		b := p.subgroup(hdr(1, 0, 20)).objects(1) // another Publisher Priority
		_, err = p.sub.ReadObject(p.ctx)
		me := p.expectMalformed(err)
		assert.Contains(t, me.Reason, "Publisher Priority")
		a.expectStopSending(wire.ResetMalformedTrack)
		b.expectStopSending(wire.ResetMalformedTrack)
		_, err = p.sub.ReadObject(p.ctx)
		assert.ErrorAs(t, err, &me, "the end is sticky")
		closedOrFail(t, p.sub.arrival.drained, "the reader's goroutines, with the subscription")
	})
}
