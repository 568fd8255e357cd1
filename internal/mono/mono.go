// Package mono reads the monotonic clock as nanoseconds since the process
// began: an int64 that fits in an atomic and costs half of time.Now, which
// reads the wall clock too. The data path reads it for every object.
package mono

import "time"

// epoch anchors the readings.
var epoch = time.Now()

// bubbleEpoch anchors them on the fake clock of a testing/synctest bubble,
// which starts at 2000-01-01 UTC and has no monotonic reading: measured
// from epoch, its times would be negative, and 0 means "none" to callers.
var bubbleEpoch = time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)

// Now is the time since epoch on the monotonic clock (since bubbleEpoch in
// a synctest bubble). time.Since reads only the monotonic clock. In a
// bubble it measures the fake wall clock from epoch's real one, years
// back: a negative duration, which the monotonic clock never gives.
func Now() int64 {
	if d := time.Since(epoch); d >= 0 {
		return int64(d)
	}
	return int64(time.Now().Sub(bubbleEpoch))
}

// At is t as a Now reading, so that a deadline given as a time.Time
// compares with Now's readings, in a bubble too.
func At(t time.Time) int64 {
	if time.Since(epoch) >= 0 {
		return int64(t.Sub(epoch))
	}
	return int64(t.Sub(bubbleEpoch))
}
