package moqt

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestReadObjectInterleavedLargeObjects: a publisher sends three groups'
// streams at once, each with an object too large to be queued beside
// another (as moqt pub's 1 MiB objects through a relay over WebTransport,
// which sends every stream round-robin). ReadObject reads the first one,
// and the other two streams' data fills the connection's flow-control
// window while the first object's rest waits behind it. The waiting
// streams must be read, or nothing moves: before, ReadObject left them
// unread and waited for good (over a lossy path the publisher then cut
// the subscriber off with TOO_FAR_BEHIND, "no data taken"). Their objects
// come whole, each once.
func TestReadObjectInterleavedLargeObjects(t *testing.T) {
	const (
		window = 256 << 10 // per stream; the connection's is one and a half
		size   = 640 << 10 // two do not fit in arrivalBytes
		first  = 200 << 10 // of the first stream, before the others
	)
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				pc := transport.PipeConfig{WebTransport: tr.wt, StreamWindow: window, ConnectionWindow: window * 3 / 2}
				s, fp := pipeClientSession(t, pc, &Config{ReadStallTimeout: time.Minute})
				sub, _ := subscribeFakeWith(t, s, fp, wire.Params{}, 1)
				got := make(chan Object, 3)
				go func() {
					for range 3 {
						obj, err := sub.ReadObject(fakeCtx(t))
						if err != nil {
							close(got)
							return
						}
						obj.Payload = bytes.Clone(obj.Payload) // the next call reuses it
						got <- obj
					}
				}()

				payloads := make([][]byte, 3)
				streams := make([][]byte, 3)
				strs := make([]transport.SendStream, 3)
				for g := range payloads {
					payloads[g] = bytes.Repeat([]byte{byte('a' + g)}, size)
					streams[g] = subgroupBytes(t, 1, uint64(g), payloads[g])
					var err error
					strs[g], err = fp.conn.OpenUniStreamSync(fakeCtx(t))
					require.NoError(t, err)
				}
				// The first object begins; the next two streams then fill
				// the connection's window, waiting unread, while more of
				// theirs waits to be sent, as the first object's rest does.
				_, err := strs[0].Write(streams[0][:first])
				require.NoError(t, err)
				synctest.Wait()
				wrote := make([]<-chan error, 3)
				for _, g := range []int{1, 2, 0} {
					from := 0
					if g == 0 {
						from = first
					}
					wrote[g] = goErr(func() error {
						if _, err := strs[g].Write(streams[g][from:]); err != nil {
							return err
						}
						return strs[g].Close()
					})
					synctest.Wait()
				}
				// Nothing more is sent: what ReadObject returns, it has.
				seen := map[uint64]bool{}
				for range 3 {
					select {
					case obj, ok := <-got:
						require.True(t, ok, "ReadObject failed")
						assert.False(t, seen[obj.Location.Group], "group %d twice", obj.Location.Group)
						seen[obj.Location.Group] = true
						assert.True(t, bytes.Equal(payloads[obj.Location.Group], obj.Payload), "group %d's payload", obj.Location.Group)
					default:
						require.FailNow(t, "ReadObject waits for an object whose rest the connection's window keeps out, full of the streams it left unread",
							"%d of 3 objects read", len(seen))
					}
				}
				for _, w := range wrote {
					require.NoError(t, <-w)
				}
				a := &sub.arrival
				a.mu.Lock()
				assert.Zero(t, a.reading, "bytes of objects still being read")
				assert.LessOrEqual(t, a.bytes, size, "bytes held: the object returned last")
				a.mu.Unlock()
				assert.NoError(t, s.Context().Err())
			})
		})
	}
}
