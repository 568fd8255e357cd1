package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// records is a slog.Handler passing each record's message on.
type records chan string

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r <- rec.Message:
	default: // the test reads what it waits for; the rest may go
	}
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// await reads records until one starts with prefix.
func (r records) await(t *testing.T, prefix string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-r:
			if strings.HasPrefix(m, prefix) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q logged", prefix)
		}
	}
}

// TestNATSLossLogged: a node says when it loses NATS, and when it has it
// back; until then the cluster's changes go unseen, which an operator
// must be able to tell from the log.
func TestNATSLossLogged(t *testing.T) {
	ns := startNATS(t)
	log := make(records, 64)
	node, err := New(Config{NATS: ns.url(), URL: "moqt://127.0.0.1:1/", TTL: testTTL, Token: token, Logger: slog.New(log)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = node.Close() })
	log.await(t, "cluster: NATS connected")
	ns.stop()
	log.await(t, "cluster: NATS connection lost")
	ns.start()
	log.await(t, "cluster: NATS connected")
}
