package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
)

// scrape reads a Prometheus text exposition: each sample's value by its
// name and labels as written ("name{a=\"b\"}"), and the families that
// have both HELP and TYPE.
func scrape(t *testing.T, ctx context.Context, url string) (samples map[string]float64, families map[string]string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/plain; version=0.0.4; charset=utf-8", resp.Header.Get("Content-Type"))
	samples, families = map[string]float64{}, map[string]string{}
	helped := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# HELP "):
			f := strings.Fields(line)
			require.GreaterOrEqual(t, len(f), 4, "HELP with text: %q", line)
			helped[f[2]] = true
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			require.Len(t, f, 4, line)
			require.True(t, helped[f[2]], "TYPE of %s before its HELP", f[2])
			require.Contains(t, []string{"counter", "gauge"}, f[3])
			families[f[2]] = f[3]
		case line == "":
		default:
			i := strings.LastIndexByte(line, ' ')
			require.Positive(t, i, "sample %q", line)
			v, err := strconv.ParseFloat(line[i+1:], 64)
			require.NoError(t, err, "sample %q", line)
			name := line[:i]
			base, _, _ := strings.Cut(name, "{")
			require.Contains(t, families, base, "sample %q of no family declared before it", line)
			samples[name] = v
		}
	}
	require.NoError(t, sc.Err())
	return samples, families
}

// getStatus fetches url and returns the response's status and body.
func getStatus(t *testing.T, ctx context.Context, url string) (int, string) {
	t.Helper()
	code, _, body := get(t, ctx, url)
	return code, string(body)
}

// TestRelayMetrics: the relay's metrics endpoint counts what flowed
// through it (objects in and out, sessions, requests), in the Prometheus
// text format with HELP and TYPE for every family; /healthz is 200 while
// it serves and 503 once it drains; SIGTERM makes it exit 0.
func TestRelayMetrics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx, "-metrics", "127.0.0.1:0", "-v")
	health := strings.TrimSuffix(r.metrics, "/metrics") + "/healthz"
	code, body := getStatus(t, ctx, health)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "ok\n", body)

	// A session that sends no request counts from its setup.
	var pin [32]byte
	_, err := hex.Decode(pin[:], []byte(r.pin))
	require.NoError(t, err)
	idle, err := moqt.Dial(ctx, r.url("moqt"), &moqt.Config{ServerCertificateHashes: [][32]byte{pin}})
	require.NoError(t, err)
	// The client's Dial may return before the relay has taken its SETUP
	// (both are sent at once): the relay logs the session once counted.
	r.waitErr(t, ctx, `msg="relay: session" event=start`)
	samples, _ := scrape(t, ctx, r.metrics)
	assert.Equal(t, float64(1), samples[`moqt_relay_sessions{upstream="false"}`], "the idle session")
	require.NoError(t, idle.Close())

	// 20 lines in 4 groups, each ended by an End of Group object.
	var in bytes.Buffer
	for i := range 20 {
		in.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	pub := r.client(t, "pub", &in, "pub", "-lines", "-group-objects", "5", r.url("moqt"), "m", "t")
	pub.waitErr(t, ctx, "waiting for a subscriber")
	sub := r.client(t, "sub", nil, "sub", "-lines", r.url("https"), "m", "t")
	require.NoError(t, pub.wait(t, ctx))
	require.NoError(t, sub.wait(t, ctx))

	samples, families := scrape(t, ctx, r.metrics)
	for name, typ := range map[string]string{
		"moqt_relay_sessions": "gauge", "moqt_relay_sessions_total": "counter", "moqt_relay_requests_total": "counter",
		"moqt_relay_objects_in_total": "counter", "moqt_relay_object_bytes_in_total": "counter",
		"moqt_relay_objects_out_total": "counter", "moqt_relay_object_bytes_out_total": "counter",
		"moqt_relay_dropped_total": "counter", "moqt_relay_subscribers_cut_total": "counter", "moqt_relay_draining": "gauge",
	} {
		assert.Equal(t, typ, families[name], "family %s", name)
	}
	const objects, payload = 20, 10*len("line 0") + 10*len("line 10") // the lines, without their newlines
	assert.GreaterOrEqual(t, samples["moqt_relay_objects_in_total"], float64(objects))
	assert.GreaterOrEqual(t, samples["moqt_relay_objects_out_total"], float64(objects))
	assert.GreaterOrEqual(t, samples["moqt_relay_object_bytes_in_total"], float64(payload))
	assert.GreaterOrEqual(t, samples["moqt_relay_object_bytes_out_total"], float64(payload))
	assert.GreaterOrEqual(t, samples[`moqt_relay_sessions_total{upstream="false"}`], float64(2))
	assert.GreaterOrEqual(t, samples[`moqt_relay_requests_total{kind="subscribe",outcome="ok"}`], float64(1))
	assert.GreaterOrEqual(t, samples[`moqt_relay_requests_total{kind="publish_namespace",outcome="ok"}`], float64(1))
	assert.Contains(t, samples, `moqt_relay_dropped_total{reason="duplicate"}`)
	assert.Equal(t, float64(0), samples["moqt_relay_draining"])

	// A session still open holds the drain, during which health is 503.
	ls := r.client(t, "ls", nil, "ls", r.url("moqt"))
	ls.waitErr(t, ctx, "listing every namespace")
	r.signal(t, syscall.SIGTERM)
	r.waitErr(t, ctx, "event=drain") // the server's GOAWAY to every session
	code, body = getStatus(t, ctx, health)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "draining\n", body)
	require.NoError(t, r.wait(t, ctx), "the relay's exit after SIGTERM")
}

// TestRelayShutdownIsNotTheTrackEnd: a relay shut down (SIGTERM: GOAWAY,
// drain) while moqt pub, not following GOAWAY, is still reading its input
// makes the publisher end the track with GOING_AWAY, not TRACK_ENDED, so
// moqt sub exits non-zero: its copy is short. It exited 0 before, with a
// truncated file.
func TestRelayShutdownIsNotTheTrackEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r := startRelay(t, ctx)
	sub := r.client(t, "sub", nil, "sub", "-lines", r.url("https"), "files", "report")
	sub.waitErr(t, ctx, "waiting up to")
	pub := r.client(t, "pub", feedStdin, "pub", "-lines", "-follow-goaway=false", r.url("moqt"), "files", "report")
	in := &linesFeeder{w: pub.stdin}
	pub.waitErr(t, ctx, "reading stdin")
	in.write(t, 5)
	sub.waitOut(t, ctx, "line 4")
	r.signal(t, syscall.SIGTERM)
	pub.waitErr(t, ctx, "the server is shutting down (GOAWAY)")
	require.Error(t, pub.wait(t, ctx), "the input was not all published")
	require.Error(t, sub.wait(t, ctx), "the copy is short")
	assert.Contains(t, sub.stderr(), "GOING_AWAY")
	assert.NotContains(t, sub.stderr(), "TRACK_ENDED")
	_ = in.w.Close()
	require.NoError(t, r.wait(t, ctx), "the relay's exit after SIGTERM")
}
