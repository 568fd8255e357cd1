package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/moqttest"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestSubFollowsGoaway: moqt sub reads through relay B, chained to relay A
// where moqt pub publishes. B is stopped (SIGTERM: GOAWAY whose New Session
// URI, -goaway-uri, is relay C, chained to A too). moqt sub moves to C
// (§6.6.1, §7.4.1): it subscribes there with a fill from the first object
// it has not written, drops what both relays deliver, and leaves B. Its
// copy has every line once, in order, and it exits 0 at TRACK_ENDED, over
// raw QUIC and WebTransport. Before, it read on until B closed it and
// exited non-zero with a short copy.
func TestSubFollowsGoaway(t *testing.T) {
	for _, scheme := range []string{"moqt", "https"} {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			a := startRelay(t, ctx)
			c := startRelay(t, ctx, "-upstream", a.url("moqt"), "-upstream-sha256", a.pin)
			b := startRelay(t, ctx, "-upstream", a.url("moqt"), "-upstream-sha256", a.pin, "-goaway-uri", c.url(scheme))
			sub := startProc(t, "sub", nil, "sub", "-lines", "-sha256", b.pin+","+c.pin, b.url(scheme), "live", "log")
			sub.waitErr(t, ctx, "waiting up to")
			pub := a.client(t, "pub", feedStdin, "pub", "-lines", "-group-objects", "4", a.url("moqt"), "live", "log")
			in := feedLines(t, ctx, pub, sub, 10) // groups 0 and 1 whole, half of group 2
			b.signal(t, syscall.SIGTERM)
			sub.waitErr(t, ctx, "moved to "+c.url(scheme))
			require.NoError(t, b.wait(t, ctx), "relay B's exit after SIGTERM")
			in.write(t, 30)
			require.NoError(t, in.w.Close())
			require.NoError(t, pub.wait(t, ctx))
			require.NoError(t, sub.wait(t, ctx), "moqt sub's stderr:\n%s", sub.stderr())
			assert.Equal(t, wantLines(0, 39), string(sub.output()), "every line once, in order")
			assert.Contains(t, sub.stderr(), "is going away (GOAWAY): moving to "+c.url(scheme))
			assert.Contains(t, sub.stderr(), "the track ended (TRACK_ENDED): 40 objects")
			c.stop(t, ctx)
			a.stop(t, ctx)
		})
	}
}

// TestPubFollowsGoaway: moqt pub publishes to relay B, where moqt sub reads
// the track. B is stopped (SIGTERM: GOAWAY whose New Session URI is relay
// C). moqt pub moves to C (§6.6.1, §7.5.1): it announces the namespace
// there and writes on, its next objects and groups, keeping the old session
// for B's subscription until it ends. moqt sub moves to C too, where its
// subscription waits for the publisher and its fill comes from moqt pub's
// cache. Its copy has every line once, in order, and both exit 0, over raw
// QUIC and WebTransport, with the namespace announced or the track offered
// with PUBLISH. Before, moqt pub ended the track with GOING_AWAY at the
// GOAWAY and exited non-zero.
func TestPubFollowsGoaway(t *testing.T) {
	for _, tc := range []struct {
		scheme string
		offer  []string
	}{{"moqt", nil}, {"https", nil}, {"moqt", []string{"-publish"}}} {
		t.Run(tc.scheme+strings.Join(tc.offer, ""), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c := startRelay(t, ctx)
			b := startRelay(t, ctx, "-goaway-uri", c.url(tc.scheme))
			pins := b.pin + "," + c.pin
			sub := startProc(t, "sub", nil, "sub", "-lines", "-sha256", pins, b.url(tc.scheme), "live", "log")
			sub.waitErr(t, ctx, "waiting up to")
			args := append([]string{"pub", "-lines", "-group-objects", "4", "-sha256", pins}, tc.offer...)
			pub := startProc(t, "pub", feedStdin, append(args, b.url(tc.scheme), "live", "log")...)
			in := feedLines(t, ctx, pub, sub, 10) // groups 0 and 1 whole, half of group 2
			b.signal(t, syscall.SIGTERM)
			pub.waitErr(t, ctx, "moved to "+c.url(tc.scheme))
			in.write(t, 30)
			sub.waitErr(t, ctx, "moved to "+c.url(tc.scheme))
			require.NoError(t, b.wait(t, ctx), "relay B's exit after SIGTERM")
			require.NoError(t, in.w.Close())
			require.NoError(t, pub.wait(t, ctx), "moqt pub's stderr:\n%s", pub.stderr())
			require.NoError(t, sub.wait(t, ctx), "moqt sub's stderr:\n%s", sub.stderr())
			assert.Equal(t, wantLines(0, 39), string(sub.output()), "every line once, in order")
			assert.Contains(t, pub.stderr(), "is going away (GOAWAY): moving to "+c.url(tc.scheme))
			assert.Contains(t, pub.stderr(), "40 objects")
			assert.Contains(t, sub.stderr(), "the track ended (TRACK_ENDED): 40 objects")
			c.stop(t, ctx)
		})
	}
}

