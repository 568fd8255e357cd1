package moqt

import (
	"context"
	"net/url"

	"github.com/moqt-go/moqt/internal/testhook"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Sessions over transport.Pipe, in memory, for tests: this package's own
// (session_pipe_test.go) and, through internal/testhook, other packages'.

func init() {
	testhook.PipeSessions = func(ctx context.Context, pc transport.PipeConfig, path string, serverCfg, clientCfg any) (any, any, error) {
		sc, _ := serverCfg.(*Config)
		cc, _ := clientCfg.(*Config)
		return connectPipeAt(ctx, pc, path, sc.withDefaults(), cc.withDefaults())
	}
	testhook.PipeServer = func(pc transport.PipeConfig, path string, serverCfg any) (transport.Conn, func(context.Context) (any, error)) {
		sc, _ := serverCfg.(*Config)
		sc = sc.withDefaults()
		cconn, sconn := transport.Pipe(pipeConfig(pc, sc))
		return cconn, func(ctx context.Context) (any, error) {
			s, err := startServer(ctx, sconn, pipeInfo(pc, path), sc)
			if err != nil {
				_ = cconn.CloseWithError(uint64(wire.InternalError), "setup failed")
				return nil, err
			}
			return s, nil
		}
	}
}

// pipeInfo is what a Listener reports of a pipe connection whose client
// asked for path: on WebTransport, from the CONNECT request.
func pipeInfo(pc transport.PipeConfig, path string) transport.Info {
	if !pc.WebTransport {
		return transport.Info{}
	}
	return transport.Info{WebTransport: true, Authority: pipeAuthority, Path: path}
}

// pipeAuthority and pipePath are what a pipe client asks for: its URL's
// authority and its path and query.
const (
	pipeAuthority = "pipe.test:443"
	pipePath      = "/live?x=1"
)

// connectPipe connects a client and a server Session over a Pipe shaped
// by pc (its zero fields filled from the Configs, see pipeConfig) and runs
// their SETUP exchange, as Dial and a Server do once their transport is
// up. The Configs must have their defaults. On an error both are closed.
func connectPipe(ctx context.Context, pc transport.PipeConfig, serverCfg, clientCfg *Config) (client, server *Session, err error) {
	return connectPipeAt(ctx, pc, pipePath, serverCfg, clientCfg)
}

// connectPipeAt is connectPipe with the client asking for path (its path
// and query) rather than pipePath: tests of other packages tell their
// clients apart by it, as a server does.
func connectPipeAt(ctx context.Context, pc transport.PipeConfig, path string, serverCfg, clientCfg *Config) (client, server *Session, err error) {
	cconn, sconn := transport.Pipe(pipeConfig(pc, serverCfg, clientCfg))
	info := pipeInfo(pc, path)
	type result struct {
		s   *Session
		err error
	}
	served := make(chan result, 1)
	go func() {
		s, err := startServer(ctx, sconn, info, serverCfg)
		served <- result{s, err}
	}()
	u, err := url.Parse("moqt://" + pipeAuthority + path)
	if err != nil {
		return nil, nil, err
	}
	client, err = startClient(ctx, cconn, u, clientCfg)
	r := <-served
	if err == nil {
		err = r.err
	}
	if err != nil {
		for _, s := range []*Session{client, r.s} {
			if s != nil {
				_ = s.CloseWithError(wire.InternalError, "setup failed")
			}
		}
		return nil, nil, err
	}
	return client, r.s, nil
}

// pipeConfig fills pc's zero fields from the sessions' configurations, as
// Dial and Listen hand them to QUIC. The Pipe is symmetric: where the two
// differ, the smaller non-zero value applies.
func pipeConfig(pc transport.PipeConfig, cfgs ...*Config) transport.PipeConfig {
	fill := func(dst *int, get func(*Config) int64) {
		if *dst != 0 {
			return
		}
		for _, c := range cfgs {
			if v := int(get(c)); v > 0 && (*dst == 0 || v < *dst) {
				*dst = v
			}
		}
	}
	fill(&pc.StreamWindow, func(c *Config) int64 { return int64(c.StreamReceiveWindow) })
	fill(&pc.ConnectionWindow, func(c *Config) int64 { return int64(c.ConnectionReceiveWindow) })
	fill(&pc.MaxIncomingStreams, func(c *Config) int64 { return c.MaxIncomingStreams })
	fill(&pc.MaxIncomingUniStreams, func(c *Config) int64 { return c.MaxIncomingUniStreams })
	return pc
}
