package moqt

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// In the flood tests one source opens connections, floodWorkers at a
// time, that never finish setting up, and legitDials clients dial
// meanwhile.
const (
	floodWorkers = 8
	legitDials   = 12
)

// floodKind is a way to hold a server's connection without finishing its
// setup.
type floodKind struct {
	name string
	alpn string // what the flood's QUIC handshake offers
	// connect sends a WebTransport CONNECT after the handshake.
	connect bool
	// legit is the scheme of the clients that must get in meanwhile.
	legit string
	// busy is the code a flood connection displaced by a newcomer is
	// closed with: on the QUIC connection, or for connect on the
	// WebTransport session.
	busy uint64
}

var floodKinds = []floodKind{
	// The QUIC handshake, then no SETUP.
	{name: "quic", alpn: transport.ProtocolDraft21, legit: "moqt", busy: uint64(wire.InternalError)},
	// WebTransport's CONNECT, then no SETUP.
	{name: "webtransport", alpn: http3.NextProtoH3, connect: true, legit: "https", busy: uint64(wire.InternalError)},
	// HTTP/3's handshake, then no CONNECT.
	{name: "h3", alpn: http3.NextProtoH3, legit: "https", busy: uint64(http3.ErrCodeExcessiveLoad)},
}

// TestServerFloodFromOneSource: a host that opens connections and never
// finishes setting them up (no SETUP, or no CONNECT) does not lock others
// out of a server, however many it opens: every client that sets up at
// once gets in, from another address (::1) or from the same one
// (127.0.0.1, another port), while such connections come from 127.0.0.1,
// several times the server's MaxPendingSessions (the default, 64, for raw
// QUIC; fewer over WebTransport, whose handshakes cost more). The flood's
// connections past the bound are closed as busy, rather than held.
func TestServerFloodFromOneSource(t *testing.T) {
	tests := []struct {
		kind      floodKind
		legitFrom string
		conns     int // the flood's connections
		pool      int // MaxPendingSessions; 0 for the default
	}{
		{kind: floodKinds[0], legitFrom: "::1", conns: 200},
		{kind: floodKinds[0], legitFrom: "127.0.0.1", conns: 200},
		{kind: floodKinds[1], legitFrom: "127.0.0.1", conns: 96, pool: 32},
		{kind: floodKinds[2], legitFrom: "::1", conns: 96, pool: 32},
	}
	for _, tc := range tests {
		t.Run(tc.kind.name+"/legit from "+tc.legitFrom, func(t *testing.T) {
			testServerFlood(t, tc.kind, tc.legitFrom, tc.conns, tc.pool)
		})
	}
}

func testServerFlood(t *testing.T, k floodKind, legitFrom string, conns, pool int) {
	// The flood must hold its places for the whole test, if the server
	// lets it: no SETUP timeout ends them meanwhile.
	cfg := withServerTLS(quietConfig(&Config{SetupTimeout: 10 * fakeGuard}))
	srv, err := Listen("[::]:0", cfg, &ServerOptions{MaxPendingSessions: pool})
	require.NoError(t, err)
	ctx := testCtx(t, 6*fakeGuard)
	var accepted sync.WaitGroup
	var sessions []*Session
	accepted.Go(func() {
		for {
			s, err := srv.Accept(ctx)
			if err != nil {
				return
			}
			sessions = append(sessions, s)
		}
	})
	t.Cleanup(func() {
		_ = srv.Close()
		accepted.Wait()
		for _, s := range sessions {
			_ = s.Close()
		}
	})
	port := srv.Addr().(*net.UDPAddr).Port
	if pool == 0 {
		pool = defaultMaxPendingSessions
	}

	f := startFlood(t, k, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, conns)

	// Each legitimate client dials while the flood goes on: the first once
	// it could have filled the server, the next ones spread over the rest.
	url := k.legit + "://" + net.JoinHostPort(legitFrom, strconv.Itoa(port)) + "/live"
	step := (conns - pool) / legitDials
	var admitted int
	var refusals []error
	f.waitAttempts(pool)
	for i := range legitDials {
		if i > 0 {
			f.waitAttempts(step)
		}
		_, clientTLS := fakeTLS()
		s, err := Dial(testCtx(t, fakeGuard), url, quietConfig(&Config{TLSConfig: clientTLS}))
		if err != nil {
			refusals = append(refusals, err)
			continue
		}
		admitted++
		_ = s.Close()
	}
	opened := f.wait(t)
	t.Logf("%s flood from 127.0.0.1 (%d connections, %d past the handshake) against %d places; legitimate %s clients from %s admitted: %d of %d",
		k.name, conns, opened, pool, k.legit, legitFrom, admitted, legitDials)
	assert.Equal(t, legitDials, admitted, "refused: %v", refusals)

	// The server holds at most its bound: the connections it took past
	// it were closed, each as busy.
	f.waitBusy(t, opened-pool)
	assert.Empty(t, f.unexpectedEnds(), "flood connections ended otherwise than as busy")
}

// flood opens connections of one kind from one UDP socket on 127.0.0.1
// and leaves them without setting up.
type flood struct {
	kind     floodKind
	tr       *quic.Transport
	target   *net.UDPAddr
	attempts chan struct{} // a token per finished attempt
	done     chan struct{} // closed once every attempt finished

	mu         sync.Mutex
	conns      []*quic.Conn  // guarded by mu
	opened     int           // connections past the handshake (and CONNECT); guarded by mu
	busy       int           // connections the server closed as busy; guarded by mu
	unexpected []error       // other ends caused by the server; guarded by mu
	changed    chan struct{} // closed and replaced when busy grows; guarded by mu
}

