// Package moqttest builds moqt sessions over the in-memory transport for
// the tests of packages other than moqt (relay, ...), which otherwise use
// moqt's public API. It is for tests only.
package moqttest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/testhook"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// setupGuard bounds the SETUP exchange: it only turns a hang into a
// failure (inside a synctest bubble, it passes only if every goroutine of
// the bubble is stuck).
const setupGuard = 10 * time.Second

// Pair connects a client session, configured by clientCfg, to a server
// session whose serverCfg.Handler serves it (a relay, say), over a
// transport.Pipe shaped by pc (pc.WebTransport imitates WebTransport), and
// returns both once SETUP has been exchanged. Nil Configs take the
// defaults, but a nil Logger is replaced by one that discards. Both
// sessions are closed when the test ends, and the cleanup waits for them.
// Call it inside a testing/synctest bubble to run the sessions' timers on
// the bubble's clock: the sessions then belong to the bubble and must end
// in it, which the cleanup sees to.
// The client asks for "moqt://pipe.test:443/live?x=1"; PairAt names
// another path.
func Pair(t testing.TB, pc transport.PipeConfig, serverCfg, clientCfg *moqt.Config) (client, server *moqt.Session) {
	t.Helper()
	return PairAt(t, pc, "/live?x=1", serverCfg, clientCfg)
}

// PairAt is Pair with the client asking for path ("/viewer", say: its
// path and query), which the server's Session.Path reports, so that a test
// can tell its clients apart as a server does.
func PairAt(t testing.TB, pc transport.PipeConfig, path string, serverCfg, clientCfg *moqt.Config) (client, server *moqt.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupGuard)
	defer cancel()
	c, s, err := testhook.PipeSessions(ctx, pc, path, quiet(serverCfg), quiet(clientCfg))
	if err != nil {
		t.Fatalf("moqttest: connecting over a pipe: %v", err)
	}
	client, server = c.(*moqt.Session), s.(*moqt.Session)
	t.Cleanup(func() {
		_ = client.Close()
		_ = server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
	})
	return client, server
}

// Raw connects a raw client end of a transport.Pipe shaped by pc, asking
// for path, to a server session configured by serverCfg (its Handler
// serving it): setup plays the client's side of SETUP, raw, while the
// server runs its own, and Raw returns both once the server's is done. The
// test then sends what it likes over client. Both end when the test ends.
func Raw(t testing.TB, pc transport.PipeConfig, path string, serverCfg *moqt.Config, setup func(client transport.Conn)) (client transport.Conn, server *moqt.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupGuard)
	defer cancel()
	client, serve := testhook.PipeServer(pc, path, quiet(serverCfg))
	type result struct {
		s   any
		err error
	}
	served := make(chan result, 1)
	go func() {
		s, err := serve(ctx)
		served <- result{s, err}
	}()
	setup(client)
	r := <-served
	if r.err != nil {
		_ = client.CloseWithError(0, "")
		t.Fatalf("moqttest: serving a raw pipe client: %v", r.err)
	}
	server = r.s.(*moqt.Session)
	t.Cleanup(func() {
		_ = client.CloseWithError(0, "")
		_ = server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
	})
	return client, server
}

// RawPeer is Raw with the client's side of SETUP played for the test
// (raw QUIC sends the path and authority in it; WebTransport's CONNECT
// carries them, §9.1), and the server's control stream read and ignored:
// the test speaks only the requests and data that follow, as a peer the
// library would not be.
func RawPeer(t testing.TB, pc transport.PipeConfig, path string, serverCfg *moqt.Config) (client transport.Conn, server *moqt.Session) {
	t.Helper()
	client, server = Raw(t, pc, path, serverCfg, func(conn transport.Conn) {
		setup := &wire.Setup{}
		if !conn.WebTransport() {
			setup.Path, setup.Authority = wire.Some(path), wire.Some("pipe.test:443")
		}
		b, err := wire.AppendMessage(wire.Versions[0], nil, setup)
		if err == nil {
			var ctrl transport.SendStream
			if ctrl, err = conn.OpenUniStream(); err == nil {
				_, err = ctrl.Write(b)
			}
		}
		if err != nil {
			t.Fatalf("moqttest: sending SETUP: %v", err)
		}
	})
	go func() {
		s, err := client.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		buf := make([]byte, 1024)
		for {
			if _, err := s.Read(buf); err != nil {
				return
			}
		}
	}()
	return client, server
}

// quiet returns a copy of cfg, or a new Config, whose nil Logger
// discards.
func quiet(cfg *moqt.Config) *moqt.Config {
	var out moqt.Config
	if cfg != nil {
		out = *cfg
	}
	if out.Logger == nil {
		out.Logger = discard
	}
	return &out
}

var discard = slog.New(slog.DiscardHandler)

// AnswerRawSubscribe answers, as a raw publisher on conn, the SUBSCRIBE
// whose request stream req the test has read: SUBSCRIBE_OK with Track Alias
// 1, one subgroup stream carrying one object "hello", then PUBLISH_DONE
// TRACK_ENDED counting count data streams (more than one: streams that
// never come), and the FIN.
func AnswerRawSubscribe(t testing.TB, conn transport.Conn, req transport.Stream, count uint64) {
	t.Helper()
	send := func(m wire.Message) {
		b, err := wire.AppendMessage(wire.Versions[0], nil, m)
		if err == nil {
			_, err = req.Write(b)
		}
		if err != nil {
			t.Fatalf("moqttest: sending %s: %v", m.Type(), err)
		}
	}
	send(&wire.SubscribeOK{TrackAlias: 1})
	ctx, cancel := context.WithTimeout(context.Background(), setupGuard)
	defer cancel()
	data, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		t.Fatalf("moqttest: opening a data stream: %v", err)
	}
	enc := wire.SubgroupEncoder{Header: wire.SubgroupHeader{TrackAlias: 1, DefaultPriority: true}}
	b, err := enc.Header.Append(nil)
	if err == nil {
		b, err = enc.AppendObject(b, wire.SubgroupObject{PayloadLength: 5})
	}
	if err == nil {
		_, err = data.Write(append(b, "hello"...))
	}
	if err == nil {
		err = data.Close()
	}
	if err != nil {
		t.Fatalf("moqttest: writing the data stream: %v", err)
	}
	send(&wire.PublishDone{StatusCode: wire.DoneTrackEnded, StreamCount: count, ErrorReason: "end"})
	if err := req.Close(); err != nil {
		t.Fatalf("moqttest: finishing the request stream: %v", err)
	}
}
