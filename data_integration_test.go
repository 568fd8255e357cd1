package moqt

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Objects over loopback QUIC and WebTransport where the transport carries
// something the Pipes only imitate: QUIC DATAGRAM frames, and an object far
// larger than every flow-control window. The rest of the data path is
// tested over Pipes (data_end_to_end_test.go and the other data_* files).

// TestDataDatagrams sends objects as datagrams, including a status one.
func TestDataDatagrams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			lt := subscribeTrack(t, tr.scheme, wire.Params{}, nil, nil)
			track, sub, ctx := lt.track, lt.sub, lt.ctx
			require.NoError(t, track.WriteDatagram(Object{Location: wire.Location{Group: 3, Object: 1}, Priority: wire.Some[uint8](4), Payload: []byte("dgram")}))
			require.NoError(t, track.WriteDatagram(Object{Location: wire.Location{Group: 3, Object: 2}, Status: wire.ObjectEndOfGroup}))
			d, err := sub.ReadDatagram(ctx)
			require.NoError(t, err)
			assert.Equal(t, wire.Location{Group: 3, Object: 1}, d.Location)
			assert.Equal(t, wire.Some[uint8](4), d.Priority)
			assert.Equal(t, "dgram", string(d.Payload))
			assert.True(t, d.Datagram)
			d, err = sub.ReadDatagram(ctx)
			require.NoError(t, err)
			assert.Equal(t, wire.ObjectEndOfGroup, d.Status)
		})
	}
}

// TestDataLargeObjectStreams writes a 10 MB object as it is produced and
// reads its first bytes before the rest exists (§3.1: incomplete objects
// are sent as they become available).
func TestDataLargeObjectStreams(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			lt := subscribeTrack(t, tr.scheme, wire.Params{}, nil, nil)
			track, sub, ctx := lt.track, lt.sub, lt.ctx
			const size, chunk = 10 << 20, 64 << 10
			payload := make([]byte, size)
			for i := range payload {
				payload[i] = byte(i * 7)
			}
			w := track.OpenSubgroup(0, 0, SubgroupOptions{})
			ow, err := w.BeginObject(0, size, nil)
			require.NoError(t, err)
			_, err = ow.Write(payload[:chunk])
			require.NoError(t, err)
			// Another object cannot start while this one is incomplete.
			assert.Error(t, writeObject(w, 1, nil, nil))

			r, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err)
			h, err := r.Next()
			require.NoError(t, err)
			assert.Nil(t, h.Payload)
			assert.Equal(t, uint64(size), r.PayloadLen())
			head := make([]byte, chunk)
			_, err = io.ReadFull(r, head)
			require.NoError(t, err, "the first chunk is readable before the object is complete")
			assert.Equal(t, payload[:chunk], head)

			writeErr := make(chan error, 1)
			go func() {
				for off := chunk; off < size; off += chunk {
					if _, err := ow.Write(payload[off : off+chunk]); err != nil {
						writeErr <- err
						return
					}
				}
				if err := ow.Close(); err != nil {
					writeErr <- err
					return
				}
				writeErr <- w.Close()
			}()
			rest, err := io.ReadAll(r)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(payload[chunk:], rest))
			require.NoError(t, <-writeErr)
			_, err = r.Next()
			assert.Equal(t, io.EOF, err)
		})
	}
}
