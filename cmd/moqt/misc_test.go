package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/relayserve"
)

// TestDemo: moqt demo runs and exits 0 within its bound, and tells of the
// subscriber, the late joiner with its fill, and the end of the track.
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	demo := startProc(t, "demo", nil, "demo", "-duration", "7s")
	require.NoError(t, demo.wait(t, ctx), "the demo's exit")
	out := string(demo.output())
	for _, want := range []string{
		"relay listening on UDP 127.0.0.1:",
		"clock publishing",
		"subscriber joined over WebTransport at group ",
		"late joiner asked for the current group from its start: it got objects 0..",
		"subscriber was told the track ended",
		"late joiner was told the track ended",
		"none missing, none twice",
		"both subscribers were told the track ended",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotRegexp(t, regexp.MustCompile(`\{\d+ \d+|demo--`), out, "no protocol internals in the narration")
}

// TestClock: moqt clock publishes the time, an object a tick, and ends the
// track after -duration; moqt sub -lines -count reads it as lines.
func TestClock(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	clock := r.client(t, "clock", nil, "clock", "-duration", "20s", r.url("moqt"))
	clock.waitErr(t, ctx, "publishing clock time")
	sub := r.client(t, "sub", nil, "sub", "-lines", "-count", "3", r.url("https"), "clock", "time")
	require.NoError(t, sub.wait(t, ctx))
	lines := strings.Split(strings.TrimSuffix(string(sub.output()), "\n"), "\n")
	require.Len(t, lines, 3)
	for _, l := range lines {
		ts, err := time.Parse("2006-01-02T15:04:05.0Z07:00", l)
		require.NoError(t, err, "a tick %q", l)
		assert.WithinDuration(t, time.Now(), ts, time.Hour, "the clock tells the time")
	}
	clock.signal(t, syscall.SIGINT)
	require.NoError(t, clock.wait(t, ctx), "the clock's exit at Ctrl-C")
	assert.Contains(t, clock.stderr(), "the track ended")
}

// TestErrorMessages: what a mistake gets in reply says what to do.
func TestErrorMessages(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	noScheme := startProc(t, "no scheme", nil, "sub", "127.0.0.1:4443", "ns", "track")
	assert.Equal(t, 2, noScheme.exitCode(t, ctx))
	assert.Contains(t, noScheme.stderr(), "moqt://HOST:PORT/ (raw QUIC)")
	assert.Contains(t, noScheme.stderr(), "https://HOST:PORT/ (WebTransport)")

	r := startRelay(t, ctx)
	for _, scheme := range []string{"moqt", "https"} {
		unpinned := startProc(t, "unpinned", nil, "status", r.url(scheme), "ns", "track")
		assert.Equal(t, 1, unpinned.exitCode(t, ctx))
		assert.Contains(t, unpinned.stderr(), "certificate is not trusted", scheme)
		assert.Contains(t, unpinned.stderr(), "pin it with -sha256", scheme)

		wrongPin := startProc(t, "wrong pin", nil, "status", "-sha256", strings.Repeat("ab", 32), r.url(scheme), "ns", "track")
		assert.Equal(t, 1, wrongPin.exitCode(t, ctx))
		assert.Contains(t, wrongPin.stderr(), "not the one -sha256 pins", scheme)
	}

	badPin := startProc(t, "bad pin", nil, "status", "-sha256", "xyz", r.url("moqt"), "ns", "track")
	assert.Equal(t, 2, badPin.exitCode(t, ctx))
	assert.Contains(t, badPin.stderr(), "64 hex digits")

	missing := r.client(t, "missing", nil, "sub", "-wait", "0", r.url("moqt"), "nobody", "here")
	assert.Equal(t, 1, missing.exitCode(t, ctx))
	assert.Contains(t, missing.stderr(), "start the publisher first")

	usage := startProc(t, "usage", nil, "sub", r.url("moqt"))
	assert.Equal(t, 2, usage.exitCode(t, ctx))
	assert.Contains(t, usage.stderr(), "usage: moqt sub [flags] URL NAMESPACE TRACK")
}

// TestHelp: moqt help lists every command; moqt CMD -h explains one.
func TestHelp(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	help := startProc(t, "help", nil, "help")
	require.NoError(t, help.wait(t, ctx))
	for _, c := range commands {
		assert.Contains(t, string(help.output()), "  "+c.name+" ")
	}
	for _, c := range commands {
		h := startProc(t, c.name+" -h", nil, c.name, "-h")
		require.NoError(t, h.wait(t, ctx))
		assert.Contains(t, string(h.output()), "Usage: moqt "+c.name)
	}
	none := startProc(t, "none", nil, "nope")
	assert.Equal(t, 2, none.exitCode(t, ctx))
}

// TestRelayBannerPin: the banner says the pin changes at the next start only
// for a certificate made at this one; a -cert one keeps its pin, which
// clients and chained relays (-upstream-sha256) may keep.
func TestRelayBannerPin(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("a certificate"))
	addr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4443}
	for _, selfSigned := range []bool{true, false} {
		var out bytes.Buffer
		printRelayBanner(&env{stdout: &out}, relayserve.Info{Addr: addr, CertHash: sum, SelfSigned: selfSigned}, "")
		assert.Contains(t, out.String(), "-sha256 81ac")
		if selfSigned {
			assert.Contains(t, out.String(), "It changes when the relay restarts.")
		} else {
			assert.NotContains(t, out.String(), "changes when the relay restarts")
		}
	}
}
