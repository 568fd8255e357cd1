package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// driverRequest is one scenario for js/driver.js: the page to open and
// window.moqtInterop's argument.
type driverRequest struct {
	ID     int            `json:"id"`
	Page   string         `json:"page"`
	Params map[string]any `json:"params"`
}

// driverOutput is what js/driver.js prints for a request.
type driverOutput struct {
	ID          int       `json:"id"`
	Chromium    string    `json:"chromium"`
	UserAgent   string    `json:"userAgent"`
	Result      *jsResult `json:"result"`
	Console     []string  `json:"console"`
	PageErrors  []string  `json:"pageErrors"`
	DriverError string    `json:"driverError"`
}

// pageTimeout bounds each browser step of the driver (starting, loading
// the page, a scenario): within driverTimeout, so that the driver reports a
// step that hangs before the test gives up on it.
const pageTimeout = driverTimeout * 3 / 4

// driverArgs is how js/driver.js is started.
func driverArgs(tl tools, mode ...string) []string {
	return append([]string{"js/driver.js", "--chromium", tl.Chromium,
		"--timeout-ms", strconv.Itoa(int(pageTimeout.Milliseconds()))}, mode...)
}

// sharedDriver is one js/driver.js --serve: one Chromium that runs every
// scenario given to it, each in a browser context of its own and several at
// once, so that a test run starts the browser once rather than per
// scenario. A scenario that kills its browser runs its own driver
// (runDriver).
type sharedDriver struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer // the process's; read once it has exited
	done   chan struct{}

	mu      sync.Mutex
	next    int
	waiting map[int]chan driverOutput
	ended   bool // the driver's output has ended: nothing more will come
}

// startSharedDriver starts the driver; it is stopped when t ends.
func startSharedDriver(t *testing.T, tl tools) *sharedDriver {
	d := &sharedDriver{waiting: map[int]chan driverOutput{}, done: make(chan struct{})}
	d.cmd = exec.Command(tl.Node, driverArgs(tl, "--serve")...)
	d.cmd.Dir = tl.Interop
	d.cmd.Stderr = &d.stderr
	ownProcessGroup(d.cmd)
	var err error
	d.stdin, err = d.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := d.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, d.cmd.Start())
	go d.read(stdout)
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("the shared driver: %v", err)
		}
		if d.stderr.Len() > 0 {
			t.Logf("shared driver stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

// read hands each output line to its request until the driver's stdout
// ends, then fails what is still waiting.
func (d *sharedDriver) read(stdout io.Reader) {
	defer close(d.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 64<<20) // a result holds every payload, in hex
	for sc.Scan() {
		var out driverOutput
		if err := json.Unmarshal(sc.Bytes(), &out); err != nil {
			out = driverOutput{ID: -1, DriverError: fmt.Sprintf("driver output: %v: %s", err, sc.Bytes())}
		}
		d.mu.Lock()
		if c, ok := d.waiting[out.ID]; ok {
			delete(d.waiting, out.ID)
			c <- out
		} else if out.ID == -1 {
			// Not tied to a request, such as the browser not starting: it
			// fails them all.
			for id, c := range d.waiting {
				delete(d.waiting, id)
				c <- out
			}
		}
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.ended = true
	for id, c := range d.waiting {
		delete(d.waiting, id)
		c <- driverOutput{ID: id, DriverError: "the shared driver exited"}
	}
	d.mu.Unlock()
}

// run runs one scenario on the page at pageURL with params and returns
// what the driver printed for it.
func (d *sharedDriver) run(ctx context.Context, pageURL string, params map[string]any) (driverOutput, error) {
	c := make(chan driverOutput, 1)
	d.mu.Lock()
	if d.ended {
		d.mu.Unlock()
		return driverOutput{}, errors.New("the shared driver has exited")
	}
	id := d.next
	d.next++
	d.waiting[id] = c
	line, err := json.Marshal(driverRequest{ID: id, Page: pageURL, Params: params})
	if err == nil {
		// A pipe write, under the lock so that lines do not interleave;
		// the driver reads stdin all along, so it does not block long.
		_, err = d.stdin.Write(append(line, '\n'))
	}
	if err != nil {
		delete(d.waiting, id)
	}
	d.mu.Unlock()
	if err != nil {
		return driverOutput{}, fmt.Errorf("sending the request: %w", err)
	}
	select {
	case out := <-c:
		return out, nil
	case <-ctx.Done():
		d.mu.Lock()
		delete(d.waiting, id)
		d.mu.Unlock()
		return driverOutput{}, fmt.Errorf("waiting for the driver: %w", ctx.Err())
	}
}

// stop ends the driver: closing stdin lets it finish and close the
// browser; one that does not is killed.
func (d *sharedDriver) stop() error {
	_ = d.stdin.Close()
	select {
	case <-d.done:
	case <-time.After(closeTimeout):
		_ = killTree(d.cmd.Process.Pid)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return d.cmd.Wait()
}
