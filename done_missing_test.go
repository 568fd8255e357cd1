package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestDoneLingerReportsMissingStreams: PUBLISH_DONE TRACK_ENDED counts
// three data streams and one arrives. Once Config.DoneLinger has passed,
// ReadObject yields the stream's object, then an entry whose Incomplete
// wraps ErrStreamsMissing (two of three), then the *DoneError, whose
// Missing says the same; AcceptSubgroup's end and Err do too. It used to
// end with the bare TRACK_ENDED, as if the track had come whole. When
// every stream comes, nothing is reported missing.
func TestDoneLingerReportsMissingStreams(t *testing.T) {
	const linger = 3 * time.Second
	for _, tc := range []struct {
		name    string
		read    string // ReadObject or AcceptSubgroup
		counted uint64 // PUBLISH_DONE's Stream Count; one stream comes
	}{
		{"ReadObject", "ReadObject", 3},
		{"AcceptSubgroup", "AcceptSubgroup", 3},
		{"ReadObject whole", "ReadObject", 1},
		{"AcceptSubgroup whole", "AcceptSubgroup", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := pipeClientSession(t, transport.PipeConfig{}, &Config{DoneLinger: linger})
				got, req := subscribeAgainstFake(t, s, fp)
				req.send(&wire.SubscribeOK{TrackAlias: 2})
				sub := recvOrFail(t, got)
				require.NoError(t, fp.openSubgroup(2, 0, []byte("only")).Close())
				req.send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: tc.counted})
				req.fin()
				start := time.Now()
				ctx := fakeCtx(t)
				var end error
				switch tc.read {
				case "ReadObject":
					obj, err := sub.ReadObject(ctx)
					require.NoError(t, err)
					require.NoError(t, obj.Incomplete)
					assert.Equal(t, []byte("only"), obj.Payload)
					obj, end = sub.ReadObject(ctx)
					if tc.counted > 1 {
						require.NoError(t, end, "the missing streams are told in band, before the end")
						require.ErrorIs(t, obj.Incomplete, ErrStreamsMissing)
						assert.Contains(t, obj.Incomplete.Error(), "2 of the 3 data streams")
						assert.Equal(t, Object{Incomplete: obj.Incomplete}, obj, "the entry only reports")
						assert.Equal(t, linger, time.Since(start), "told when the linger ends")
						_, end = sub.ReadObject(ctx)
					}
				case "AcceptSubgroup":
					r, err := sub.AcceptSubgroup(ctx)
					require.NoError(t, err)
					_, payloads := readSubgroup(t, r)
					assert.Equal(t, [][]byte{[]byte("only")}, payloads)
					_, end = sub.AcceptSubgroup(ctx)
				}
				var de *DoneError
				require.ErrorAs(t, end, &de)
				assert.Equal(t, wire.DoneTrackEnded, de.Code)
				assert.Equal(t, tc.counted, de.StreamCount)
				if tc.counted == 1 {
					assert.Zero(t, de.Missing)
					assert.NotErrorIs(t, end, ErrStreamsMissing)
					assert.NotErrorIs(t, sub.Err(), ErrStreamsMissing)
					return
				}
				assert.Equal(t, uint64(2), de.Missing)
				assert.ErrorIs(t, end, ErrStreamsMissing)
				assert.ErrorIs(t, sub.Err(), ErrStreamsMissing, "Err reports them too")
				assert.Contains(t, end.Error(), "2 of its 3 data streams never arrived")
			})
		})
	}
}