// TestSubGoawayNowhereToGo: a relay stopped with GOAWAY and no New Session
// URI leaves moqt sub the URL it used, the relay itself: while it drains
// (moqt sub's old session keeps it draining), each new session gets GOAWAY
// at once, its SUBSCRIBE refused with GOING_AWAY (or answered, when it came
// before the GOAWAY was written, and the session moved off again), and once
// the relay has gone nothing answers. moqt sub tries for -reconnect, then
// exits non-zero, saying where it tried to go and why it failed, having
// written what came.
func TestSubGoawayNowhereToGo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	a := startRelay(t, ctx)
	b := startRelay(t, ctx, "-upstream", a.url("moqt"), "-upstream-sha256", a.pin)
	sub := b.client(t, "sub", nil, "sub", "-lines", "-reconnect", "2s", b.url("moqt"), "live", "log")
	sub.waitErr(t, ctx, "waiting up to")
	pub := a.client(t, "pub", feedStdin, "pub", "-lines", "-group-objects", "4", a.url("moqt"), "live", "log")
	in := feedLines(t, ctx, pub, sub, 6)
	b.signal(t, syscall.SIGTERM)
	require.Error(t, sub.wait(t, ctx), "moqt sub had nowhere to go")
	stderr := sub.stderr()
	assert.Contains(t, stderr, "is going away (GOAWAY): moving to "+b.url("moqt"), "the same URL, the GOAWAY having none")
	assert.Regexp(t, "(moving off "+regexp.QuoteMeta(b.url("moqt"))+" after its GOAWAY|and moving to "+regexp.QuoteMeta(b.url("moqt"))+" failed): ", stderr)
	assert.Equal(t, wantLines(0, 5), string(sub.output()), "what came before")
	require.NoError(t, b.wait(t, ctx))
	_ = in.w.Close()
	require.NoError(t, pub.wait(t, ctx))
	a.stop(t, ctx)
}

// TestPubGoawayNowhereToGo: a relay stopped with GOAWAY and no New Session
// URI leaves moqt pub the URL it used: the relay, still draining (moqt
// pub's old session keeps its announcement open), gives each new session
// GOAWAY at once and refuses the namespace with GOING_AWAY (or takes it,
// when it came before the GOAWAY was written, and the session is moved off
// again). moqt pub tries for -reconnect, then exits non-zero, saying where
// it tried to go and why it failed.
func TestPubGoawayNowhereToGo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	b := startRelay(t, ctx)
	sub := b.client(t, "sub", nil, "sub", "-lines", "-follow-goaway=false", b.url("moqt"), "live", "log")
	sub.waitErr(t, ctx, "waiting up to")
	pub := b.client(t, "pub", feedStdin, "pub", "-lines", "-reconnect", "2s", b.url("moqt"), "live", "log")
	in := feedLines(t, ctx, pub, sub, 6)
	b.signal(t, syscall.SIGTERM)
	require.Error(t, pub.wait(t, ctx), "moqt pub had nowhere to go")
	stderr := pub.stderr()
	assert.Contains(t, stderr, "is going away (GOAWAY): moving to "+b.url("moqt"), "the same URL, the GOAWAY having none")
	assert.Contains(t, stderr, "the server at "+b.url("moqt")+" went away (GOAWAY), and ")
	require.NoError(t, b.wait(t, ctx))
	require.Error(t, sub.wait(t, ctx), "the track did not end")
	_ = in.w.Close()
}

