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
	testhook.PipeSessions = func(ctx context.Context, pc transport.PipeConfig, serverCfg, clientCfg any) (any, any, error) {
		sc, _ := serverCfg.(*Config)
		cc, _ := clientCfg.(*Config)
		return connectPipe(ctx, pc, sc.withDefaults(), cc.withDefaults())
	}
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
	cconn, sconn := transport.Pipe(pipeConfig(pc, serverCfg, clientCfg))
	var info transport.Info
	if pc.WebTransport {
		// From the CONNECT request, as the Listener reports it.
		info = transport.Info{WebTransport: true, Authority: pipeAuthority, Path: pipePath}
	}
	type result struct {
		s   *Session
		err error
	}
	served := make(chan result, 1)
	go func() {
		s, err := startServer(ctx, sconn, info, serverCfg)
		served <- result{s, err}
	}()
	u, _ := url.Parse("moqt://" + pipeAuthority + pipePath)
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