func startFlood(t *testing.T, k floodKind, target *net.UDPAddr, conns int) *flood {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	f := &flood{
		kind:     k,
		tr:       &quic.Transport{Conn: udp},
		target:   target,
		attempts: make(chan struct{}, conns),
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	var next sync.Mutex
	started := 0
	for range floodWorkers {
		workers.Go(func() {
			for {
				next.Lock()
				if started == conns {
					next.Unlock()
					return
				}
				started++
				next.Unlock()
				f.open(ctx)
				f.attempts <- struct{}{}
			}
		})
	}
	go func() {
		workers.Wait()
		close(f.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-f.done
		f.mu.Lock()
		conns := f.conns
		f.mu.Unlock()
		for _, c := range conns {
			_ = c.CloseWithError(0, "test over")
		}
		_ = f.tr.Close()
		_ = udp.Close()
	})
	return f
}

// open makes one connection and leaves it be. A connection the server
// refuses is not kept.
func (f *flood) open(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, fakeGuard)
	defer cancel()
	_, clientTLS := fakeTLS()
	tlsConf := clientTLS.Clone()
	tlsConf.NextProtos = []string{f.kind.alpn}
	conn, err := f.tr.Dial(ctx, f.target, tlsConf, &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
	if err != nil {
		return
	}
	f.mu.Lock()
	f.conns = append(f.conns, conn)
	f.mu.Unlock()
	ended := func() error { return context.Cause(conn.Context()) }
	endedCtx := conn.Context()
	if f.kind.connect {
		wt := &webtransport.Transport{ApplicationProtocols: []string{transport.ProtocolDraft21}}
		defer wt.Close() // only ends waiting in Dial
		cc, err := wt.NewClientConn(conn)
		if err != nil {
			return
		}
		_, sess, err := cc.Dial(ctx, "https://"+f.target.String()+"/live", nil)
		if err != nil {
			return
		}
		endedCtx = sess.Context()
		ended = func() error {
			stopped, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := sess.AcceptUniStream(stopped)
			if _, ok := errors.AsType[*webtransport.SessionError](err); ok {
				return err
			}
			// The server closes the QUIC connection a second after its
			// WT_CLOSE_SESSION (the transport's closeLinger) if this end
			// has not closed it: on a busy machine this end may not have
			// read the capsule by then, and the connection's close
			// discards it. The server closes nothing else of the flood's
			// during the test, so that close stands for the session's.
			<-conn.Context().Done()
			if ae, ok := errors.AsType[*quic.ApplicationError](context.Cause(conn.Context())); ok &&
				ae.Remote && ae.ErrorCode == quic.ApplicationErrorCode(http3.ErrCodeNoError) {
				return errCloseUnread
			}
			return err
		}
	}
	f.mu.Lock()
	f.opened++
	f.mu.Unlock()
	context.AfterFunc(endedCtx, func() { f.ended(ended()) })
}

// errCloseUnread is how a flood WebTransport session ended whose
// WT_CLOSE_SESSION the server sent but this end did not read before the
// server closed the QUIC connection under it.
var errCloseUnread = errors.New("WT_CLOSE_SESSION unread before the connection's close")

// ended sorts how a connection (or its session) ended: closed by the
// server as busy, otherwise by the server, or by this end.
func (f *flood) ended(err error) {
	var code uint64
	var remote bool
	if errors.Is(err, errCloseUnread) {
		// Its code is unknown; the only sessions the server closes
		// during the test are those it displaces.
		code, remote = f.kind.busy, true
	} else if ae, ok := errors.AsType[*quic.ApplicationError](err); ok {
		code, remote = uint64(ae.ErrorCode), ae.Remote
	} else if se, ok := errors.AsType[*webtransport.SessionError](err); ok {
		code, remote = uint64(se.ErrorCode), se.Remote
	} else if errors.Is(err, context.Canceled) {
		return // Dial gave up at the end of the test
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case remote && code == f.kind.busy:
		f.busy++
		close(f.changed)
		f.changed = make(chan struct{})
	case remote:
		f.unexpected = append(f.unexpected, err)
	}
}

// waitAttempts waits until n more attempts have finished, or all of them.
func (f *flood) waitAttempts(n int) {
	for ; n > 0; n-- {
		select {
		case <-f.attempts:
		case <-f.done:
			return
		}
	}
}

// wait waits for every attempt to finish and returns how many connections
// got past the handshake.
func (f *flood) wait(t *testing.T) int {
	select {
	case <-f.done:
	case <-testCtx(t, 3*fakeGuard).Done():
		require.FailNow(t, "the flood did not finish")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened
}

// waitBusy waits until the server has closed n connections as busy.
func (f *flood) waitBusy(t *testing.T, n int) {
	ctx := testCtx(t, fakeGuard)
	for {
		f.mu.Lock()
		busy, changed := f.busy, f.changed
		f.mu.Unlock()
		if busy >= n {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			require.FailNow(t, "too few flood connections closed as busy", "%d of at least %d", busy, n)
		}
	}
}

func (f *flood) unexpectedEnds() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unexpected
}
