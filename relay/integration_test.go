package relay

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Tests over the real transports, on loopback: what only exists there,
// the Dialer's dial to a URL and its redial, and WebTransport's HTTP path.
// Every other relay test runs over pipes in a synctest bubble.

// startNetNode starts a relay with cfg (Authorize defaults to AllowAll)
// listening on a loopback UDP port for scheme's clients; everything ends
// with the test.
func startNetNode(t *testing.T, scheme string, cfg Config, sessCfg *moqt.Config) *node {
	t.Helper()
	if cfg.Authorize == nil {
		cfg.Authorize = AllowAll
	}
	n := newNode(t, scheme, cfg, sessCfg)
	cert, hash, err := moqt.GenerateCertificate()
	require.NoError(t, err)
	n.hash = hash
	mc := *n.cfg
	mc.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	n.srv, err = moqt.Listen("127.0.0.1:0", &mc, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			s, err := n.srv.Accept(ctx)
			if err != nil {
				return
			}
			n.arrive(s.Path(), s)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		n.mu.Lock()
		list := make([]*moqt.Session, 0, len(n.sessions))
		for _, s := range n.sessions {
			list = append(list, s)
		}
		n.mu.Unlock()
		for _, s := range list {
			_ = s.Close()
		}
		_ = n.relay.Close()
		_ = n.srv.Close()
	})
	return n
}

// url is the node's URL for path.
func (n *node) url(path string) string {
	return n.scheme + "://" + n.srv.Addr().String() + path
}

// netDial dials the node at path and waits for the relay's end to be
// accepted.
func (n *node) netDial(path string, cfg *moqt.Config) (client, server *moqt.Session) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := moqt.Dial(ctx, n.url(path), cfg)
	require.NoError(n.t, err)
	n.t.Cleanup(func() { _ = c.Close() })
	return c, n.awaitSession(ctx, path)
}

// awaitSession returns the session the relay accepted from path, once its
// Server has handed it over: a client can be done with SETUP first.
func (n *node) awaitSession(ctx context.Context, path string) *moqt.Session {
	n.t.Helper()
	for {
		n.mu.Lock()
		s, arrived := n.sessions[path], n.arrived
		n.mu.Unlock()
		if s != nil {
			return s
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			n.t.Fatalf("the relay did not accept %s", path)
		}
	}
}

// TestDialerRedials replaces an upstream session that ended.
func TestDialerRedials(t *testing.T) {
	origin := startNetNode(t, "moqt", Config{}, nil)
	d := DialUpstream(origin.url("/edge"), origin.clientConfig(nil))
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s1, err := d.Session(ctx, nil)
	require.NoError(t, err)
	same, err := d.Session(ctx, nil)
	require.NoError(t, err)
	assert.Same(t, s1, same, "one session")
	require.NoError(t, s1.Close())
	s2, err := d.Session(ctx, nil)
	require.NoError(t, err)
	assert.NotSame(t, s1, s2)
	require.NoError(t, d.Close())
	<-s2.Context().Done()
	_, err = d.Session(ctx, nil)
	assert.ErrorIs(t, err, ErrDialerClosed)
}

// lateDialer is an Upstream whose Dialer is made once the relay it serves,
// its Handler, exists; until then its callers wait. Setting a Handler in
// the moqt.Config after DialUpstream got it would race (for the detector)
// with a dial the relay starts at once.
type lateDialer struct {
	ready chan struct{}
	d     *Dialer
}

func (l *lateDialer) Session(ctx context.Context, ns wire.Namespace) (*moqt.Session, error) {
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return l.d.Session(ctx, ns)
}

