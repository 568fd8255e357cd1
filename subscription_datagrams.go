package moqt

import "sync"

// datagramRing holds a subscription's datagrams not yet read, up to
// datagramQueue of them; beyond that the oldest are dropped, counted. Its
// ring is allocated at the first datagram and grows as needed, so that a
// subscription that never receives one (most are carried on streams, and
// an idle one receives nothing) holds no buffer for them.
type datagramRing struct {
	// ready holds a token while the ring may be non-empty: readers select
	// on it beside their other channels, then pop.
	ready chan struct{}

	mu      sync.Mutex
	buf     []Object // ring; nil until the first datagram
	head, n int
	dropped uint64
}

func (q *datagramRing) init() { q.ready = make(chan struct{}, 1) }

// push queues obj, dropping the oldest datagram when the ring is full.
func (q *datagramRing) push(obj Object) {
	q.mu.Lock()
	switch {
	case q.n == len(q.buf) && len(q.buf) < datagramQueue:
		grown := make([]Object, min(max(2*len(q.buf), 8), datagramQueue))
		for i := range q.n {
			grown[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = grown, 0
	case q.n == len(q.buf):
		q.buf[q.head] = Object{}
		q.head = (q.head + 1) % len(q.buf)
		q.n--
		q.dropped++
	}
	q.buf[(q.head+q.n)%len(q.buf)] = obj
	q.n++
	q.mu.Unlock()
	q.signal()
}

// pop takes the oldest datagram, if any. A token is left in ready while
// more remain, for the next reader.
func (q *datagramRing) pop() (Object, bool) {
	q.mu.Lock()
	if q.n == 0 {
		q.mu.Unlock()
		return Object{}, false
	}
	obj := q.buf[q.head]
	q.buf[q.head] = Object{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	more := q.n > 0
	q.mu.Unlock()
	if more {
		q.signal()
	}
	return obj, true
}

func (q *datagramRing) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// empty reports whether no datagram waits.
func (q *datagramRing) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n == 0
}

func (q *datagramRing) droppedCount() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}
