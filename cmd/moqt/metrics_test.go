package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/relay"
)

func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestMetricsText(t *testing.T) {
	m := newRelayMetrics()
	m.SessionStarted(false)
	m.SessionStarted(false)
	m.SessionStarted(true)
	m.SessionEnded(false)
	m.Request(relay.KindSubscribe, relay.OutcomeOK)
	m.Request("weird\"kind\\", "x\ny")
	m.ObjectsIn(3, 300)
	m.ObjectsOut(2, 200)
	m.Dropped(relay.DropDuplicate, 4)
	m.Dropped(relay.DropSlowSubscriber, 1)
	var sb strings.Builder
	require.NoError(t, m.writeText(&sb))
	text := sb.String()
	for _, want := range []string{
		"# HELP moqt_relay_sessions ",
		"# TYPE moqt_relay_sessions gauge\n",
		`moqt_relay_sessions{upstream="false"} 1` + "\n",
		`moqt_relay_sessions{upstream="true"} 1` + "\n",
		`moqt_relay_sessions_total{upstream="false"} 2` + "\n",
		`moqt_relay_requests_total{kind="subscribe",outcome="ok"} 1` + "\n",
		`moqt_relay_requests_total{kind="fetch",outcome="not_found"} 0` + "\n",
		`moqt_relay_requests_total{kind="weird\"kind\\",outcome="x\ny"} 1` + "\n",
		"moqt_relay_objects_in_total 3\n",
		"moqt_relay_object_bytes_in_total 300\n",
		"moqt_relay_objects_out_total 2\n",
		"moqt_relay_object_bytes_out_total 200\n",
		`moqt_relay_dropped_total{reason="duplicate"} 4` + "\n",
		"moqt_relay_subscribers_cut_total 1\n",
		"moqt_relay_draining 0\n",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, `reason="slow_subscriber"`, "cut subscribers are counted apart")
}
