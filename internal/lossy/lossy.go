// Package lossy is a UDP proxy for tests that loses, delays and reorders
// datagrams as a bad network path does, so that sessions, the relay and
// the programs users write can be run over one on 127.0.0.1.
//
// Each client address the proxy hears from gets a socket of its own
// towards the target, so the target sees one peer per client, as through
// a NAT. Every datagram, each way, is lost with the Link's probability or
// else delivered after its Delay plus a uniformly random part of its
// Jitter: a jitter longer than the gap between datagrams reorders them.
package lossy

import (
	"container/heap"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Link is what one direction of the path does to each datagram.
type Link struct {
	Loss   float64       // probability that a datagram is dropped, 0 to 1
	Delay  time.Duration // every datagram's delay
	Jitter time.Duration // a further delay drawn uniformly from [0, Jitter)
}

// Proxy forwards datagrams between clients and a target over Links.
type Proxy struct {
	ln           *net.UDPConn
	target       *net.UDPAddr
	up, down     Link // towards the target, towards the client
	seed         uint64
	sent, lost   atomic.Int64
	wg           sync.WaitGroup
	done         chan struct{}
	mu           sync.Mutex
	clients      map[string]*client // by the client's address; nil once closed
	nextClientID uint64
}

// client is one client's socket towards the target and the two directions
// of its path.
type client struct {
	conn     *net.UDPConn
	up, down *line
}

// maxDatagram is the largest UDP payload read.
const maxDatagram = 64 << 10

// Start listens on 127.0.0.1 and forwards to target ("host:port"), each
// datagram towards the target over up and each back over down. seed makes
// the losses and delays repeatable for the same traffic.
func Start(target string, up, down Link, seed uint64) (*Proxy, error) {
	if up.Loss < 0 || up.Loss >= 1 || down.Loss < 0 || down.Loss >= 1 {
		return nil, errors.New("lossy: Loss must be in [0, 1)")
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: ta, up: up, down: down, seed: seed,
		done: make(chan struct{}), clients: map[string]*client{}}
	p.wg.Add(1)
	go p.listen()
	return p, nil
}

// Addr is the address clients send to.
func (p *Proxy) Addr() string { return p.ln.LocalAddr().String() }

// Stats reports the datagrams delivered and those dropped so far, both
// ways.
func (p *Proxy) Stats() (delivered, dropped int64) { return p.sent.Load(), p.lost.Load() }

// Close stops forwarding, drops what is still delayed, and waits for the
// proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	clients := p.clients
	p.clients = nil
	p.mu.Unlock()
	if clients == nil {
		return nil
	}
	close(p.done)
	err := p.ln.Close()
	for _, c := range clients {
		_ = c.conn.Close()
	}
	p.wg.Wait()
	return err
}

// listen reads the clients' datagrams and sends each on towards the
// target.
func (p *Proxy) listen() {
	defer p.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if c := p.client(from); c != nil {
			c.up.put(buf[:n])
		}
	}
}

// client returns from's client, made at its first datagram.
func (p *Proxy) client(from *net.UDPAddr) *client {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clients == nil {
		return nil
	}
	key := from.String()
	if c := p.clients[key]; c != nil {
		return c
	}
	conn, err := net.DialUDP("udp", nil, p.target)
	if err != nil {
		return nil
	}
	id := p.nextClientID
	p.nextClientID++
	back := *from
	c := &client{conn: conn}
	c.up = p.newLine(p.up, 2*id, func(b []byte) { _, _ = conn.Write(b) })
	c.down = p.newLine(p.down, 2*id+1, func(b []byte) { _, _ = p.ln.WriteToUDP(b, &back) })
	p.clients[key] = c
	p.wg.Add(1)
	go func() { // the target's answers, back to the client
		defer p.wg.Done()
		buf := make([]byte, maxDatagram)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			c.down.put(buf[:n])
		}
	}()
	return c
}

// line is one direction of one client's path: it drops, delays and
// delivers datagrams on a goroutine of its own.
type line struct {
	p     *Proxy
	link  Link
	send  func([]byte)
	mu    sync.Mutex
	rng   *rand.Rand
	queue pending
	seq   uint64
	wake  chan struct{}
}

func (p *Proxy) newLine(link Link, stream uint64, send func([]byte)) *line {
	l := &line{p: p, link: link, send: send, rng: rand.New(rand.NewPCG(p.seed, stream)),
		wake: make(chan struct{}, 1)}
	p.wg.Add(1)
	go l.run()
	return l
}

// put drops b or queues a copy of it for delivery.
func (l *line) put(b []byte) {
	l.mu.Lock()
	if l.rng.Float64() < l.link.Loss {
		l.mu.Unlock()
		l.p.lost.Add(1)
		return
	}
	due := time.Now().Add(l.link.Delay)
	if l.link.Jitter > 0 {
		due = due.Add(time.Duration(l.rng.Int64N(int64(l.link.Jitter))))
	}
	l.seq++
	heap.Push(&l.queue, datagram{due: due, seq: l.seq, b: append([]byte(nil), b...)})
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run delivers each queued datagram when it is due, until the proxy
// closes.
func (l *line) run() {
	defer l.p.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		l.mu.Lock()
		var due []datagram
		now := time.Now()
		for len(l.queue) > 0 && !l.queue[0].due.After(now) {
			due = append(due, heap.Pop(&l.queue).(datagram))
		}
		wait := time.Hour
		if len(l.queue) > 0 {
			wait = l.queue[0].due.Sub(now)
		}
		l.mu.Unlock()
		for _, d := range due {
			l.send(d.b)
			l.p.sent.Add(1)
		}
		timer.Reset(wait)
		select {
		case <-l.p.done:
			return
		case <-l.wake:
		case <-timer.C:
		}
	}
}

// datagram is one queued datagram: delivered at due, in arrival order
// (seq) among those due at once.
type datagram struct {
	due time.Time
	seq uint64
	b   []byte
}

// pending is a min-heap of datagrams by due time.
type pending []datagram

func (q pending) Len() int { return len(q) }
func (q pending) Less(i, j int) bool {
	if q[i].due.Equal(q[j].due) {
		return q[i].seq < q[j].seq
	}
	return q[i].due.Before(q[j].due)
}
func (q pending) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *pending) Push(x any)   { *q = append(*q, x.(datagram)) }
func (q *pending) Pop() any {
	old := *q
	d := old[len(old)-1]
	*q = old[:len(old)-1]
	return d
}