// TestNetThreeRelayChain carries one publisher's track through an origin
// to subscribers on two edges whose Dialers dial it, over raw QUIC and
// WebTransport: the relays' sessions tell their clients apart by path.
func TestNetThreeRelayChain(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			origin := startNetNode(t, scheme, Config{}, nil)
			var edges []*node
			for _, name := range []string{"/edge1", "/edge2"} {
				up := &lateDialer{ready: make(chan struct{})}
				edge := startNetNode(t, scheme, Config{Upstream: up}, nil)
				up.d = DialUpstream(origin.url(name), origin.clientConfig(edge.relay))
				close(up.ready)
				t.Cleanup(func() { _ = up.d.Close() })
				edges = append(edges, edge)
			}
			tr, err := moqt.NewLocalTrack(testTrack, nil)
			require.NoError(t, err)
			pc, _ := origin.dial("/publisher", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = tr.Publish(ctx, pc, wire.Params{}, moqt.AcceptOptions{})
			require.NoError(t, err)

			var subs []*moqt.Subscription
			for i, edge := range edges {
				c, s := edge.dial(fmt.Sprintf("/viewer%d", i), nil)
				assert.Equal(t, fmt.Sprintf("/viewer%d", i), s.Path())
				sub, err := subscribe(t, c, testTrack, wire.Params{})
				require.NoError(t, err, "subscriber %d", i)
				subs = append(subs, sub)
			}
			origin.awaitSession(ctx, "/edge1") // each edge dialed its URL
			origin.awaitSession(ctx, "/edge2")
			for g := range uint64(2) {
				writeGroup(t, tr, g, 3)
			}
			for i, sub := range subs {
				got := readAll(t, sub, 6)
				slices.SortFunc(got, func(a, b moqt.Object) int { return a.Location.Compare(b.Location) })
				for j, o := range got {
					assert.Equal(t, wire.Location{Group: uint64(j / 3), Object: uint64(j % 3)}, o.Location, "subscriber %d", i)
					assert.Equal(t, payload(o.Location.Group, o.Location.Object), o.Payload)
				}
			}
			tr.End(wire.DoneTrackEnded, "over")
			for _, sub := range subs {
				assert.Equal(t, wire.DoneTrackEnded, doneCode(t, sub))
			}
		})
	}
}

// TestDialerFollowsGoaway: after the upstream's GOAWAY, the Dialer's next
// session is dialed at the New Session URI (§9.2: the client MUST use it),
// and the old one is retired: closed once its requests are done.
func TestDialerFollowsGoaway(t *testing.T) {
	for _, scheme := range schemes {
		t.Run(scheme, func(t *testing.T) {
			b := startNetNode(t, scheme, Config{}, nil)
			c := startNetNode(t, scheme, Config{}, nil)
			cfg := b.clientConfig(nil)
			cfg.ServerCertificateHashes = append(cfg.ServerCertificateHashes, c.hash)
			d := DialUpstream(b.url("/edge"), cfg)
			defer d.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s1, err := d.Session(ctx, nil)
			require.NoError(t, err)
			go func() { _ = b.awaitSession(ctx, "/edge").Shutdown(ctx, c.url("/edge")) }()
			<-s1.GoingAway()
			s2, err := d.Session(ctx, nil)
			require.NoError(t, err)
			assert.NotSame(t, s1, s2)
			c.awaitSession(ctx, "/edge") // dialed at the New Session URI
			select {
			case <-s1.Context().Done(): // nothing open: retired at once
			case <-ctx.Done():
				t.Fatal("the old session was not retired")
			}
			same, err := d.Session(ctx, nil)
			require.NoError(t, err)
			assert.Same(t, s2, same)
		})
	}
}

// TestDialerRetiresBounded: an upstream that sends GOAWAY on every session
// at once, while the relay keeps requests open on each, has the Dialer keep
// at most maxRetired of them; past that the session going away serves on,
// rather than the Dialer dialing without end.
func TestDialerRetiresBounded(t *testing.T) {
	b := startNetNode(t, "moqt", Config{}, nil)
	d := DialUpstream(b.url("/edge"), b.clientConfig(nil))
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[*moqt.Session]bool{}
	var last, prev *moqt.Session
	for range maxRetired + 3 {
		s, err := d.Session(ctx, nil)
		require.NoError(t, err)
		last = s
		if seen[s] {
			continue
		}
		seen[s] = true
		_, err = s.SubscribeNamespace(ctx, wire.NewNamespace("held"), wire.Params{}) // open while it drains
		require.NoError(t, err)
		sb := b.nextSession(ctx, "/edge", prev)
		prev = sb
		go func() { _ = sb.Shutdown(ctx, "") }()
		select {
		case <-s.GoingAway():
		case <-ctx.Done():
			t.Fatal("no GOAWAY")
		}
	}
	assert.Len(t, seen, maxRetired+1, "the current session and maxRetired retired ones")
	assert.Nil(t, last.Context().Err(), "the last one, going away, serves on")
}

// nextSession waits for the relay to accept a session from path other
// than prev.
func (n *node) nextSession(ctx context.Context, path string, prev *moqt.Session) *moqt.Session {
	n.t.Helper()
	for {
		n.mu.Lock()
		s, arrived := n.sessions[path], n.arrived
		n.mu.Unlock()
		if s != nil && s != prev {
			return s
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			n.t.Fatalf("the relay did not accept another %s", path)
		}
	}
}
