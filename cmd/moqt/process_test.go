package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testTimeout bounds each test's processes: generous, for a busy machine.
const testTimeout = 90 * time.Second

// proc is the command running as a process: its stdout, whole and as lines,
// and its stderr lines, as they come.
type proc struct {
	name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	stdout bytes.Buffer  // everything written, byte for byte
	lines  []string      // stdout's complete lines so far
	errs   []string      // stderr's lines so far
	change chan struct{} // closed and replaced at each new line or the exit

	done  chan struct{}
	err   error          // the exit status, once done is closed
	stdin io.WriteCloser // with feedStdin
}

// feedStdin, as startProc's stdin, gives the process a pipe that the test
// writes to (proc.stdin) and closes. (An io.Reader of the test's would make
// exec's Wait wait for its end, even after the process exited.)
var feedStdin io.Reader = strings.NewReader("")

// startProc runs moqt with args; stdin, if set, is its standard input
// (feedStdin: a pipe the test writes to, see stdin). The process is killed
// when the test ends.
func startProc(t *testing.T, name string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	return startBin(t, name, moqtBin, stdin, args...)
}

// startBin runs the program bin as startProc runs moqt.
func startBin(t *testing.T, name, bin string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), change: make(chan struct{}), done: make(chan struct{})}
	if stdin == feedStdin {
		w, err := p.cmd.StdinPipe()
		require.NoError(t, err)
		p.stdin = w
	} else {
		p.cmd.Stdin = stdin
	}
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	errOut, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start(), name)
	var copied sync.WaitGroup
	copied.Go(func() {
		r := bufio.NewReader(out)
		var line []byte
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.stdout.WriteByte(b)
			if b == '\n' {
				p.lines = append(p.lines, string(line))
				line = line[:0]
				p.notifyLocked()
			} else {
				line = append(line, b)
			}
			p.mu.Unlock()
		}
	})
	copied.Go(func() {
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			p.mu.Lock()
			p.errs = append(p.errs, sc.Text())
			p.notifyLocked()
			p.mu.Unlock()
		}
	})
	go func() {
		copied.Wait() // Wait closes the pipes: read them to the end first
		err := p.cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.notifyLocked()
		p.mu.Unlock()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			defer p.mu.Unlock()
			out := p.stdout.String()
			if len(out) > 4000 {
				out = out[:2000] + "\n...\n" + out[len(out)-2000:]
			}
			t.Logf("%s %v\nstdout:\n%s\nstderr:\n%s", name, args, out, strings.Join(p.errs, "\n"))
		}
	})
	return p
}

func (p *proc) notifyLocked() {
	close(p.change)
	p.change = make(chan struct{})
}

// waitFor waits until match holds for one of the lines of stdout (or, with
// stderr, of stderr) and returns it.
func (p *proc) waitFor(t *testing.T, ctx context.Context, stderr bool, match func(string) bool) string {
	t.Helper()
	for {
		p.mu.Lock()
		lines := p.lines
		if stderr {
			lines = p.errs
		}
		for _, l := range lines {
			if match(l) {
				p.mu.Unlock()
				return l
			}
		}
		change := p.change
		p.mu.Unlock()
		select {
		case <-change:
		case <-p.done:
			p.mu.Lock()
			lines := p.lines
			if stderr {
				lines = p.errs
			}
			for _, l := range lines {
				if match(l) {
					p.mu.Unlock()
					return l
				}
			}
			p.mu.Unlock()
			require.FailNow(t, p.name+" exited before the line waited for", "%v", p.err)
		case <-ctx.Done():
			require.FailNow(t, p.name+": no such line", "%v", ctx.Err())
		}
	}
}

// waitOut waits for a stdout line containing s.
func (p *proc) waitOut(t *testing.T, ctx context.Context, s string) string {
	t.Helper()
	return p.waitFor(t, ctx, false, func(l string) bool { return strings.Contains(l, s) })
}

// waitErr waits for a stderr line containing s.
func (p *proc) waitErr(t *testing.T, ctx context.Context, s string) string {
	t.Helper()
	return p.waitFor(t, ctx, true, func(l string) bool { return strings.Contains(l, s) })
}

// wait waits for the exit and returns its error (nil for status 0).
func (p *proc) wait(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		require.FailNow(t, p.name+" did not exit", "%v", ctx.Err())
		return nil
	}
}

// exitCode waits for the exit and returns its status.
func (p *proc) exitCode(t *testing.T, ctx context.Context) int {
	t.Helper()
	_ = p.wait(t, ctx)
	return p.cmd.ProcessState.ExitCode()
}

// output is everything written to stdout.
func (p *proc) output() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.stdout.Bytes())
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.errs, "\n")
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// relayProc is moqt relay, with what its banner says.
type relayProc struct {
	*proc
	addr    string // host:port
	pin     string // the certificate's SHA-256, hex
	metrics string // the metrics URL, if -metrics
	web     string // the web page's URL, if -web
}

var (
	bannerURL = regexp.MustCompile(`raw QUIC: +moqt://(\S+)/`)
	bannerPin = regexp.MustCompile(`^  -sha256 ([0-9a-f]{64})$`)
	metricsRE = regexp.MustCompile(`msg=metrics url=(\S+)`)
	bannerWeb = regexp.MustCompile(`^  web page: +(http://\S+)`)
)

// startRelay runs moqt relay on a free port of 127.0.0.1 and waits for its
// banner.
func startRelay(t *testing.T, ctx context.Context, args ...string) *relayProc {
	t.Helper()
	p := startProc(t, "relay", nil, append([]string{"relay", "-listen", "127.0.0.1:0"}, args...)...)
	r := &relayProc{proc: p}
	r.pin = bannerPin.FindStringSubmatch(p.waitFor(t, ctx, false, bannerPin.MatchString))[1]
	r.addr = bannerURL.FindStringSubmatch(p.waitFor(t, ctx, false, bannerURL.MatchString))[1]
	p.waitOut(t, ctx, "Try, each in a terminal")
	if slices.Contains(args, "-metrics") {
		r.metrics = metricsRE.FindStringSubmatch(p.waitFor(t, ctx, true, metricsRE.MatchString))[1]
	}
	if slices.Contains(args, "-web") {
		r.web = bannerWeb.FindStringSubmatch(p.waitFor(t, ctx, false, bannerWeb.MatchString))[1]
	}
	return r
}

// url is the relay's URL for scheme (moqt or https).
func (r *relayProc) url(scheme string) string { return scheme + "://" + r.addr + "/" }

// client runs a client command against the relay: moqt CMD -sha256 PIN
// ARGS, the URL among ARGS as the caller places it.
func (r *relayProc) client(t *testing.T, name string, stdin io.Reader, cmd string, args ...string) *proc {
	t.Helper()
	return startProc(t, name, stdin, append([]string{cmd, "-sha256", r.pin}, args...)...)
}

// stop sends SIGTERM and waits for a clean exit.
func (r *relayProc) stop(t *testing.T, ctx context.Context) {
	t.Helper()
	r.signal(t, syscall.SIGTERM)
	require.NoError(t, r.wait(t, ctx), "the relay's exit after SIGTERM")
}