// feedLines waits for pub to read its input, writes n lines to it, and
// waits for sub to write the last.
func feedLines(t *testing.T, ctx context.Context, pub, sub *proc, n int) *linesFeeder {
	t.Helper()
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "reading stdin")
	in.write(t, n)
	sub.waitOut(t, ctx, fmt.Sprintf("line %d", n-1))
	return in
}

// servedTrack is pipeTrack's LocalTrack, holding cache objects (0: none
// kept), served over a Pipe to the returned client, whose server end is
// returned too.
func servedTrack(t *testing.T, cache int) (*groupWriter, *moqt.Session, *moqt.Session) {
	t.Helper()
	track, err := moqt.NewLocalTrack(pipeTrack, nil)
	require.NoError(t, err)
	if cache > 0 {
		track.SetCache(moqt.CacheLimits{Objects: cache})
	}
	client, server := moqttest.Pair(t, transport.PipeConfig{}, &moqt.Config{Handler: moqt.HandlerFunc(func(r moqt.Request) {
		if sr, ok := r.(*moqt.SubscribeRequest); ok {
			_, _ = track.Accept(sr, moqt.AcceptOptions{})
		}
	})}, nil)
	return &groupWriter{track: track}, client, server
}

// writeGroups writes groups of four lines each, "G:O", ended by End of
// Group, to each writer.
func writeGroups(t *testing.T, groups int, ws ...*groupWriter) {
	t.Helper()
	for range groups {
		for _, w := range ws {
			for o := range 4 {
				require.NoError(t, w.write(fmt.Appendf(nil, "%d:%d", w.group, o)))
			}
			require.NoError(t, w.endGroup())
		}
	}
}

// groupLines are the lines of groups from through to, as writeGroups
// writes them.
func groupLines(from, to int) string {
	var sb strings.Builder
	for g := from; g <= to; g++ {
		for o := range 4 {
			fmt.Fprintf(&sb, "%d:%d\n", g, o)
		}
	}
	return sb.String()
}

