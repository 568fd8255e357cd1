package pending

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// addr is a UDP address of host, on a port of its own.
func addr(host string, port int) net.Addr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(host), uint16(port)))
}

func evicted(t *Ticket) bool { return t.Context().Err() != nil }

// TestVictim: which connection a newcomer displaces from a full pool.
func TestVictim(t *testing.T) {
	tests := []struct {
		name   string
		held   []string // sources of the tickets, oldest first
		ready  []int    // indexes of held tickets that have set up
		from   string   // the newcomer's source
		victim int      // index in held; -1: none, the newcomer is refused
	}{
		{
			name:   "the source holding the most loses its oldest",
			held:   []string{"10.0.0.2", "127.0.0.1", "127.0.0.1", "127.0.0.1"},
			from:   "::1",
			victim: 1,
		},
		{
			name:   "a flooding source displaces its own oldest",
			held:   []string{"127.0.0.1", "127.0.0.1", "10.0.0.2", "127.0.0.1"},
			from:   "127.0.0.1",
			victim: 0,
		},
		{
			name:   "a tie goes against the newcomer's source",
			held:   []string{"10.0.0.2", "10.0.0.2", "127.0.0.1", "10.0.0.3"},
			from:   "127.0.0.1",
			victim: 2,
		},
		{
			name:   "a source with one more than the newcomer's loses",
			held:   []string{"10.0.0.2", "10.0.0.2", "10.0.0.2", "127.0.0.1"},
			from:   "127.0.0.1",
			victim: 0,
		},
		{
			name:   "between other sources tied, the older oldest",
			held:   []string{"10.0.0.2", "10.0.0.3", "10.0.0.3", "10.0.0.2"},
			from:   "::1",
			victim: 0,
		},
		{
			name:   "connections set up are never displaced",
			held:   []string{"127.0.0.1", "127.0.0.1", "127.0.0.1", "10.0.0.2"},
			ready:  []int{0, 1, 2},
			from:   "::1",
			victim: 3,
		},
		{
			name:   "a pool full of connections set up refuses",
			held:   []string{"127.0.0.1", "127.0.0.1", "10.0.0.2", "10.0.0.3"},
			ready:  []int{0, 1, 2, 3},
			from:   "::1",
			victim: -1,
		},
		{
			name:   "IPv6 addresses of one /64 are one source",
			held:   []string{"2001:db8::1", "2001:db8::2", "2001:db8:0:1::1", "2001:db8::3"},
			from:   "::1",
			victim: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPool(len(tc.held))
			var held []*Ticket
			for i, src := range tc.held {
				tk := p.Admit(addr(src, 1000+i))
				require.NotNil(t, tk)
				held = append(held, tk)
			}
			for _, i := range tc.ready {
				require.True(t, held[i].Ready())
			}
			assert.Equal(t, len(tc.ready) == len(tc.held), p.Full())

			newcomer := p.Admit(addr(tc.from, 2000))
			assert.Equal(t, tc.victim < 0, newcomer == nil)
			for i, tk := range held {
				assert.Equal(t, i == tc.victim, evicted(tk), "ticket %d (%s)", i, tc.held[i])
			}
			if tc.victim >= 0 {
				assert.ErrorIs(t, context.Cause(held[tc.victim].Context()), ErrEvicted)
				assert.False(t, held[tc.victim].Ready(), "an evicted ticket cannot set up")
			}
			setting, ready := p.Counts()
			assert.Equal(t, len(tc.held), setting+ready, "the pool stays at its size")
		})
	}
}

// TestTicketLifecycle: places are given back by Release, whatever the
// ticket's state, once.
func TestTicketLifecycle(t *testing.T) {
	p := NewPool(2)
	a := p.Admit(addr("127.0.0.1", 1))
	b := p.Admit(addr("127.0.0.1", 2))
	require.True(t, a.Ready())
	require.True(t, b.Ready())
	require.True(t, p.Full())
	assert.Nil(t, p.Admit(addr("::1", 3)), "full of connections set up")

	a.Release()
	a.Release()
	assert.False(t, p.Full())
	c := p.Admit(addr("::1", 3))
	require.NotNil(t, c)
	assert.False(t, evicted(b))
	setting, ready := p.Counts()
	assert.Equal(t, []int{1, 1}, []int{setting, ready})

	// c is displaced, then released by its holder: nothing changes.
	d := p.Admit(addr("10.0.0.1", 4))
	require.NotNil(t, d)
	assert.True(t, evicted(c))
	c.Release()
	setting, ready = p.Counts()
	assert.Equal(t, []int{1, 1}, []int{setting, ready})

	d.Release()
	b.Release()
	setting, ready = p.Counts()
	assert.Equal(t, []int{0, 0}, []int{setting, ready})
	assert.Empty(t, p.sources)
}

func TestNilTicket(t *testing.T) {
	var tk *Ticket
	assert.True(t, tk.Ready())
	assert.NoError(t, tk.Context().Err())
	assert.Nil(t, tk.Context().Done(), "never evicted")
	tk.Release()
}

func TestSourceOf(t *testing.T) {
	tests := []struct {
		addr net.Addr
		want string
	}{
		{addr("127.0.0.1", 443), "127.0.0.1/32"},
		{addr("::ffff:127.0.0.1", 443), "127.0.0.1/32"},
		{addr("::1", 443), "::/64"},
		{addr("2001:db8:1:2:3:4:5:6", 443), "2001:db8:1:2::/64"},
		{&net.UDPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, "fe80::/64"},
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}, "192.0.2.1/32"},
		{&net.UnixAddr{Name: "/tmp/x", Net: "unix"}, "invalid Prefix"},
		{nil, "invalid Prefix"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, SourceOf(tc.addr).String(), "%v", tc.addr)
	}
}
