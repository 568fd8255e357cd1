package moqt

import (
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// A subgroup stream read to its end gives its read buffer back for the
// next stream, whose objects arrive whole and in order all the same.
func TestSubgroupReaderReleasesBuffer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			lt := subscribeTrack(t, tr.scheme, wire.Params{}, nil, nil)
			for g := range uint64(3) {
				w := lt.track.OpenSubgroup(g, 0, SubgroupOptions{})
				for i := range uint64(5) {
					require.NoError(t, w.WriteObject(Object{Location: wire.Location{Group: g, Object: i},
						Payload: fmt.Appendf(nil, "g%d o%d", g, i)}))
				}
				require.NoError(t, w.Close())
				r, err := lt.sub.AcceptSubgroup(lt.ctx)
				require.NoError(t, err)
				require.NotNil(t, r.br)
				for i := range uint64(5) {
					obj, err := r.ReadObject(nil)
					require.NoError(t, err)
					assert.Equal(t, wire.Location{Group: g, Object: i}, obj.Location)
					assert.Equal(t, fmt.Sprintf("g%d o%d", g, i), string(obj.Payload))
				}
				_, err = r.ReadObject(nil)
				require.ErrorIs(t, err, io.EOF)
				assert.Nil(t, r.br, "the buffer went back at the end")
				_, err = r.Read(make([]byte, 1))
				assert.ErrorIs(t, err, io.EOF, "an ended reader stays ended")
				_, err = r.Next()
				assert.ErrorIs(t, err, io.EOF)
			}
		})
	}
}

// A backlog keeps track of its storage as the drain takes bytes from the
// front and appends grow it, and a drained one keeps nothing.
func TestBacklogStorage(t *testing.T) {
	var q backlog
	q.append([]byte("abc"))
	require.NotNil(t, q.base)
	assert.Equal(t, "abc", string(q.buf))
	q.buf = q.buf[2:] // the drain wrote "ab"
	q.append([]byte("de"))
	assert.Equal(t, "cde", string(q.buf))
	big := make([]byte, 4096)
	q.append(big) // past the storage: new storage, with what was left
	assert.Equal(t, "cde", string(q.buf[:3]))
	assert.Equal(t, cap(q.base), cap(q.buf), "base follows the new storage")
	q.buf = q.buf[len(q.buf):]
	q.release()
	assert.Nil(t, q.buf)
	assert.Nil(t, q.base)
	q.append([]byte("f"))
	assert.Equal(t, "f", string(q.buf), "pooled storage starts empty")
	assert.Equal(t, q.buf[:0:cap(q.buf)], q.base[:0:cap(q.base)])
}
