//go:build race

package e2e

// raceEnabled builds the programs with the race detector too.
const raceEnabled = true
