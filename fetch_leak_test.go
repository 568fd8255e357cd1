package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/wire"
)

// A FETCH and a fill served from a track's cache, both waiting for an
// object whose publication began (a long FILL_TIMEOUT), hold nothing once
// the session closes: every goroutine and timer they started ends.
func TestServedFetchGoroutinesEnd(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	// Over a Pipe in a bubble: nothing waits on the network to end.
	inBubble(t, func(t *testing.T) {
		lt := pubTrack(t, wire.Opt[wire.Location]{})
		lt.SetCache(CacheLimits{Objects: 16})
		sg := lt.OpenSubgroup(0, 0, SubgroupOptions{})
		require.NoError(t, sg.WriteObject(pobj(0, 0, "a")))
		ow, err := sg.BeginObject(1, 10, nil)
		require.NoError(t, err)
		_, err = ow.Write([]byte("half"))
		require.NoError(t, err)
		func() {
			h, errs := fetchHandler(lt)
			ls, s, fp := serverSessionNoCleanup(t, &Config{Handler: h, FillTimeout: time.Hour})
			defer ls.srv.Close()
			fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
			expect[*wire.FetchOK](fs)
			d := fp.acceptPubFetch(false)
			_, err = d.next()
			require.NoError(t, err) // {0, 0}; then it waits for {0, 1}
			sub := fp.open(subscribeMsg(2, trackA, wire.Params{FillParameters: wholeTrack()}))
			expect[*wire.SubscribeOK](sub)
			fill := fp.acceptPubFetch(false)
			_, err = fill.next()
			require.NoError(t, err)
			// The fake finishes none of its streams: Close gives up on it.
			require.ErrorIs(t, s.Close(), ErrCloseTimeout)
			require.Error(t, recvOrFail(t, errs))
			fp.expectClose(wire.NoError)
			_ = fp.conn.CloseWithError(0, "")
		}()
		_ = ow.Close() // short: abandoned
		_ = sg.Close()
		// The goroutine synctest.Test runs the bubble from waits for this one.
		goleak.VerifyNone(t, ignore, goleak.IgnoreAnyFunction("testing/synctest.testingSynctestTest"))
	})
}
