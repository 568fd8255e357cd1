package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTour runs the README's demo end to end, over both transports.
func TestTour(t *testing.T) {
	require.NoError(t, run())
}
