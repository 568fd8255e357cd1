package moqt

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// A subgroup stream read to its end gives its read buffer back for the
// next stream, whose objects arrive whole and in order all the same.
func TestSubgroupReaderReleasesBuffer(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		lt := subscribeTrackOver(t, connect, wire.Params{}, nil, nil)
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

// An object's header, encoded once for the streams that are in the same
// state, still reaches each stream right: two subscribers from the start
// share it, one that joined mid-subgroup gets its own.
func TestSubgroupSharedHeader(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		track, cfg, served := newServedTrack(t, testTrack, nil)
		first := newPipePair(t, transport.PipeConfig{}, cfg, nil)
		ctx := testCtx(t, 30*time.Second)
		var subs []*Subscription
		subscribe := func(p *pair) {
			sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			<-served
			subs = append(subs, sub)
		}
		subscribe(first)
		subscribe(first.another(t, nil))
		w := track.OpenSubgroup(0, 0, SubgroupOptions{})
		write := func(id uint64) {
			require.NoError(t, w.WriteObject(Object{Location: wire.Location{Object: id}, Payload: fmt.Appendf(nil, "o%d", id)}))
		}
		write(0)
		write(1)
		subscribe(first.another(t, nil)) // joins at object 2
		for id := range uint64(3) {
			write(2 + id)
		}
		require.NoError(t, w.Close())
		for i, sub := range subs {
			from := uint64(0)
			if i == 2 {
				from = 2
			}
			r, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err)
			for id := from; id < 5; id++ {
				obj, err := r.ReadObject(nil)
				require.NoError(t, err, "subscriber %d", i)
				assert.Equal(t, id, obj.Location.Object, "subscriber %d", i)
				assert.Equal(t, fmt.Sprintf("o%d", id), string(obj.Payload))
			}
			if i < 2 { // the joiner's stream may end with a reset (§11.3.2)
				_, err = r.ReadObject(nil)
				assert.ErrorIs(t, err, io.EOF, "subscriber %d", i)
			}
		}
	})
}
