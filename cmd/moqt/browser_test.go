package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/browsertools"
)

// The browser tests run the web page in headless Chromium with the tools
// of the interop harness (interop/browser_test.go): node, the system's
// Chromium and interop/node_modules (npm ci in interop/), found the same
// way and under the same rule.

// findWebTools locates node, Chromium and interop/node_modules. Missing
// ones skip the test, or fail it under MOQT_INTEROP=1.
func findWebTools(t *testing.T) browsertools.Tools {
	return browsertools.Find(t, "web", filepath.Join("..", "..", "interop"))
}

// browser is a page in headless Chromium, steered through
// interop/js/page-driver.js: one JSON command a line, one answer each.
type browser struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	next  int // the next command's id

	answers chan browserAnswer
	done    chan struct{} // closed when the driver's stdout ends
	stop    chan struct{} // closed when the test ends: answers are dropped

	mu      sync.Mutex
	logging bool          // the driver's events go to t.Log while set
	console []string      // the page's console messages so far
	change  chan struct{} // closed and replaced at each console message
}

// browserAnswer is the driver's answer to one command.
type browserAnswer struct {
	ID       int      `json:"id"`
	OK       bool     `json:"ok"`
	Error    string   `json:"error"`
	Chromium string   `json:"chromium"`
	Texts    []string `json:"texts"`
	Value    *string  `json:"value"`
	Event    string   `json:"event"`
	Text     string   `json:"text"`
}

// startBrowser starts the driver; the browser itself starts with open.
// Both end with the test.
func startBrowser(t *testing.T, tl browsertools.Tools) *browser {
	t.Helper()
	cmd := exec.Command(tl.Node, filepath.Join(tl.Interop, "js", "page-driver.js"), "--chromium", tl.Chromium)
	cmd.Dir = tl.Interop
	cmd.Stderr = testLog{t: t, prefix: "page-driver: "}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	b := &browser{cmd: cmd, stdin: stdin, answers: make(chan browserAnswer, 1),
		done: make(chan struct{}), stop: make(chan struct{}), logging: true, change: make(chan struct{})}
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var a browserAnswer
			if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
				b.log(t, "page-driver: unreadable line: "+sc.Text())
				continue
			}
			if a.Event != "" {
				b.log(t, "browser "+a.Event+": "+a.Text)
				if a.Event == "console" {
					b.mu.Lock()
					b.console = append(b.console, a.Text)
					close(b.change)
					b.change = make(chan struct{})
					b.mu.Unlock()
				}
				continue
			}
			select {
			case b.answers <- a:
			case <-b.stop:
			}
		}
	}()
	t.Cleanup(func() {
		// The end of its input makes the driver close the browser and exit.
		close(b.stop)
		_ = stdin.Close()
		exited := make(chan error, 1)
		go func() {
			<-b.done
			exited <- cmd.Wait()
		}()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("page-driver: %v", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("page-driver: still running 15s after its input ended: killed")
			<-exited
		}
		b.mu.Lock()
		b.logging = false
		b.mu.Unlock()
	})
	return b
}

func (b *browser) log(t *testing.T, s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.logging {
		t.Log(s)
	}
}

// do runs one command, its waits bounded by ctx's deadline, and returns
// the answer; a command that fails fails the test.
func (b *browser) do(t *testing.T, ctx context.Context, cmd map[string]any) browserAnswer {
	t.Helper()
	deadline, ok := ctx.Deadline()
	require.True(t, ok, "browser commands need a deadline")
	b.next++
	id := b.next
	cmd["id"] = id
	cmd["timeoutMs"] = max(time.Until(deadline).Milliseconds()-500, 1)
	line, err := json.Marshal(cmd)
	require.NoError(t, err)
	_, err = b.stdin.Write(append(line, '\n'))
	require.NoError(t, err, "page-driver: %s", line)
	select {
	case a := <-b.answers:
		require.Equal(t, id, a.ID, "page-driver answered another command")
		require.Empty(t, a.Error, "page-driver: %s", line)
		return a
	case <-b.done:
		require.FailNow(t, "page-driver exited", "%s", line)
	case <-ctx.Done():
		require.FailNow(t, "page-driver did not answer", "%s: %v", line, ctx.Err())
	}
	return browserAnswer{}
}

// waitConsole waits for a console message of the page's that re matches.
func (b *browser) waitConsole(t *testing.T, ctx context.Context, re *regexp.Regexp) {
	t.Helper()
	for {
		b.mu.Lock()
		for _, m := range b.console {
			if re.MatchString(m) {
				b.mu.Unlock()
				return
			}
		}
		change := b.change
		b.mu.Unlock()
		select {
		case <-change:
		case <-b.done:
			require.FailNow(t, "page-driver exited before the console message", "%s", re)
		case <-ctx.Done():
			require.FailNow(t, "no such console message", "%s: %v", re, ctx.Err())
		}
	}
}

// open launches the browser and opens url.
func (b *browser) open(t *testing.T, ctx context.Context, url string) string {
	t.Helper()
	return b.do(t, ctx, map[string]any{"op": "open", "url": url}).Chromium
}

// wait waits for an element matching selector whose text holds text.
func (b *browser) wait(t *testing.T, ctx context.Context, selector, text string) {
	t.Helper()
	b.do(t, ctx, map[string]any{"op": "wait", "selector": selector, "text": text})
}

// fill types value into the input selector, replacing what it held.
func (b *browser) fill(t *testing.T, ctx context.Context, selector, value string) {
	t.Helper()
	b.do(t, ctx, map[string]any{"op": "fill", "selector": selector, "value": value})
}

// press presses key in selector.
func (b *browser) press(t *testing.T, ctx context.Context, selector, key string) {
	t.Helper()
	b.do(t, ctx, map[string]any{"op": "press", "selector": selector, "key": key})
}

// texts returns the text of each element matching selector.
func (b *browser) texts(t *testing.T, ctx context.Context, selector string) []string {
	t.Helper()
	return b.do(t, ctx, map[string]any{"op": "text", "selector": selector}).Texts
}

// attr returns the attribute name of selector, "" if it has none.
func (b *browser) attr(t *testing.T, ctx context.Context, selector, name string) string {
	t.Helper()
	v := b.do(t, ctx, map[string]any{"op": "attr", "selector": selector, "name": name}).Value
	if v == nil {
		return ""
	}
	return *v
}

// testLog writes each line to t.Log, with a prefix.
type testLog struct {
	t      *testing.T
	prefix string
}

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + string(p))
	return len(p), nil
}
