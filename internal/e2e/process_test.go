package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// programs are the binaries the tests run, built once by TestMain.
var programs struct{ relay, pub, sub string }

// buildPrograms builds examples/relay, pub and sub into dir, with the race
// detector when the test itself has it.
func buildPrograms(dir string) error {
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		goCmd = "go"
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "../../examples/relay", "./pub", "./sub")
	cmd := exec.Command(goCmd, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	programs.relay = filepath.Join(dir, "relay")
	programs.pub = filepath.Join(dir, "pub")
	programs.sub = filepath.Join(dir, "sub")
	return nil
}

// proc is one running program: its stdout lines as they come, its stderr
// kept for the failure report.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout, closed at its end

	mu     sync.Mutex
	seen   []string     // every stdout line read so far
	stderr bytes.Buffer // guarded by mu
	done   chan struct{}
	err    error // the exit status, once done is closed
}

// start runs path with args; the process is killed when the test ends.
func start(t *testing.T, name, path string, args ...string) *proc {
	t.Helper()
	return startWatched(t, nil, name, path, args...)
}

// startWatched is start, passing each stderr line to onErr, if set.
func startWatched(t *testing.T, onErr func(string), name, path string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(path, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	errOut, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	p.stdin, err = p.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start(), name)
	var copied sync.WaitGroup
	copied.Go(func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.seen = append(p.seen, sc.Text())
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
	})
	copied.Go(func() {
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if onErr != nil {
				onErr(sc.Text())
			}
		}
	})
	go func() {
		copied.Wait() // Wait closes the pipes: read them to the end first
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", name, strings.Join(p.output(), "\n"), name, p.errors())
		}
	})
	return p
}

// output returns the stdout lines read so far.
func (p *proc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func (p *proc) errors() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLine returns the first stdout line, from here on, that starts with
// prefix.
func (p *proc) waitLine(t *testing.T, ctx context.Context, prefix string) string {
	t.Helper()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				require.FailNow(t, "no line "+prefix, "%s ended first: %v", p.name, p.exitErr())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-ctx.Done():
			require.FailNow(t, "no line "+prefix, "%s: %v", p.name, ctx.Err())
		}
	}
}

// nextLine skips the stdout lines already printed and returns the first
// one printed from now on that match accepts: what happens next, not what
// happened while the test was busy elsewhere.
func (p *proc) nextLine(t *testing.T, ctx context.Context, what string, match func(string) bool) string {
	t.Helper()
	for skipped := false; !skipped; {
		select {
		case _, ok := <-p.lines:
			if !ok {
				require.FailNow(t, "no line "+what, "%s ended first: %v", p.name, p.exitErr())
			}
		default:
			skipped = true
		}
	}
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				require.FailNow(t, "no line "+what, "%s ended first: %v", p.name, p.exitErr())
			}
			if match(l) {
				return l
			}
		case <-ctx.Done():
			require.FailNow(t, "no line "+what, "%s: %v", p.name, ctx.Err())
		}
	}
}

// wait waits for the process to exit and returns all its stdout lines.
func (p *proc) wait(t *testing.T, ctx context.Context) []string {
	t.Helper()
	go func() { // stdout is consumed by the copier; drop what waitLine did not take
		for range p.lines {
		}
	}()
	select {
	case <-p.done:
	case <-ctx.Done():
		require.FailNow(t, p.name+" did not exit", "%v", ctx.Err())
	}
	require.NoError(t, p.err, "%s exit status", p.name)
	return p.output()
}

func (p *proc) exitErr() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// relayProc is examples/relay, with where to reach it.
type relayProc struct {
	*proc
	addr, sha256 string
}

var (
	servingRE = regexp.MustCompile(`msg=serving addr=(\S+)`)
	hashRE    = regexp.MustCompile(`sha256=([0-9a-f]{64})`)
)

// startRelay runs examples/relay on a free port of 127.0.0.1 and waits
// until it serves.
func startRelay(t *testing.T, ctx context.Context) *relayProc {
	t.Helper()
	var addr, hash string
	found := make(chan struct{})
	var once sync.Once
	watch := func(line string) { // the relay's log, on its stderr
		if m := servingRE.FindStringSubmatch(line); m != nil {
			addr = m[1]
			once.Do(func() { close(found) }) // it logs its hash before it serves
		}
		if m := hashRE.FindStringSubmatch(line); m != nil {
			hash = m[1]
		}
	}
	p := startWatched(t, watch, "relay", programs.relay, "-listen", "127.0.0.1:0")
	select {
	case <-found:
	case <-p.done:
		require.FailNow(t, "the relay exited", "%s", p.errors())
	case <-ctx.Done():
		require.FailNow(t, "the relay did not start", "%s", p.errors())
	}
	require.NotEmpty(t, hash, "the relay's certificate hash")
	return &relayProc{proc: p, addr: addr, sha256: hash}
}

// url is the relay's URL over scheme ("moqt" or "https").
func (r *relayProc) url(scheme string) string { return scheme + "://" + r.addr + "/" }
