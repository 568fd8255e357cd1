//go:build race

package main

// raceEnabled builds the command with the race detector too.
const raceEnabled = true
