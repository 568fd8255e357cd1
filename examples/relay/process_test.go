package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// processTimeout bounds one relay process, build excluded.
const processTimeout = 30 * time.Second

// buildRelay builds this command into a temporary directory, once per test
// binary.
var buildRelay = sync.OnceValues(func() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "moqt-relay-example-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "relay")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, out)
	}
	return bin, nil
})

// relayProcess is the command running as a process of its own.
type relayProcess struct {
	cmd      *exec.Cmd
	addr     string   // the UDP address it serves on
	certHash [32]byte // the SHA-256 of its self-signed certificate
	exited   chan error
}

var (
	servingLine = regexp.MustCompile(`msg=serving addr=(\S+)`)
	hashLine    = regexp.MustCompile(`msg="self-signed certificate" sha256=([0-9a-f]{64})`)
)

// startRelay runs the relay with args and -listen 127.0.0.1:0, and reads
// from its log the address it serves on and its certificate's hash. Its
// log goes to the test's.
func startRelay(t *testing.T, name string, args ...string) *relayProcess {
	t.Helper()
	bin, err := buildRelay()
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("the go command is not on PATH")
	}
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"-listen", "127.0.0.1:0", "-v"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &relayProcess{cmd: cmd, exited: make(chan error, 1)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})

	found := make(chan struct{})
	logDone := make(chan struct{})
	var mu sync.Mutex
	logging := true
	t.Cleanup(func() {
		mu.Lock()
		logging = false
		mu.Unlock()
	})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			if logging {
				t.Logf("%s: %s", name, line)
			}
			mu.Unlock()
			if m := hashLine.FindStringSubmatch(line); m != nil {
				p.certHash, _ = moqt.ParseCertificateHash(m[1])
			}
			if m := servingLine.FindStringSubmatch(line); m != nil && p.addr == "" {
				p.addr = m[1]
				close(found)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		<-logDone // Wait must not run before the pipe is read to its end
		p.exited <- cmd.Wait()
	}()
	select {
	case <-found:
	case err := <-p.exited:
		p.exited <- err
		require.FailNow(t, "the relay exited before serving", "%v", err)
	case <-time.After(processTimeout):
		require.FailNow(t, "the relay did not say where it serves")
	}
	require.NotEqual(t, [32]byte{}, p.certHash, "the relay did not print its certificate's SHA-256")
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *relayProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		p.exited <- err
		require.NoError(t, err, "the relay's exit after SIGTERM")
	case <-time.After(drainTimeout + processTimeout):
		require.FailNow(t, "the relay did not exit after SIGTERM")
	}
}

