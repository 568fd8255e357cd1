package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// processTTL is the cluster's registry TTL in the process test: short, so
// that a dead relay drops out within seconds.
const processTTL = 2 * time.Second

// natsBin builds, once, a NATS server from the nats-server module this
// module requires (the one -nats-embedded runs).
var natsBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(binDir, "nats-server")
	out, err := exec.Command(goCmd(), "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build nats-server: %v\n%s", err, out)
	}
	return bin, nil
})

var natsListening = regexp.MustCompile(`Listening for client connections on (127\.0\.0\.1:\d+)`)

// startNATSProc runs a NATS server process with JetStream on a free port
// of 127.0.0.1 and returns its client URL.
func startNATSProc(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin, err := natsBin()
	require.NoError(t, err)
	p := startBin(t, "nats-server", bin, nil, "-a", "127.0.0.1", "-p", "-1", "-js", "-sd", t.TempDir(), "-n", "moqt-test")
	line := p.waitFor(t, ctx, true, natsListening.MatchString)
	return "nats://" + natsListening.FindStringSubmatch(line)[1]
}

// freeUDPAddr is a UDP address of 127.0.0.1 free a moment ago: a cluster
// relay's -listen, which the other relays dial, needs its port up front.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := pc.LocalAddr().String()
	require.NoError(t, pc.Close())
	return addr
}

// waitOutN waits until n lines of stdout contain s.
func (p *proc) waitOutN(t *testing.T, ctx context.Context, s string, n int) {
	t.Helper()
	for {
		p.mu.Lock()
		count := 0
		for _, l := range p.lines {
			if strings.Contains(l, s) {
				count++
			}
		}
		change := p.change
		p.mu.Unlock()
		if count >= n {
			return
		}
		select {
		case <-change:
		case <-p.done:
			require.FailNow(t, p.name+" exited before the line waited for", "%q ×%d: %v", s, n, p.err)
		case <-ctx.Done():
			require.FailNow(t, p.name+": no such line", "%q ×%d: %v", s, n, ctx.Err())
		}
	}
}

