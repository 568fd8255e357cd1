package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestC042_CacheKeepsEveryObjectField: a FETCH answered from a track's
// cache gives back every field of §11.1.1 the objects were published with:
// Subgroup ID, Publisher Priority, Object Properties, payload, and the
// Datagram Forwarding Preference (§7.1: a cache stores all of them). The
// End of Group status object is kept too, and answered as §7.1 allows in
// its equivalent form on a fetch stream: the Locations from it on do not
// exist, so the stream carries nothing for them (§11.4.1.2).
func TestC042_CacheKeepsEveryObjectField(t *testing.T) {
	eachDraft(t, sharedDrafts, func(t *testing.T) {
		forTransports(t, func(t *testing.T, connect connector) {
			track, p := fetchTrack(t, connect, CacheLimits{Objects: 100})
			props := propsBlock(t, wire.KVList{{Type: 0x10, Value: 9}})
			want := []Object{
				{Location: wire.Location{Group: 0, Object: 0}, SubgroupID: 3, Priority: wire.Some[uint8](7), Properties: props, Payload: []byte("zero")},
				{Location: wire.Location{Group: 0, Object: 1}, SubgroupID: 3, Priority: wire.Some[uint8](7), Payload: []byte("one")},
				{Location: wire.Location{Group: 0, Object: 2}, SubgroupID: 3, Priority: wire.Some[uint8](7), Status: wire.ObjectEndOfGroup},
				{Location: wire.Location{Group: 1, Object: 0}, Priority: wire.Some[uint8](200), Properties: props, Payload: []byte("datagram"), Datagram: true},
			}
			w := track.OpenSubgroup(0, 3, SubgroupOptions{Priority: wire.Some[uint8](7), Properties: true})
			for _, o := range want[:3] {
				require.NoError(t, w.WriteObject(o))
			}
			require.NoError(t, w.Close())
			require.NoError(t, track.WriteDatagram(want[3]))

			ctx := testCtx(t, 30*time.Second)
			f, err := p.client.Fetch(ctx, testTrack, wire.Params{})
			require.NoError(t, err)
			got := readFetchAll(t, ctx, f)
			want = append(want[:2], want[3])
			require.Len(t, got, len(want), "entries: %v", locations(got))
			for i, o := range got {
				assert.Equal(t, want[i].Location, o.Location)
				assert.Equal(t, want[i].SubgroupID, o.SubgroupID, "Subgroup ID of %v", o.Location)
				assert.Equal(t, want[i].Priority, o.Priority, "Publisher Priority of %v", o.Location)
				assert.Equal(t, want[i].Properties, o.Properties, "Object Properties of %v", o.Location)
				assert.Equal(t, want[i].Payload, o.Payload, "payload of %v", o.Location)
				assert.Equal(t, want[i].Datagram, o.Datagram, "Forwarding Preference of %v", o.Location)
			}
		})
	})
}
