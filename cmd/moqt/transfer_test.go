package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// binaryFile is a few hundred KB of noise.
func binaryFile() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 300_000+1234)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// textFile is lines of all sorts: empty ones, a CR before its newline,
// long and short, ending with a newline.
func textFile() []byte {
	var sb strings.Builder
	for i := range 3000 {
		switch i % 7 {
		case 0:
			sb.WriteString("\n")
		case 1:
			fmt.Fprintf(&sb, "line %d with a carriage return\r\n", i)
		case 2:
			fmt.Fprintf(&sb, "%s\n", strings.Repeat(fmt.Sprint(i), 200))
		default:
			fmt.Fprintf(&sb, "line %d\n", i)
		}
	}
	return []byte(sb.String())
}

// TestFileRoundTrip: a file piped through moqt pub → moqt relay → moqt sub
// arrives byte for byte, over raw QUIC and WebTransport: binary cut into
// objects by size, text one object a line (-lines on both ends), several
// groups each, so that groups travel on streams of their own and may arrive
// interleaved. The publisher starts first (it waits for a subscriber before
// reading) or the subscriber does (it waits for a publisher, and gets the
// track from its start); with -publish the track is offered by PUBLISH.
func TestFileRoundTrip(t *testing.T) {
	type mode struct {
		name     string
		file     []byte
		pubArgs  []string
		subArgs  []string
		subFirst bool
	}
	modes := []mode{
		{"binary", binaryFile(), []string{"-size", "8192", "-group-objects", "4"}, nil, false},
		{"lines", textFile(), []string{"-lines", "-group-objects", "100"}, []string{"-lines"}, true},
		{"lines-publish", textFile(), []string{"-lines", "-group-objects", "100", "-publish"}, []string{"-lines"}, false},
	}
	for _, scheme := range []string{"moqt", "https"} {
		for _, m := range modes {
			t.Run(scheme+"/"+m.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				r := startRelay(t, ctx)
				url := r.url(scheme)
				track := []string{url, "files", m.name}
				startSub := func() *proc {
					return r.client(t, "sub", nil, "sub", append(m.subArgs, track...)...)
				}
				var pub, sub *proc
				if m.subFirst {
					sub = startSub()
					sub.waitErr(t, ctx, "no one publishes files "+m.name+" yet")
					pub = r.client(t, "pub", bytes.NewReader(m.file), "pub", append(m.pubArgs, track...)...)
				} else {
					pub = r.client(t, "pub", bytes.NewReader(m.file), "pub", append(m.pubArgs, track...)...)
					pub.waitErr(t, ctx, "waiting for a subscriber")
					sub = startSub()
				}
				require.NoError(t, pub.wait(t, ctx), "pub's exit")
				require.NoError(t, sub.wait(t, ctx), "sub's exit")
				got := sub.output()
				require.Equal(t, len(m.file), len(got), "bytes received")
				assert.True(t, bytes.Equal(m.file, got), "the copy differs from the file")
				assert.Contains(t, sub.stderr(), "the track ended (TRACK_ENDED)")
				assert.Contains(t, pub.stderr(), "moqt pub: ended")
				assert.NotContains(t, sub.stderr(), "out of order")
			})
		}
	}
}

// linesFeeder is a publisher's stdin that the test writes lines into.
type linesFeeder struct {
	w    io.WriteCloser
	next int
}

func (f *linesFeeder) write(t *testing.T, n int) {
	t.Helper()
	for range n {
		_, err := fmt.Fprintf(f.w, "line %d\n", f.next)
		require.NoError(t, err)
		f.next++
	}
}

func wantLines(from, to int) string {
	var sb strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	return sb.String()
}

// TestLateJoinerFill: a moqt sub -fill 1 that joins in the middle of a
// group gets that group from its start, then the live objects, each once;
// the first subscriber gets everything.
func TestLateJoinerFill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	pub := r.client(t, "pub", feedStdin, "pub", "-lines", "-group-objects", "5", r.url("moqt"), "demo", "lines")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "waiting for a subscriber")
	first := r.client(t, "first", nil, "sub", "-lines", r.url("https"), "demo", "lines")
	pub.waitErr(t, ctx, "reading stdin")

	in.write(t, 8) // group 0: lines 0-4; group 1: lines 5-7 so far
	first.waitOut(t, ctx, "line 7")
	late := r.client(t, "late", nil, "sub", "-lines", "-fill", "1", r.url("moqt"), "demo", "lines")
	late.waitOut(t, ctx, "line 7")
	in.write(t, 5) // lines 8-12
	require.NoError(t, in.w.Close())

	require.NoError(t, pub.wait(t, ctx))
	require.NoError(t, first.wait(t, ctx))
	require.NoError(t, late.wait(t, ctx))
	assert.Equal(t, wantLines(0, 12), string(first.output()))
	assert.Equal(t, wantLines(5, 12), string(late.output()), "the late joiner: group 1 from its start, then live")
	assert.Contains(t, late.stderr(), "the last 1 group(s) first")
}

