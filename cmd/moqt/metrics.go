package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/relay"
)

// relayMetrics keeps a relay's counters (relay.Metrics) and writes them in
// the Prometheus text exposition format (version 0.0.4), by hand: the
// module takes no Prometheus dependency. Metric names are stable:
// dashboards and alerts name them.
type relayMetrics struct {
	sessions      [2]atomic.Int64 // open now, [1] upstream
	sessionsTotal [2]atomic.Uint64
	objectsIn     atomic.Uint64
	bytesIn       atomic.Uint64
	objectsOut    atomic.Uint64
	bytesOut      atomic.Uint64
	draining      atomic.Bool

	mu       sync.Mutex           // guards the fields below
	requests map[[2]string]uint64 // by kind and outcome
	drops    map[string]uint64    // objects, by reason
	cut      uint64               // relay.DropSlowSubscriber: subscriptions
}

func newRelayMetrics() *relayMetrics {
	m := &relayMetrics{requests: map[[2]string]uint64{}, drops: map[string]uint64{}}
	// Every series the relay can report exists from the start, at 0, so
	// that rate() and absence alerts work before the first event.
	for _, k := range []string{relay.KindSubscribe, relay.KindPublish, relay.KindTrackStatus, relay.KindFetch,
		relay.KindPublishNamespace, relay.KindSubscribeNamespace, relay.KindSubscribeTracks, relay.KindOther} {
		for _, o := range []string{relay.OutcomeOK, relay.OutcomeUnauthorized, relay.OutcomeNotFound,
			relay.OutcomeTimeout, relay.OutcomeRefused, relay.OutcomeCancelled} {
			m.requests[[2]string{k, o}] = 0
		}
	}
	for _, r := range []string{relay.DropDuplicate, relay.DropWriteFailed, relay.DropDatagram,
		relay.DropDatagramQueue, relay.DropIncomplete, relay.DropMalformed} {
		m.drops[r] = 0
	}
	return m
}

func upstreamIndex(upstream bool) int {
	if upstream {
		return 1
	}
	return 0
}

func (m *relayMetrics) SessionStarted(upstream bool) {
	m.sessions[upstreamIndex(upstream)].Add(1)
	m.sessionsTotal[upstreamIndex(upstream)].Add(1)
}

func (m *relayMetrics) SessionEnded(upstream bool) { m.sessions[upstreamIndex(upstream)].Add(-1) }

func (m *relayMetrics) Request(kind, outcome string) {
	m.mu.Lock()
	m.requests[[2]string{kind, outcome}]++
	m.mu.Unlock()
}

func (m *relayMetrics) ObjectsIn(objects, bytes int) {
	m.objectsIn.Add(uint64(objects))
	m.bytesIn.Add(uint64(bytes))
}

func (m *relayMetrics) ObjectsOut(objects, bytes int) {
	m.objectsOut.Add(uint64(objects))
	m.bytesOut.Add(uint64(bytes))
}

func (m *relayMetrics) Dropped(reason string, objects int) {
	m.mu.Lock()
	if reason == relay.DropSlowSubscriber {
		m.cut += uint64(objects)
	} else {
		m.drops[reason] += uint64(objects)
	}
	m.mu.Unlock()
}

// metricWriter writes one metric family after another.
type metricWriter struct {
	w   io.Writer
	err error
}

func (mw *metricWriter) family(name, typ, help string) {
	mw.printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels alternate names and values.
func (mw *metricWriter) sample(name string, value any, labels ...string) {
	var sb strings.Builder
	sb.WriteString(name)
	if len(labels) > 0 {
		sb.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "%s=\"%s\"", labels[i], escapeLabel(labels[i+1]))
		}
		sb.WriteByte('}')
	}
	mw.printf("%s %v\n", sb.String(), value)
}

func (mw *metricWriter) printf(format string, args ...any) {
	if mw.err == nil {
		_, mw.err = fmt.Fprintf(mw.w, format, args...)
	}
}

// escapeLabel escapes a label value as the text format requires.
func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

// writeText writes every metric in the Prometheus text format.
func (m *relayMetrics) writeText(w io.Writer) error {
	mw := &metricWriter{w: w}
	kinds := []string{"false", "true"}

	mw.family("moqt_relay_sessions", "gauge", "Sessions open now: downstream (clients) and upstream (relays this one dialed).")
	for i, up := range kinds {
		mw.sample("moqt_relay_sessions", m.sessions[i].Load(), "upstream", up)
	}
	mw.family("moqt_relay_sessions_total", "counter", "Sessions started.")
	for i, up := range kinds {
		mw.sample("moqt_relay_sessions_total", m.sessionsTotal[i].Load(), "upstream", up)
	}

	m.mu.Lock()
	requests := maps.Clone(m.requests)
	drops := maps.Clone(m.drops)
	cut := m.cut
	m.mu.Unlock()

	mw.family("moqt_relay_requests_total", "counter", "Requests received and answered, by kind (subscribe, fetch, ...) and outcome (ok, not_found, ...).")
	keys := slices.SortedFunc(maps.Keys(requests), func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	for _, k := range keys {
		mw.sample("moqt_relay_requests_total", requests[k], "kind", k[0], "outcome", k[1])
	}

	mw.family("moqt_relay_objects_in_total", "counter", "Objects received from publishers.")
	mw.sample("moqt_relay_objects_in_total", m.objectsIn.Load())
	mw.family("moqt_relay_object_bytes_in_total", "counter", "Payload bytes of the objects received from publishers.")
	mw.sample("moqt_relay_object_bytes_in_total", m.bytesIn.Load())
	mw.family("moqt_relay_objects_out_total", "counter", "Objects forwarded to a track's subscribers, counted once for all of them.")
	mw.sample("moqt_relay_objects_out_total", m.objectsOut.Load())
	mw.family("moqt_relay_object_bytes_out_total", "counter", "Payload bytes of the objects forwarded, counted once for all of a track's subscribers.")
	mw.sample("moqt_relay_object_bytes_out_total", m.bytesOut.Load())

	mw.family("moqt_relay_dropped_total", "counter", "Objects received and not forwarded, by reason (incomplete: upstream streams cut short, one per stream).")
	for _, r := range slices.Sorted(maps.Keys(drops)) {
		mw.sample("moqt_relay_dropped_total", drops[r], "reason", r)
	}
	mw.family("moqt_relay_subscribers_cut_total", "counter", "Downstream subscriptions ended for falling too far behind (TOO_FAR_BEHIND, or EXCESSIVE_LOAD past a backlog budget).")
	mw.sample("moqt_relay_subscribers_cut_total", cut)

	mw.family("moqt_relay_draining", "gauge", "1 while the relay drains its sessions before exiting, else 0.")
	draining := 0
	if m.draining.Load() {
		draining = 1
	}
	mw.sample("moqt_relay_draining", draining)
	return mw.err
}
