// Package pending bounds the connections a server holds before its
// application takes them, without letting one source lock the others out.
//
// A Pool has a fixed number of places. A connection takes one when its
// QUIC handshake completes (Admit) and holds it while it sets up, which
// the peer controls: WebTransport's CONNECT, MoQT's SETUP. Once set up
// (Ticket.Ready) it is a real client waiting for the application, and it
// keeps its place until the application takes it or it ends
// (Ticket.Release). A server that refused newcomers once every place was
// taken could be locked out by one host opening connections that never set
// up. Instead, a newcomer that finds the pool full takes the place of a
// connection still setting up: the oldest one of the source that holds the
// most such places. Only a pool full of connections set up refuses
// newcomers. A client that sets up promptly therefore gets in whatever one
// source does, even from that source, unless a pool's worth of connections
// arrives while it sets up.
package pending

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// ErrEvicted is the cause of a Ticket's Context once a newcomer took its
// place.
var ErrEvicted = errors.New("pending: place taken by a newer connection")

// Pool is a bounded set of places. Its methods are safe for concurrent use.
type Pool struct {
	size int

	mu      sync.Mutex
	sources map[netip.Prefix][]*Ticket // tickets setting up, by source, oldest first; guarded by mu
	setting int                        // tickets in sources; guarded by mu
	ready   int                        // tickets set up and not released; guarded by mu
	next    uint64                     // order of the next ticket; guarded by mu
}

// NewPool returns a Pool of size places, at least one.
func NewPool(size int) *Pool {
	return &Pool{size: max(size, 1), sources: make(map[netip.Prefix][]*Ticket)}
}

// Full reports whether a newcomer would find no place: every place is held
// by a connection that has set up. A server refuses connections before
// their handshake while it holds.
func (p *Pool) Full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready >= p.size
}

// Admit takes a place for a connection from addr, displacing a connection
// still setting up if there is no free place, or returns nil if the pool
// is Full. The displaced connection's Ticket has its Context cancelled
// with ErrEvicted; its holder closes it.
func (p *Pool) Admit(addr net.Addr) *Ticket {
	src := SourceOf(addr)
	p.mu.Lock()
	var victim *Ticket
	if p.setting+p.ready >= p.size {
		victim = p.victim(src)
		if victim == nil {
			p.mu.Unlock()
			return nil
		}
		p.unlink(victim)
		victim.state = gone
	}
	t := &Ticket{pool: p, source: src, order: p.next}
	t.ctx, t.cancel = context.WithCancelCause(context.Background())
	p.next++
	p.sources[src] = append(p.sources[src], t)
	p.setting++
	p.mu.Unlock()
	if victim != nil {
		victim.cancel(ErrEvicted)
	}
	return t
}

// victim picks the ticket a newcomer from src displaces: the oldest of the
// source with the most tickets setting up, the newcomer counted with its
// own source, which loses ties, so that no source gains a place at the
// expense of one that holds no more. Between other sources a tie goes
// against the one whose oldest ticket is older. Nil if none is setting up.
// Called with mu held.
func (p *Pool) victim(src netip.Prefix) *Ticket {
	var best []*Ticket
	bestN, bestOwn := 0, false
	for s, ts := range p.sources {
		n, own := len(ts), s == src
		if own {
			n++
		}
		switch {
		case n > bestN, n == bestN && own:
		case n == bestN && !bestOwn && ts[0].order < best[0].order:
		default:
			continue
		}
		best, bestN, bestOwn = ts, n, own
	}
	if best == nil {
		return nil
	}
	return best[0]
}

// unlink removes t from the tickets setting up. Called with mu held.
func (p *Pool) unlink(t *Ticket) {
	ts := p.sources[t.source]
	i := slices.Index(ts, t)
	if i < 0 {
		return
	}
	if len(ts) == 1 {
		delete(p.sources, t.source)
	} else {
		p.sources[t.source] = slices.Delete(ts, i, i+1)
	}
	p.setting--
}

// Counts returns how many places are held by connections setting up and
// by connections set up.
func (p *Pool) Counts() (setting, ready int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.setting, p.ready
}

// SourceOf returns the source a connection from addr counts against: its
// IPv4 address, or the /64 prefix of its IPv6 address, the block one host
// or site is usually given, so that a host cannot pass as many sources by
// using many addresses of its block. An IPv4-mapped IPv6 address (a
// dual-stack socket) is its IPv4 address. Addresses that are not IP ones
// all count as one source.
func SourceOf(addr net.Addr) netip.Prefix {
	var ip netip.Addr
	switch a := addr.(type) {
	case *net.UDPAddr:
		ip = a.AddrPort().Addr()
	case nil:
		return netip.Prefix{}
	default:
		ap, err := netip.ParseAddrPort(addr.String())
		if err != nil {
			return netip.Prefix{}
		}
		ip = ap.Addr()
	}
	ip = ip.Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	prefix, err := ip.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return prefix
}

// Ticket is one connection's place in a Pool. A nil *Ticket holds no place
// in any pool: it is never evicted, Ready reports true and Release does
// nothing.
type Ticket struct {
	pool   *Pool
	source netip.Prefix
	order  uint64
	state  ticketState // guarded by pool.mu

	ctx    context.Context
	cancel context.CancelCauseFunc
}

type ticketState uint8

const (
	settingUp ticketState = iota // evictable
	ready                        // set up, waiting for the application
	gone                         // released or evicted
)

// Context ends, with ErrEvicted as its cause, when a newcomer takes the
// ticket's place. Its holder then closes the connection. It never ends
// otherwise.
func (t *Ticket) Context() context.Context {
	if t == nil {
		return context.Background()
	}
	return t.ctx
}

// Ready marks the connection as set up: its place can no longer be taken.
// It reports false if the place was taken already, or released.
func (t *Ticket) Ready() bool {
	if t == nil {
		return true
	}
	p := t.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if t.state != settingUp {
		return false
	}
	p.unlink(t)
	t.state = ready
	p.ready++
	return true
}

// Release gives the place back. Calling it again, or after an eviction,
// does nothing.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	p := t.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	switch t.state {
	case settingUp:
		p.unlink(t)
	case ready:
		p.ready--
	}
	t.state = gone
}
