package moqt

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestSubgroupReaderReadObject: ReadObject reads whole objects into the
// caller's storage, reusing it when it is large enough, with their
// properties; an object over Config.MaxObjectSize is left current for Read,
// WriteTo or Next.
func TestSubgroupReaderReadObject(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, &Config{MaxObjectSize: 100 << 10})
		props := propsBlock(t, wire.KVList{{Type: 0x10, Value: 7}})
		big := bytes.Repeat([]byte("b"), 200<<10)
		w := lt.track.OpenSubgroup(4, 0, SubgroupOptions{Properties: true})
		go func() {
			for id, p := range [][]byte{[]byte("first"), bytes.Repeat([]byte("x"), 70<<10), []byte("third"), big, big, []byte("last")} {
				var pr []byte
				if id == 2 {
					pr = props
				}
				if !assert.NoError(t, writeObject(w, uint64(id), pr, p)) {
					return
				}
			}
			assert.NoError(t, w.Close())
		}()
		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)

		buf := make([]byte, 0, 16)
		obj, err := r.ReadObject(buf)
		require.NoError(t, err)
		assert.Equal(t, "first", string(obj.Payload))
		assert.Equal(t, &buf[:1][0], &obj.Payload[0], "read into the caller's storage")
		assert.Equal(t, wire.Location{Group: 4, Object: 0}, obj.Location)
		assert.Equal(t, wire.Some[uint8](defaultPublisherPriority), obj.Priority)

		obj, err = r.ReadObject(obj.Payload)
		require.NoError(t, err)
		assert.Len(t, obj.Payload, 70<<10, "grown to fit")
		grown := obj.Payload

		obj, err = r.ReadObject(grown)
		require.NoError(t, err)
		assert.Equal(t, "third", string(obj.Payload))
		assert.Equal(t, &grown[0], &obj.Payload[0], "the grown storage is reused")
		assert.Equal(t, props, obj.Properties)

		// Too large: the object stays current.
		obj, err = r.ReadObject(obj.Payload)
		require.ErrorIs(t, err, ErrObjectTooLarge)
		assert.Equal(t, uint64(3), obj.Location.Object)
		assert.Nil(t, obj.Payload)
		assert.Equal(t, uint64(len(big)), r.PayloadLen())
		var out bytes.Buffer
		n, err := r.WriteTo(&out)
		require.NoError(t, err)
		assert.Equal(t, int64(len(big)), n)
		assert.Equal(t, big, out.Bytes())
		_, err = r.Read(make([]byte, 1))
		assert.Equal(t, io.EOF, err, "WriteTo moved the whole payload")

		// Too large again, skipped by the next read.
		_, err = r.ReadObject(nil)
		require.ErrorIs(t, err, ErrObjectTooLarge)
		obj, err = r.ReadObject(nil)
		require.NoError(t, err)
		assert.Equal(t, "last", string(obj.Payload))
		assert.Equal(t, uint64(5), obj.Location.Object)
		_, err = r.ReadObject(nil)
		assert.Equal(t, io.EOF, err)
	})
}

// TestSubgroupReaderWriteToPartial: WriteTo after part of a payload was
// read moves the rest, and io.Copy uses it.
func TestSubgroupReaderWriteToPartial(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		lt := subscribeTrackOver(t, overPipe(false), wire.Params{}, nil, nil)
		payload := bytes.Repeat([]byte("0123456789"), 10<<10)
		w := lt.track.OpenSubgroup(0, 0, SubgroupOptions{})
		go func() {
			assert.NoError(t, writeObject(w, 0, nil, payload))
			assert.NoError(t, writeObject(w, 1, nil, []byte("next")))
			assert.NoError(t, w.Close())
		}()
		r, err := lt.sub.AcceptSubgroup(lt.ctx)
		require.NoError(t, err)
		obj, err := r.Next()
		require.NoError(t, err)
		assert.Nil(t, obj.Payload)
		head := make([]byte, 5)
		_, err = io.ReadFull(r, head)
		require.NoError(t, err)
		var rest bytes.Buffer
		n, err := io.Copy(&rest, r)
		require.NoError(t, err)
		assert.Equal(t, int64(len(payload)-5), n)
		assert.Equal(t, payload, append(head, rest.Bytes()...))
		obj, err = r.ReadObject(nil)
		require.NoError(t, err)
		assert.Equal(t, "next", string(obj.Payload))
	})
}

// TestDatagramReceiveAllocs: a parsed datagram, routed to its
// subscription as the session's datagram loop does, reaches ReadDatagram
// without an allocation of this library; its payload is the buffer it was
// parsed from (the transport's, here the test's), handed over as is. The
// datagrams do not pass through the Pipe, which only carries the session.
func TestDatagramReceiveAllocs(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, nil)
		sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 3)
		ctx := t.Context()
		payload := []byte("datagram")
		d := wire.ObjectDatagram{TrackAlias: 3, GroupID: 1, DefaultPriority: true, Payload: payload}
		allocs := testing.AllocsPerRun(200, func() {
			d.ObjectID++
			s.routeDatagram(d)
			obj, err := sub.ReadDatagram(ctx)
			if err != nil || obj.Location.Object != d.ObjectID {
				t.Fatalf("datagram %d: %v, %v", d.ObjectID, obj.Location, err)
			}
			if &obj.Payload[0] != &payload[0] {
				t.Fatal("the payload was copied")
			}
		})
		assert.Zero(t, allocs)
	})
}

// TestSubgroupReaderAllocs: reading whole objects into a reused buffer,
// or forwarding payloads with WriteTo, allocates nothing per object. The
// stream is a Pipe's, whose reads allocate nothing either: every
// allocation counted would be the reader's.
func TestSubgroupReaderAllocs(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := pipeClientSession(t, transport.PipeConfig{}, nil)
		sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 3)
		payloads := make([][]byte, 500)
		for i := range payloads {
			payloads[i] = bytes.Repeat([]byte{byte(i)}, 100)
		}
		str := fp.openSubgroup(3, 1, payloads...)
		require.NoError(t, str.Close())
		r, err := sub.AcceptSubgroup(t.Context())
		require.NoError(t, err)
		var buf []byte
		next := 0
		read := func() {
			obj, err := r.ReadObject(buf)
			if err != nil || !bytes.Equal(obj.Payload, payloads[next]) {
				t.Fatalf("object %d: %v %v", next, obj.Location, err)
			}
			buf = obj.Payload
			next++
		}
		read()
		assert.Zero(t, testing.AllocsPerRun(200, read), "ReadObject")
		forward := func() {
			if _, err := r.Next(); err != nil {
				t.Fatalf("object %d: %v", next, err)
			}
			n, err := r.WriteTo(io.Discard)
			if err != nil || n != 100 {
				t.Fatalf("object %d: %d bytes, %v", next, n, err)
			}
			next++
		}
		assert.Zero(t, testing.AllocsPerRun(200, forward), "Next and WriteTo")
	})
}