// dial opens a session to the relay process.
func (p *relayProcess) dial(t *testing.T, ctx context.Context, scheme string, h moqt.Handler) *moqt.Session {
	t.Helper()
	s, err := moqt.Dial(ctx, scheme+"://"+p.addr+"/", &moqt.Config{
		ServerCertificateHashes: [][32]byte{p.certHash},
		Logger:                  slog.New(slog.DiscardHandler),
		Handler:                 h,
	})
	require.NoError(t, err, scheme)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// demoPayload is object o of group g: sizes from one byte to several QUIC
// packets.
func demoPayload(g, o uint64) []byte {
	sizes := []int{1, 1200, 30000}
	b := make([]byte, sizes[o%uint64(len(sizes))])
	for i := range b {
		b[i] = byte(g*41 + o*17 + uint64(i)*7 + uint64(i>>8))
	}
	return b
}

const (
	demoGroups  = 4
	demoObjects = 3
)

// announcer serves, on the session it is the Handler of, the SUBSCRIBEs for
// its track: the publisher's end of a PUBLISH_NAMESPACE.
type announcer struct {
	track    *moqt.LocalTrack
	accepted chan *moqt.ServedSubscription
}

func newAnnouncer(t *testing.T, name wire.FullTrackName) *announcer {
	track, err := moqt.NewLocalTrack(name, nil)
	require.NoError(t, err)
	return &announcer{track: track, accepted: make(chan *moqt.ServedSubscription, 1)}
}

func (a *announcer) ServeMOQT(r moqt.Request) {
	sr, ok := r.(*moqt.SubscribeRequest)
	if !ok || !sr.Track.Equal(a.track.Name()) {
		moqt.DefaultHandler.ServeMOQT(r)
		return
	}
	if ss, err := a.track.Accept(sr, moqt.AcceptOptions{}); err == nil {
		select {
		case a.accepted <- ss:
		default:
		}
	}
}

// publishAndReceive: a publisher offers name on pubSession, by PUBLISH
// or, when ann is set (ann is then pubSession's Handler), by
// PUBLISH_NAMESPACE; once sub has subscribed on subSession and the relay
// forwards, the publisher writes demoGroups groups, and sub must read every
// object byte for byte, each group ended by a FIN.
func publishAndReceive(t *testing.T, ctx context.Context, pubSession, subSession *moqt.Session, name wire.FullTrackName, ann *announcer) {
	t.Helper()
	var track *moqt.LocalTrack
	var ss *moqt.ServedSubscription
	if ann != nil {
		track = ann.track
		a, err := pubSession.PublishNamespace(ctx, name.Namespace, wire.Params{})
		require.NoError(t, err, "PUBLISH_NAMESPACE to the relay")
		defer a.Close()
	} else {
		var err error
		track, err = moqt.NewLocalTrack(name, nil)
		require.NoError(t, err)
		ss, err = track.Publish(ctx, pubSession, wire.Params{}, moqt.AcceptOptions{})
		require.NoError(t, err, "PUBLISH to the relay")
	}
	defer track.End(wire.DoneTrackEnded, "test over")

	sub, err := subSession.Subscribe(ctx, name, wire.Params{})
	require.NoError(t, err, "SUBSCRIBE through the relay")
	defer sub.Close()
	if ann != nil {
		select {
		case ss = <-ann.accepted:
		case <-ctx.Done():
			require.FailNow(t, "the relay did not subscribe to the announcer")
		}
	}
	// The relay forwards (Forward 1 upstream, §7.2) once it has a
	// subscriber; what the publisher writes before that is not sent.
	for !ss.Forward() {
		select {
		case <-ctx.Done():
			require.FailNow(t, "the relay never asked the publisher to forward")
		case <-time.After(10 * time.Millisecond):
		}
	}
	for g := range uint64(demoGroups) {
		w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{EndOfGroup: true})
		for o := range uint64(demoObjects) {
			require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: demoPayload(g, o)}))
		}
		require.NoError(t, w.Close())
	}

	got := map[uint64][][]byte{}
	for len(got) < demoGroups {
		r, err := sub.AcceptSubgroup(ctx)
		require.NoError(t, err, "after %d groups", len(got))
		g := r.Header().GroupID
		require.NotContains(t, got, g, "group %d arrived twice", g)
		var objects [][]byte
		for {
			oh, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "group %d", g)
			require.Equal(t, uint64(len(objects)), oh.Location.Object, "group %d", g)
			b, err := io.ReadAll(r)
			require.NoError(t, err)
			objects = append(objects, b)
		}
		got[g] = objects
	}
	for g := range uint64(demoGroups) {
		require.Len(t, got[g], demoObjects, "group %d", g)
		for o, b := range got[g] {
			assert.True(t, string(demoPayload(g, uint64(o))) == string(b), "group %d object %d differs", g, o)
		}
	}
}

// TestRelayProcess: the command, as a process of its own, routes a track
// from a publisher (raw QUIC) to a subscriber (WebTransport), PUBLISHed
// and then in an announced namespace (PUBLISH_NAMESPACE); on SIGTERM it
// sends both sessions GOAWAY and exits cleanly.
func TestRelayProcess(t *testing.T) {
	p := startRelay(t, "relay")
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	announced := wire.FullTrackName{Namespace: wire.NewNamespace("demo", "announced"), Name: []byte("clock")}
	ann := newAnnouncer(t, announced)
	pubSession := p.dial(t, ctx, "moqt", ann)
	subSession := p.dial(t, ctx, "https", nil)
	publishAndReceive(t, ctx, pubSession, subSession, wire.FullTrackName{Namespace: wire.NewNamespace("demo", "process"), Name: []byte("clock")}, nil)
	publishAndReceive(t, ctx, pubSession, subSession, announced, ann)

	p.stop(t)
	waitGoAway(t, ctx, []*moqt.Session{pubSession, subSession})
}

// TestRelayChain: two relay processes, an edge chained to an origin with
// -upstream: a track published to the origin reaches a subscriber of the
// edge.
func TestRelayChain(t *testing.T) {
	origin := startRelay(t, "origin")
	edge := startRelay(t, "edge", "-upstream", "moqt://"+origin.addr+"/",
		"-upstream-sha256", fmt.Sprintf("%x", origin.certHash))
	ctx, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	pubSession := origin.dial(t, ctx, "moqt", nil)
	subSession := edge.dial(t, ctx, "https", nil)
	publishAndReceive(t, ctx, pubSession, subSession, wire.FullTrackName{Namespace: wire.NewNamespace("demo", "chain"), Name: []byte("clock")}, nil)
	edge.stop(t)
	origin.stop(t)
}
