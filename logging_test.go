package moqt

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

var (
	// logCall finds a call that emits a log record.
	logCall = regexp.MustCompile(`(?:\blog|\.log)\.(Debug|Info|Warn|Error|Log)\(`)
	// logRecord is the start of a record as docs/logging.md describes it.
	logRecord = regexp.MustCompile(`^(?:context\.Background\(\), \w+, )?"((?:moqt|relay): [a-z_ ]+)", "event", "([a-z_]+)"`)
	// docRow is a row of docs/logging.md's tables.
	docRow = regexp.MustCompile("(?m)^\\| `((?:moqt|relay): [a-z_ ]+)` \\| `([a-z_]+)` \\| ([^|]+) \\|")
)

// TestLoggingReference keeps docs/logging.md complete and true: every log
// record the root and relay packages emit has its message and event
// there, at the level the code uses, in the documented shape; and every
// event documented is still emitted.
func TestLoggingReference(t *testing.T) {
	doc, err := os.ReadFile("docs/logging.md")
	require.NoError(t, err)
	documented := map[string]string{} // "msg/event" -> level column
	for _, m := range docRow.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]+"/"+m[2]] = strings.TrimSpace(m[3])
	}
	require.NotEmpty(t, documented)

	emitted := map[string]bool{}
	for _, dir := range []string{".", "relay"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, loc := range logCall.FindAllSubmatchIndex(src, -1) {
				level := string(src[loc[2]:loc[3]])
				rest := string(src[loc[1]:min(loc[1]+200, len(src))])
				m := logRecord.FindStringSubmatch(rest)
				if !assert.NotNil(t, m, "%s: a log record without the documented shape: %.80s", f, rest) {
					continue
				}
				key := m[1] + "/" + m[2]
				emitted[key] = true
				docLevel, ok := documented[key]
				if !assert.True(t, ok, "%s: %s is not in docs/logging.md", f, key) {
					continue
				}
				if level != "Log" {
					assert.Equal(t, level, docLevel, "%s: the level of %s", f, key)
				}
			}
		}
	}
	for key := range documented {
		assert.True(t, emitted[key], "docs/logging.md lists %s, which nothing emits", key)
	}
}

// recordLog is a slog handler's output, safe for concurrent writes.
func recordLog() (*syncBuffer, *slog.Logger) {
	var b syncBuffer
	return &b, slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestSessionLifecycleLogs: a session logs its start with what the client
// asked for and its end with code, reason and who closed it, on both ends,
// with the session's attributes; GOAWAY both ways; a session whose SETUP
// never came ends at Warn, not established.
func TestSessionLifecycleLogs(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				serverLog, sl := recordLog()
				clientLog, cl := recordLog()
				p := newPipePair(t, transport.PipeConfig{WebTransport: tr.wt}, &Config{Logger: sl}, &Config{Logger: cl})
				over := "quic"
				if tr.wt {
					over = "webtransport"
				}
				for _, l := range []*syncBuffer{serverLog, clientLog} {
					assert.Contains(t, l.String(), `level=INFO msg="moqt: session" role=`)
					assert.Contains(t, l.String(), "transport="+over+" version=moqt-21 remote=")
					assert.Contains(t, l.String(), `event=start path="/live?x=1" authority=`)
					assert.Contains(t, l.String(), "peer_implementation=moqt-go\n")
				}
				assert.Contains(t, serverLog.String(), "authority="+pipeAuthority)
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				require.NoError(t, p.server.Shutdown(ctx, ""))
				synctest.Wait()
				assert.Contains(t, serverLog.String(), `event=goaway_sent uri="" timeout_ms=10000`)
				assert.Contains(t, clientLog.String(), `event=goaway_received uri="" timeout_ms=10000`)
				assert.Contains(t, clientLog.String(), "event=goaway_drained")
				assert.Contains(t, clientLog.String(), "event=end code=NO_ERROR reason=\"\" by=local established=true")
				assert.Contains(t, serverLog.String(), "event=end code=NO_ERROR reason=\"\" by=peer established=true")
				assert.NotContains(t, serverLog.String()+clientLog.String(), "level=WARN")

				// A server that never sends SETUP.
				badLog, bl := recordLog()
				cfg := quietConfig(&Config{Logger: bl}).withDefaults()
				cc, sc := transport.Pipe(pipeConfig(transport.PipeConfig{WebTransport: tr.wt}, cfg))
				defer sc.CloseWithError(0, "")
				c := pipeSession(t, cc, true, cfg)
				// A bound past SetupTimeout's: ctx's ends with it, and
				// either could win.
				hctx, hcancel := context.WithTimeout(t.Context(), time.Minute)
				defer hcancel()
				err := c.handshake(hctx, c.pipeClientSetup())
				var se *SessionError
				require.ErrorAs(t, err, &se)
				synctest.Wait()
				assert.Contains(t, badLog.String(),
					`level=WARN msg="moqt: session" role=client`)
				assert.Contains(t, badLog.String(),
					`event=end code=CONTROL_MESSAGE_TIMEOUT reason="no SETUP from peer" by=local established=false`)
				assert.NotContains(t, badLog.String(), "event=start")
			})
		})
	}
}

// TestServeLogsDrain: Serve says when it drains and how many sessions it
// holds.
func TestServeLogsDrain(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		logs, l := recordLog()
		q := make(sessionQueue, 1)
		p := newPipePair(t, transport.PipeConfig{}, nil, nil)
		q <- p.server
		ctx, cancel := context.WithCancel(t.Context())
		served := goErr(func() error { return serveSessions(ctx, q.accept, nil, 3*time.Second, "", l) })
		synctest.Wait()
		cancel()
		require.NoError(t, <-served)
		assert.Contains(t, logs.String(), `level=INFO msg="moqt: server" event=drain sessions=1 timeout=3s`)
		code, _ := closeOf(t, p.client)
		assert.Equal(t, wire.NoError, code)
	})
}
