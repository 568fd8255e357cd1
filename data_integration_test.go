package moqt

import (
	"bytes"
	"io"
	"testing"
	"time"

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

// TestDataCutStreamAtFullWindow: a stream that joined mid-subgroup is cut
// at the subgroup's end while the subscriber, reading nothing yet, has
// let through less than was written: the last bytes may sit in quic-go
// unsent. A reliable size over them would give the reset a final size
// past the subscriber's window, which closes its connection with
// FLOW_CONTROL_ERROR (RFC 9000 §4.5); the reset keeps what was written
// another way (cutLinger), and the subscriber reads every object, then
// the reset, its session intact. The streams' sizes sweep the window's
// edge (16 KiB, and the 4 KiB the session's header read lets through), so
// that the last bytes of some of them wait for credit.
func TestDataCutStreamAtFullWindow(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			track, cfg, served := newServedTrack(t, testTrack, nil)
			p := newPair(t, tr.scheme, cfg, &Config{StreamReceiveWindow: 16 << 10})
			ctx := testCtx(t, time.Minute)
			for g, size := uint64(0), 16<<10; size < 28<<10; g, size = g+1, size+300 {
				w := track.OpenSubgroup(g, 0, SubgroupOptions{})
				writeObjects(t, ctx, w, 0, 2, fixedSize(10))
				sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{
					LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: g, Object: 1}))})
				require.NoError(t, err)
				<-served
				// In two objects: the write of one larger than the send
				// queue's window would wait for the subscriber.
				writeObjects(t, ctx, w, 2, 4, fixedSize(size/2))
				r, err := sub.AcceptSubgroup(ctx)
				require.NoError(t, err)
				require.NoError(t, w.Close()) // the subscription lacks object 1: a cut
				ids, payloads, err := readAllN(r, 2)
				require.NoError(t, err, "the objects written before the cut are read (%d bytes)", size)
				require.Equal(t, []uint64{2, 3}, ids)
				require.Len(t, payloads[1], size/2)
				_, err = r.Next()
				requireReset(t, err, wire.ResetCancelled)
				require.NoError(t, p.client.Context().Err(), "the subscriber's session outlives the reset (%d bytes)", size)
				require.NoError(t, sub.Close())
			}
		})
	}
}
