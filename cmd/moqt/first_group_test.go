package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSubFirstGroupOfBurst: subscribers waiting on a track with nothing
// published yet get a first burst of several groups, which may reach them
// later group first, in order from group 0. The publisher ends the track
// right after, so the relay lets it go while its objects are still on
// their way, and refuses the FETCH that would have placed the first group
// (it failed about 4 runs in 5 when a refusal was taken for "no earlier
// groups").
func TestSubFirstGroupOfBurst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	pub := r.client(t, "pub", feedStdin, "pub", "-lines", "-group-objects", "5", r.url("moqt"), "burst", "lines")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "waiting for a subscriber")
	subs := []*proc{
		r.client(t, "sub1", nil, "sub", "-v", "-lines", r.url("moqt"), "burst", "lines"),
		r.client(t, "sub2", nil, "sub", "-v", "-lines", r.url("https"), "burst", "lines"),
	}
	for _, s := range subs {
		s.waitErr(t, ctx, "subscribed to burst lines")
	}
	pub.waitErr(t, ctx, "reading stdin")
	in.write(t, 23)                  // groups 0-3 whole, group 4 three lines, at once
	require.NoError(t, in.w.Close()) // the track ends at once: its FETCH may be refused
	require.NoError(t, pub.wait(t, ctx), "pub's exit")
	for _, s := range subs {
		require.NoError(t, s.wait(t, ctx), "%s's exit at the end of the track", s.name)
		assert.Equal(t, wantLines(0, 22), string(s.output()), "%s: every object, once, in order\n%s", s.name, s.stderr())
	}
}
