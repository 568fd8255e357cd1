// Package e2e runs the library as its users do: examples/relay, a
// publisher and subscribers as separate processes on 127.0.0.1, over raw
// QUIC and WebTransport, and checks that every reader got every object it
// was promised, exactly once, with the right final status.
//
// The programs are pub (a publisher that announces its namespace or
// PUBLISHes its track, writes groups of objects at a steady pace, then
// ends the track and exits at once) and sub (a subscriber that may find
// the namespace first, may join with a fill, or FETCHes a range). Each
// prints one line per event; the test reads them. The package holds the
// test only; its programs are in pub/ and sub/.
package e2e