// TestSubGoawayGap: moqt sub reads a track on one session; the server
// sends GOAWAY with a New Session URI, and the track goes on there: its
// group 2 was published there only, after the objects moqt sub read. moqt
// sub dials that URI and subscribes with a fill from 2:0. When the new
// server has group 2 in its cache, the copy is the track's, each object
// once; when its cache kept only the last few objects, the fill reports the
// rest as unknown, and moqt sub says the objects are missing and fails at
// TRACK_ENDED instead of writing a copy with a hole.
func TestSubGoawayGap(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cache int // objects the new server keeps
	}{{"kept", 64}, {"evicted", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				one, client1, server1 := servedTrack(t, 64)
				two, client2, _ := servedTrack(t, tc.cache)
				const next = "moqt://two.test/"
				var out, stderr lockedBuffer
				o := &subOptions{lines: true, follow: followOptions{timeout: 5 * time.Second, url: "moqt://one.test/",
					dial: func(_ context.Context, url string) (*moqt.Session, error) {
						assert.Equal(t, next, url, "the New Session URI")
						return client2, nil
					}}}
				done := make(chan error, 1)
				go func() { done <- runSub(ctx, &narrator{w: &stderr, prefix: "moqt sub: "}, &out, client1, pipeTrack, o) }()
				synctest.Wait() // subscribed
				writeGroups(t, 2, one, two)
				synctest.Wait()
				require.Equal(t, groupLines(0, 1), out.String())
				writeGroups(t, 1, two) // group 2, at the new server only
				go func() { _ = server1.Shutdown(ctx, next) }()
				synctest.Wait() // moved
				writeGroups(t, 1, two)
				two.track.End(wire.DoneTrackEnded, "")
				err := <-done
				assert.Contains(t, stderr.String(), "moved to "+next+" (raw QUIC, moqt-21): subscribed to ns t again, from 2:0 on")
				require.Error(t, client1.Context().Err(), "the old session is closed")
				if tc.cache > 2 {
					require.NoError(t, err, "moqt sub's stderr:\n%s", stderr.String())
					assert.Equal(t, groupLines(0, 3), out.String(), "each object once")
					return
				}
				require.Error(t, err)
				assert.Contains(t, err.Error(), "not to be had after moving off a server that went away (GOAWAY): objects are missing")
				assert.Contains(t, stderr.String(), "are missing: after the move, the server does not know them")
				assert.NotContains(t, out.String(), "2:0\n", "not written")
			})
		})
	}
}

// TestSubFollowsRequestGoaway: a GOAWAY on the subscription's own request
// stream, naming no URI (§9.2: issue that request again on the current
// session), moves moqt sub's subscription: it subscribes again on the same
// session, with a fill from the first object it lacks, and cancels the old
// subscription; every object is written once. Before, that GOAWAY went
// unnoticed and the publisher's end of the old subscription at its
// Timeout ended the copy.
func TestSubFollowsRequestGoaway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		track, err := moqt.NewLocalTrack(pipeTrack, nil)
		require.NoError(t, err)
		track.SetCache(moqt.CacheLimits{Objects: 64})
		served := make(chan *moqt.ServedSubscription, 2)
		h := moqt.HandlerFunc(func(r moqt.Request) {
			if sr, ok := r.(*moqt.SubscribeRequest); ok {
				if ss, err := track.Accept(sr, moqt.AcceptOptions{}); err == nil {
					served <- ss
				}
			}
		})
		client1, _ := moqttest.Pair(t, transport.PipeConfig{}, &moqt.Config{Handler: h}, nil)
		const here = "moqt://one.test/"
		var out, stderr lockedBuffer
		o := &subOptions{lines: true, follow: followOptions{timeout: 5 * time.Second, url: here,
			dial: func(_ context.Context, url string) (*moqt.Session, error) {
				t.Error("dialed: the request moves on the same session")
				return nil, errors.New("no dial")
			}}}
		done := make(chan error, 1)
		go func() { done <- runSub(ctx, &narrator{w: &stderr, prefix: "moqt sub: "}, &out, client1, pipeTrack, o) }()
		synctest.Wait() // subscribed
		w := &groupWriter{track: track}
		writeGroups(t, 2, w)
		synctest.Wait()
		require.Equal(t, groupLines(0, 1), out.String())
		old := <-served
		require.NoError(t, old.Goaway("", 3*time.Second))
		synctest.Wait()             // moved
		time.Sleep(3 * time.Second) // past the GOAWAY's Timeout, when the publisher ends the old one
		writeGroups(t, 2, w)
		track.End(wire.DoneTrackEnded, "")
		require.NoError(t, <-done, "moqt sub's stderr:\n%s", stderr.String())
		assert.Equal(t, groupLines(0, 3), out.String(), "each object once")
		assert.Contains(t, stderr.String(), "moves the subscription (GOAWAY on its request stream)")
		assert.Error(t, old.Err(), "the old subscription cancelled")
		assert.Contains(t, stderr.String(), "subscribing again on the same session")
		assert.NoError(t, client1.Context().Err(), "the session stays")
	})
}
