package moqt

import (
	"errors"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"

	"github.com/moqt-go/moqt/wire"
)

// What a subscription held is released (whenTerminated) before Done is
// closed: whoever waits on Done may subscribe to the track again at once,
// which a draft-18 track claim still held would refuse.
func TestSubStateReleasesBeforeDone(t *testing.T) {
	s := newSubState(stateEstablished)
	closedAtRelease := true
	s.whenTerminated(func() {
		select {
		case <-s.ended():
		default:
			closedAtRelease = false
		}
	})
	assert.True(t, s.terminate(errors.New("ended")))
	assert.False(t, closedAtRelease, "Done was closed before the release ran")
	select {
	case <-s.ended():
	default:
		t.Fatal("Done not closed once Terminated")
	}
}

// The readers woken by the end of the data plane return the
// subscription's end, never nothing: a stream counted by PUBLISH_DONE can
// end the data plane (noteStream) just before the handler of that
// PUBLISH_DONE records the end on another goroutine. AcceptSubgroup
// returned (nil, nil) then, which crashed the moqt command's reader.
func TestDataPlaneEndWaitsForTheSubscriptionsEnd(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		s, fp := clientSession(t, nil)
		sub, _, _ := establish(t, s, fp, trackA, wire.Params{}, &wire.SubscribeOK{TrackAlias: 1})
		type result struct {
			r   *SubgroupReader
			err error
		}
		got := make(chan result, 1)
		go func() {
			r, err := sub.AcceptSubgroup(fakeCtx(t))
			got <- result{r, err}
		}()
		synctest.Wait()
		sub.endData() // the data plane ends first
		synctest.Wait()
		select {
		case res := <-got:
			t.Fatalf("returned before the subscription ended: %v, %v", res.r, res.err)
		default:
		}
		done := &DoneError{Code: wire.DoneTrackEnded}
		sub.terminate(done)
		res := recvOrFail(t, got)
		assert.Nil(t, res.r)
		assert.ErrorIs(t, res.err, done)
	})
}
