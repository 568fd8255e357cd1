package moqt

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
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