// TestClusterOfRelayProcesses: three moqt relay processes form a cluster
// through a NATS server process. A publisher at A reaches subscribers at B
// and C, every object once and in order, then the end; moqt ls at B sees
// A's namespaces come and go. A relay killed (SIGKILL) ends its tracks'
// subscriptions at the others within the TTL, and a publisher that comes
// back at C is found by a new subscriber at B.
func TestClusterOfRelayProcesses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	natsURL := startNATSProc(t, ctx)
	cl := []string{"-cluster", natsURL, "-cluster-ttl", processTTL.String(), "-cluster-token", "process-test-token"}
	relayAt := func() *relayProc {
		r := startRelay(t, ctx, append(cl, "-listen", freeUDPAddr(t))...)
		r.waitErr(t, ctx, "cluster: joining")
		return r
	}
	a, b, c := relayAt(), relayAt(), relayAt()

	ls := b.client(t, "ls@B", nil, "ls", b.url("moqt"), "live")
	ls.waitErr(t, ctx, "listing the namespaces under live")

	// A publisher at A, subscribers at B and C: everything, then the end.
	pub := a.client(t, "pub@A", feedStdin, "pub", "-lines", "-group-objects", "5", a.url("moqt"), "live/cam", "log")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "waiting for a subscriber")
	assert.Equal(t, "+ live/cam", ls.waitOut(t, ctx, "live/cam"), "announced at A, listed at B")
	subB := b.client(t, "sub@B", nil, "sub", "-lines", b.url("moqt"), "live/cam", "log")
	subC := c.client(t, "sub@C", nil, "sub", "-lines", c.url("https"), "live/cam", "log")
	subB.waitErr(t, ctx, "subscribed to live/cam log")
	subC.waitErr(t, ctx, "subscribed to live/cam log")
	pub.waitErr(t, ctx, "reading stdin")
	// One burst: groups 0-3 whole and group 4 three lines at once, then the
	// end. The groups may reach the subscribers in any order, across two
	// relays; each writes them in order (moqt sub's open start).
	in.write(t, 23)
	require.NoError(t, in.w.Close())
	require.NoError(t, pub.wait(t, ctx), "pub's exit")
	for _, sub := range []*proc{subB, subC} {
		require.NoError(t, sub.wait(t, ctx), "%s's exit at the end of the track", sub.name)
		assert.Equal(t, wantLines(0, 22), string(sub.output()), "%s: every object, once, in order", sub.name)
		assert.Contains(t, sub.stderr(), "the track ended (TRACK_ENDED): 23 objects", sub.name)
	}
	ls.waitOut(t, ctx, "- live/cam")

	// A is killed: its subscribers at B and C are told within the TTL.
	pub2 := a.client(t, "pub2@A", feedStdin, "pub", "-lines", a.url("moqt"), "live/cam2", "log")
	in2 := &linesFeeder{w: pub2.stdin}
	pub2.waitErr(t, ctx, "waiting for a subscriber")
	ls.waitOut(t, ctx, "+ live/cam2")
	subB2 := b.client(t, "sub2@B", nil, "sub", "-lines", b.url("moqt"), "live/cam2", "log")
	subC2 := c.client(t, "sub2@C", nil, "sub", "-lines", c.url("moqt"), "live/cam2", "log")
	subB2.waitErr(t, ctx, "subscribed to live/cam2 log")
	subC2.waitErr(t, ctx, "subscribed to live/cam2 log")
	pub2.waitErr(t, ctx, "reading stdin")
	in2.write(t, 3)
	subB2.waitOut(t, ctx, "line 2")
	subC2.waitOut(t, ctx, "line 2")
	a.signal(t, syscall.SIGKILL)
	killed := time.Now()
	// The registry forgets A within the TTL of its last refresh (made at
	// most TTL/3 before); a second TTL covers the expiry's rounds, and a
	// second more the processes' own pace.
	told, cancelTold := context.WithTimeout(ctx, 2*processTTL+2*time.Second)
	defer cancelTold()
	for _, sub := range []*proc{subB2, subC2} {
		assert.Equal(t, 1, sub.exitCode(t, told), "%s's exit status", sub.name)
		t.Logf("%s told %v after the kill", sub.name, time.Since(killed).Round(10*time.Millisecond))
		assert.Contains(t, sub.stderr(), "the publisher ended the subscription after 3 objects", sub.name)
		assert.Equal(t, wantLines(0, 2), string(sub.output()), sub.name)
	}
	ls.waitOut(t, ctx, "- live/cam2")

	// The publisher comes back at C: a new subscriber at B finds it.
	pub3 := c.client(t, "pub3@C", feedStdin, "pub", "-lines", c.url("moqt"), "live/cam2", "log")
	in3 := &linesFeeder{w: pub3.stdin}
	pub3.waitErr(t, ctx, "waiting for a subscriber")
	ls.waitOutN(t, ctx, "+ live/cam2", 2)
	subB3 := b.client(t, "sub3@B", nil, "sub", "-lines", b.url("moqt"), "live/cam2", "log")
	subB3.waitErr(t, ctx, "subscribed to live/cam2 log")
	pub3.waitErr(t, ctx, "reading stdin")
	in3.write(t, 4)
	require.NoError(t, in3.w.Close())
	require.NoError(t, pub3.wait(t, ctx), "pub3's exit")
	require.NoError(t, subB3.wait(t, ctx), "sub3@B's exit at the end of the track")
	assert.Equal(t, wantLines(0, 3), string(subB3.output()))
	assert.Contains(t, subB3.stderr(), "the track ended (TRACK_ENDED)")

	ls.signal(t, syscall.SIGINT)
	require.NoError(t, ls.wait(t, ctx), "ls's exit at Ctrl-C")
	b.stop(t, ctx)
	c.stop(t, ctx)
}
