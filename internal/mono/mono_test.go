package mono

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestNow: readings never go back, At places a time on the same scale,
// and in a synctest bubble the readings are positive (0 means none to
// callers) and follow the fake clock.
func TestNow(t *testing.T) {
	a := Now()
	at := At(time.Now())
	b := Now()
	assert.LessOrEqual(t, a, at)
	assert.LessOrEqual(t, at, b)
	now := time.Now()
	assert.Equal(t, int64(time.Second), At(now.Add(time.Second))-At(now), "At keeps durations")

	synctest.Test(t, func(t *testing.T) {
		start := Now()
		assert.Positive(t, start)
		assert.Equal(t, start, At(time.Now()))
		time.Sleep(time.Minute)
		assert.Equal(t, int64(time.Minute), Now()-start)
	})
}
