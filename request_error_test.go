package moqt

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// longReason is an application's error text longer than a Reason Phrase
// may be (§8.5), with multi-byte characters across the cut.
var longReason = strings.Repeat("é", 1500)

// requireFitted checks a received Reason Phrase: longReason cut to the
// limit at a character boundary.
func requireFitted(t *testing.T, got string) {
	t.Helper()
	assert.LessOrEqual(t, len(got), wire.MaxReasonLen)
	assert.Greater(t, len(got), wire.MaxReasonLen-utf8.UTFMax)
	assert.True(t, utf8.ValidString(got), "cut at a character boundary")
	assert.True(t, strings.HasPrefix(longReason, got))
}

// expectFittedDone reads a PUBLISH_DONE with code and longReason cut.
func expectFittedDone(t *testing.T, fs *fakeStream, code wire.PublishDoneCode) {
	t.Helper()
	done := expect[*wire.PublishDone](fs)
	assert.Equal(t, code, done.StatusCode)
	requireFitted(t, done.ErrorReason)
}

func TestFitReason(t *testing.T) {
	assert.Equal(t, "short", wire.FitReason("short"))
	ascii := strings.Repeat("x", 2000)
	assert.Equal(t, ascii[:wire.MaxReasonLen], wire.FitReason(ascii))
	requireFitted(t, wire.FitReason(longReason))
}

// A refusal, an update's refusal and a PUBLISH_DONE whose reason is too
// long still go, with the reason cut: the request must get its one answer
// (§3.1, §9.5), and the subscription its PUBLISH_DONE (§9.5.1, §9.9).
func TestLongReasonsAreCut(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			got := make(chan error, 1)
			h := HandlerFunc(func(r Request) {
				got <- r.(*SubscribeRequest).Reject(wire.ReqDoesNotExist, longReason)
			})
			_, fp := serverSession(t, &Config{Handler: h})
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			require.NoError(t, recvOrFail(t, got))
			m := expect[*wire.RequestError](fs)
			assert.Equal(t, wire.ReqDoesNotExist, m.ErrorCode)
			requireFitted(t, m.ErrorReason)
		})
	})
	t.Run("update", func(t *testing.T) {
		forDrafts(t, newerDrafts, func(t *testing.T) {
			track, cfg, _ := newServedTrack(t, trackA, nil)
			cfg.Handler = HandlerFunc(func(r Request) {
				_, _ = track.Accept(r.(*SubscribeRequest), AcceptOptions{OnUpdate: func(*ServedSubscription, *wire.Params) error {
					return errors.New(longReason)
				}})
			})
			_, fp := serverSession(t, cfg)
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			fs.send(&wire.RequestUpdate{RequestID: 2, Parameters: wire.Params{SubscriberPriority: wire.Some[uint8](3)}})
			requireFitted(t, expect[*wire.RequestError](fs).ErrorReason)
			expectFittedDone(t, fs, wire.DoneUpdateFailed)
		})
	})
	t.Run("done", func(t *testing.T) {
		forDrafts(t, sharedDrafts, func(t *testing.T) {
			_, cfg, served := newServedTrack(t, trackA, nil)
			_, fp := serverSession(t, cfg)
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.SubscribeOK](fs)
			ss := recvOrFail(t, served)
			require.NoError(t, ss.End(wire.DoneTrackEnded, longReason))
			expectFittedDone(t, fs, wire.DoneTrackEnded)
		})
	})
}

// assertLoadRetry checks the Retry Interval of an EXCESSIVE_LOAD refusal
// by one of the library's limits: about a second, spread at random (§12.3,
// §9.4.2).
func assertLoadRetry(t *testing.T, retry uint64) {
	t.Helper()
	assert.GreaterOrEqual(t, retry, uint64(501))
	assert.LessOrEqual(t, retry, uint64(1501))
}

func TestLoadRetryInterval(t *testing.T) {
	seen := map[uint64]bool{}
	for range 200 {
		r := LoadRetryInterval()
		assertLoadRetry(t, r)
		seen[r] = true
	}
	assert.Greater(t, len(seen), 20, "spread at random")
}
