package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestCutStreamKeepsWrittenObjects: a stream cut short because its
// subscription joined mid-subgroup (§11.3.2) ends in a reset that keeps
// what was written. With RESET_STREAM_AT the reset goes at once, its
// reliable size covering the objects; without it the reset waits
// cutLinger, so that a subscriber reading at pace takes the objects
// first. Either way the subscriber reads every object it was sent, then
// the reset.
func TestCutStreamKeepsWrittenObjects(t *testing.T) {
	for _, c := range []struct {
		name     string
		reliable bool
		wait     time.Duration // from the cut to the reset
	}{
		{"RESET_STREAM_AT", true, 0},
		{"linger", false, cutLinger},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				track, cfg, served := newServedTrack(t, testTrack, nil)
				p := newPipePair(t, transport.PipeConfig{ReliableReset: c.reliable}, cfg, nil)
				require.Equal(t, c.reliable, p.server.conn.ReliableReset())
				ctx := testCtx(t, time.Minute)

				w := track.OpenSubgroup(0, 0, SubgroupOptions{})
				writeObjects(t, ctx, w, 0, 5, fixedSize(64<<10))
				sub, err := p.client.Subscribe(ctx, testTrack, wire.Params{
					LocationFilter: wire.Some(wire.StartFilter(wire.Location{Group: 0, Object: 1}))})
				require.NoError(t, err)
				<-served
				writeObjects(t, ctx, w, 5, 10, fixedSize(64<<10))
				r, err := sub.AcceptSubgroup(ctx)
				require.NoError(t, err)

				require.NoError(t, w.Close()) // the subscription lacks objects 1 to 4: a cut
				cut := time.Now()
				// The subscriber reads only just before the reset is due: a
				// plain reset sent earlier would have discarded the objects.
				advance(max(c.wait-time.Millisecond, 0))
				ids, _, err := readAllN(r, 5)
				require.NoError(t, err, "the objects written before the cut are read")
				assert.Equal(t, []uint64{5, 6, 7, 8, 9}, ids)
				_, err = r.Next()
				requireReset(t, err, wire.ResetCancelled)
				assert.Equal(t, c.wait, time.Since(cut), "when the reset came")
			})
		})
	}
}
