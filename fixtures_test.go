package moqt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// Fixtures shared by the package's tests: the setup most of them repeat.
// Connecting sessions is in integration_test.go (real transports),
// session_pipe_test.go (in memory) and fakepeer_test.go (a fake peer).

// newServedTrack makes a LocalTrack named name with props and a server
// Config whose Handler accepts every SUBSCRIBE to it, handing each
// ServedSubscription to served (trackServer).
func newServedTrack(t *testing.T, name wire.FullTrackName, props wire.KVList) (*LocalTrack, *Config, chan *ServedSubscription) {
	t.Helper()
	track, err := NewLocalTrack(name, props)
	require.NoError(t, err)
	cfg, served := trackServer(t, track)
	return track, cfg, served
}

// testCtx is a context that ends after d or with the test, whichever
// comes first: the bound on a test's waits.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
