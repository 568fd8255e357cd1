package cluster

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// udpProxy forwards UDP datagrams to a target, one socket per client, and
// can be cut: from then on it drops everything, as a dead host would. It
// counts the bytes it forwards, both ways: the inter-node traffic.
type udpProxy struct {
	ln     *net.UDPConn
	target *net.UDPAddr
	dead   atomic.Bool
	bytes  atomic.Int64 // UDP payload bytes forwarded, both ways
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[string]*net.UDPConn
}

func startProxy(t *testing.T, target string) *udpProxy {
	ta, err := net.ResolveUDPAddr("udp", target)
	require.NoError(t, err)
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	p := &udpProxy{ln: ln, target: ta, conns: map[string]*net.UDPConn{}}
	p.wg.Add(1)
	go p.run()
	return p
}

func (p *udpProxy) addr() string { return p.ln.LocalAddr().String() }

func (p *udpProxy) cut() { p.dead.Store(true) }

func (p *udpProxy) run() {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.dead.Load() {
			continue
		}
		c := p.conn(from)
		if c != nil {
			p.bytes.Add(int64(n))
			_, _ = c.Write(buf[:n])
		}
	}
}

// conn is the socket towards the target for client from.
func (p *udpProxy) conn(from *net.UDPAddr) *net.UDPConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[from.String()]; c != nil || p.conns == nil {
		return c
	}
	c, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil
	}
	p.conns[from.String()] = c
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if !p.dead.Load() {
				p.bytes.Add(int64(n))
				_, _ = p.ln.WriteToUDP(buf[:n], from)
			}
		}
	}()
	return c
}

func (p *udpProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}
