package relay

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/moqttest"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Relay tests over the in-memory transport, in synctest bubbles: sessions
// from internal/moqttest, everything else through the public API.

// TestPipeRelayForwards carries a track from an announcing publisher
// through the relay to two subscribers over pipes, raw QUIC's and
// WebTransport's imitations, and checks every object each receives.
func TestPipeRelayForwards(t *testing.T) {
	for _, wt := range []bool{false, true} {
		t.Run(fmt.Sprintf("webtransport=%v", wt), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { pipeRelayForwards(t, transport.PipeConfig{WebTransport: wt}) })
		})
	}
}

func pipeRelayForwards(t *testing.T, pc transport.PipeConfig) {
	ctx := t.Context()
	discard := slog.New(slog.DiscardHandler)
	r := New(Config{Authorize: AllowAll, Logger: discard})
	t.Cleanup(func() { _ = r.Close() }) // after the sessions' cleanups
	relayCfg := &moqt.Config{Handler: r}

	name := wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam"), Name: []byte("video")}
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	upstream := make(chan *moqt.ServedSubscription, 4)
	pub, _ := moqttest.Pair(t, pc, relayCfg, &moqt.Config{Handler: moqt.HandlerFunc(func(req moqt.Request) {
		sr, ok := req.(*moqt.SubscribeRequest)
		if !ok || !sr.Track.Equal(name) {
			moqt.DefaultHandler.ServeMOQT(req)
			return
		}
		if ss, err := track.Accept(sr, moqt.AcceptOptions{}); err == nil {
			upstream <- ss
		}
	})})
	_, err = pub.PublishNamespace(ctx, name.Namespace, wire.Params{})
	require.NoError(t, err)
	synctest.Wait() // the relay answers before it routes the namespace

	var subs []*moqt.Subscription
	for range 2 {
		c, _ := moqttest.Pair(t, pc, relayCfg, nil)
		sub, err := c.Subscribe(ctx, name, wire.Params{})
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	synctest.Wait()
	assert.Len(t, upstream, 1, "one upstream subscription shared by both subscribers")

	const groups, objects = 3, 4
	for g := range uint64(groups) {
		w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
		for o := range uint64(objects) {
			require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: pipePayload(g, o)}))
		}
		require.NoError(t, w.Close())
	}
	want := map[uint64][]uint64{}
	for g := range uint64(groups) {
		for o := range uint64(objects) {
			want[g] = append(want[g], o)
		}
	}
	for i, sub := range subs {
		got := map[uint64][]uint64{} // objects by group, in arrival order
		for range groups {
			sr, err := sub.AcceptSubgroup(ctx)
			require.NoError(t, err, "subscriber %d", i)
			for {
				h, err := sr.Next()
				if err == io.EOF {
					break // the FIN: the subgroup is complete
				}
				require.NoError(t, err)
				p, err := io.ReadAll(sr)
				require.NoError(t, err)
				assert.Equal(t, pipePayload(h.Location.Group, h.Location.Object), p)
				got[h.Location.Group] = append(got[h.Location.Group], h.Location.Object)
			}
		}
		assert.Equal(t, want, got, "subscriber %d: every object, none extra, in order", i)
	}
}

// pipePayload is object (g, o)'s payload.
func pipePayload(g, o uint64) []byte { return fmt.Appendf(nil, "g%d-o%d", g, o) }