// TestLateJoinerFillAcrossDrafts is TestLateJoinerFill with each process
// held to a draft (-draft), all meeting in one relay: the publisher speaks
// 18; the first subscriber 21; the late joiners 18 (its fill a Joining
// FETCH) and 20 (a fill stream). Each gets what it was promised, once.
func TestLateJoinerFillAcrossDrafts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	pub := r.client(t, "pub18", feedStdin, "pub", "-draft", "18", "-lines", "-group-objects", "5", r.url("moqt"), "demo", "lines")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "moqt-18")
	pub.waitErr(t, ctx, "waiting for a subscriber")
	first := r.client(t, "first21", nil, "sub", "-draft", "21", "-lines", r.url("https"), "demo", "lines")
	pub.waitErr(t, ctx, "reading stdin")
	first.waitErr(t, ctx, "moqt-21")

	in.write(t, 8) // group 0: lines 0-4; group 1: lines 5-7 so far
	first.waitOut(t, ctx, "line 7")
	late18 := r.client(t, "late18", nil, "sub", "-draft", "18", "-lines", "-fill", "1", r.url("https"), "demo", "lines")
	late18.waitOut(t, ctx, "line 7")
	late18.waitErr(t, ctx, "moqt-18")
	late20 := r.client(t, "late20", nil, "sub", "-draft", "20", "-lines", "-fill", "1", r.url("moqt"), "demo", "lines")
	late20.waitOut(t, ctx, "line 7")
	late20.waitErr(t, ctx, "moqt-20")
	in.write(t, 5) // lines 8-12
	require.NoError(t, in.w.Close())

	require.NoError(t, pub.wait(t, ctx))
	for _, p := range []*proc{first, late18, late20} {
		require.NoError(t, p.wait(t, ctx), p.stderr())
	}
	assert.Equal(t, wantLines(0, 12), string(first.output()))
	assert.Equal(t, wantLines(5, 12), string(late18.output()), "the draft-18 late joiner: group 1 from its start (a Joining FETCH), then live")
	assert.Equal(t, wantLines(5, 12), string(late20.output()), "the draft-20 late joiner: group 1 from its start (a fill stream), then live")
}

// TestFetchAndStatus: moqt status reports the Largest Object; moqt fetch
// returns a past range, with -to and up to the Largest without it. Once
// the publisher ended the track at the end of its input and left, both
// are still answered from the relay's cache, with the track's final
// Largest Object (they got DOES_NOT_EXIST before: the relay dropped the
// cache with the track).
func TestFetchAndStatus(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	pub := r.client(t, "pub", feedStdin, "pub", "-lines", "-group-objects", "4", r.url("https"), "past", "lines")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "waiting for a subscriber")
	sub := r.client(t, "sub", nil, "sub", "-lines", r.url("moqt"), "past", "lines")
	pub.waitErr(t, ctx, "reading stdin")
	in.write(t, 10) // groups 0 and 1: lines 0-7; group 2: lines 8-9
	sub.waitOut(t, ctx, "line 9")

	status := r.client(t, "status", nil, "status", r.url("moqt"), "past", "lines")
	require.NoError(t, status.wait(t, ctx))
	assert.Contains(t, string(status.output()), "largest object: 2:1 (group 2, object 1)")

	fetch := r.client(t, "fetch", nil, "fetch", "-lines", r.url("moqt"), "past", "lines", "-from", "0:2", "-to", "1:3")
	require.NoError(t, fetch.wait(t, ctx))
	assert.Equal(t, wantLines(2, 7), string(fetch.output()))

	rest := r.client(t, "fetch-rest", nil, "fetch", "-lines", "-from", "1:0", r.url("https"), "past", "lines")
	require.NoError(t, rest.wait(t, ctx))
	assert.Equal(t, wantLines(4, 9), string(rest.output()))

	require.NoError(t, in.w.Close())
	require.NoError(t, pub.wait(t, ctx))
	require.NoError(t, sub.wait(t, ctx))

	// Group 2 was ended by an End of Group object at 2:2.
	status = r.client(t, "status-ended", nil, "status", r.url("https"), "past", "lines")
	require.NoError(t, status.wait(t, ctx), "status after the publisher left")
	assert.Contains(t, string(status.output()), "largest object: 2:2 (group 2, object 2)")
	all := r.client(t, "fetch-ended", nil, "fetch", "-lines", r.url("moqt"), "past", "lines", "-from", "0:0")
	require.NoError(t, all.wait(t, ctx), "fetch after the publisher left")
	assert.Equal(t, wantLines(0, 9), string(all.output()))
}

// TestLs: moqt ls sees a namespace come when a publisher announces it and
// go when the publisher leaves; it stops cleanly at Ctrl-C.
func TestLs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	ls := r.client(t, "ls", nil, "ls", r.url("https"), "live")
	ls.waitErr(t, ctx, "listing the namespaces under live")
	pub := r.client(t, "pub", feedStdin, "pub", "-wait=false", r.url("moqt"), "live/cam1", "video")
	assert.Equal(t, "+ live/cam1", ls.waitOut(t, ctx, "live/cam1"))
	require.NoError(t, pub.stdin.Close()) // the end of its input: the publisher leaves
	require.NoError(t, pub.wait(t, ctx))
	ls.waitOut(t, ctx, "- live/cam1")
	ls.signal(t, syscall.SIGINT)
	require.NoError(t, ls.wait(t, ctx), "ls's exit at Ctrl-C")
}

// TestPubInterrupted: Ctrl-C ends moqt pub cleanly: its subscriber gets
// what it published, then TRACK_ENDED, and both exit 0.
func TestPubInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	pub := r.client(t, "pub", feedStdin, "pub", "-lines", "-publish", r.url("https"), "live", "log")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "waiting for a subscriber")
	sub := r.client(t, "sub", nil, "sub", "-lines", r.url("moqt"), "live", "log")
	pub.waitErr(t, ctx, "reading stdin")
	in.write(t, 3)
	sub.waitOut(t, ctx, "line 2")
	pub.signal(t, syscall.SIGINT)
	require.NoError(t, pub.wait(t, ctx), "pub's exit at Ctrl-C")
	require.NoError(t, sub.wait(t, ctx), "sub's exit at the end of the track")
	assert.Equal(t, wantLines(0, 2), string(sub.output()))
	assert.Contains(t, pub.stderr(), "interrupted: 3 objects")
	assert.Contains(t, sub.stderr(), "the track ended (TRACK_ENDED)")
}
