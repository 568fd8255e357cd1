package moqt

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestSubscriptionGoaway: the publisher's GOAWAY on a subscription's
// request stream (§9.2: migrate that request alone) reaches the
// application, with its New Session URI, and leaves the subscription as it
// is: the subscriber re-issues the request and then cancels this one.
func TestSubscriptionGoaway(t *testing.T) {
	for _, uri := range []string{"moqt://y/", ""} {
		t.Run("uri="+uri, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := clientSession(t, nil)
				sub, fs, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
				select {
				case <-sub.GoingAway():
					t.Fatal("going away before any GOAWAY")
				default:
				}
				fs.send(&wire.Goaway{NewSessionURI: uri, Timeout: 10})
				synctest.Wait()
				select {
				case <-sub.GoingAway():
				default:
					t.Fatal("GoingAway not closed")
				}
				assert.Equal(t, uri, sub.GoawayURI())
				assert.NoError(t, sub.Err(), "the subscription goes on")
				select {
				case <-s.GoingAway():
					t.Fatal("a request's GOAWAY is not the session's")
				default:
				}
			})
		})
	}
}

// TestServedSubscriptionGoaway: a publisher moves one subscription with
// GOAWAY on its request stream (§9.2), its New Session URI and Timeout as
// given, once; at the Timeout, a subscription the subscriber did not
// cancel ends with PUBLISH_DONE GOING_AWAY. A URI over 8,192 bytes is
// refused before anything is sent.
func TestServedSubscriptionGoaway(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h, served := servedCh(AcceptOptions{})
		_, fp := serverSession(t, &Config{Handler: h})
		fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
		expect[*wire.SubscribeOK](fs)
		ss := recvOrFail(t, served)

		assert.Error(t, ss.Goaway(strings.Repeat("x", wire.MaxURILen+1), time.Second))
		assert.Error(t, ss.Goaway("", -time.Second))
		require.NoError(t, ss.Goaway("moqt://elsewhere/", time.Second))
		g := expect[*wire.Goaway](fs)
		assert.Equal(t, "moqt://elsewhere/", g.NewSessionURI)
		assert.Equal(t, uint64(1000), g.Timeout)
		assert.Error(t, ss.Goaway("", time.Second), "once")

		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, wire.DoneGoingAway, expect[*wire.PublishDone](fs).StatusCode)
	})
}
