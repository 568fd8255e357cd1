package bench

// Chains: one publisher, a forwarder in the middle, many subscribers, each
// on a connection of its own, all in this process over loopback QUIC.
// Every path moves the same objects the same way: the publisher writes
// groups, one stream per group, the forwarder reads each object and writes
// it to a stream of its own per subscriber, and each subscriber reads its
// streams to their end. What differs is what carries them:
//
//   - bare-quic: quic-go and nothing else (BareForwarder), the ceiling.
//   - moqt-hop: a moqt subscription read by a few lines of forwarding code
//     that write to a LocalTrack serving the subscribers (MoQTHop).
//   - relay: the relay package between a moqt publisher and moqt
//     subscribers (RelayChain).
//
// Chain runs any of them: Move for throughput and CPU time per delivered
// object (it is a Fanout), Latency for the delay from publish to
// subscriber read at a media-like pace.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// ChainGroupObjects is how many objects one group carries when a Chain
// moves a batch: each group is a stream of its own on every hop.
const ChainGroupObjects = 100

// groupWriter writes one group at a chain's publisher.
type groupWriter interface {
	// writeObject writes object id of the group; payload is not kept.
	writeObject(id uint64, payload []byte) error
	// close ends the group's stream cleanly.
	close() error
	// abandon resets the group's stream.
	abandon()
}

// groupReader reads one group at a chain's subscriber.
type groupReader interface {
	group() uint64
	// readObject reads the next object into buf's storage (grown if too
	// small) and returns its ID and payload; io.EOF after the group's
	// last object, once the stream has ended cleanly.
	readObject(buf []byte) (uint64, []byte, error)
}

// chainPath is what a Chain runs: one kind of publisher → forwarder →
// subscribers path, set up and connected.
type chainPath interface {
	// publish opens group g at the publisher.
	publish(ctx context.Context, g uint64) (groupWriter, error)
	// accept returns subscriber i's next group. Readers of different
	// subscribers may call it concurrently, never two of one subscriber.
	accept(ctx context.Context, i int) (groupReader, error)
	// close tears everything down and waits for its goroutines; it may
	// be called more than once, also concurrently with the others, to
	// unblock them.
	close() error
}

// Chain is one publisher → forwarder → subscribers path. It is not safe
// for concurrent use.
type Chain struct {
	path        chainPath
	subscribers int
	next        uint64 // the next group to publish
	pay         payload
	// forwarder reads the forwarder's process's CPU time, when the
	// forwarder runs in a process of its own; nil when it runs in this one.
	forwarder processClock
}

// ChainKind is one kind of chain.
type ChainKind struct {
	Name string
	New  func(ctx context.Context, subscribers int) (*Chain, error)
}

// ChainKinds are the chains compared, the bare one first as the ceiling.
var ChainKinds = []ChainKind{
	{Name: "bare-quic", New: NewBareForwarder},
	{Name: "moqt-hop", New: NewMoQTHop},
	{Name: "relay", New: NewRelayChain},
}

func newChain(p chainPath, subscribers int) *Chain {
	return &Chain{path: p, subscribers: subscribers}
}

// Subscribers is how many subscribers the chain has.
func (c *Chain) Subscribers() int { return c.subscribers }

// Close tears the chain down and waits for its goroutines.
func (c *Chain) Close() error { return c.path.close() }

// Move publishes n objects of size bytes, in groups of ChainGroupObjects,
// and returns once every subscriber has read every group to its end.
func (c *Chain) Move(ctx context.Context, n, size int) error {
	return c.move(ctx, n, size, false)
}

// move is Move; with check, each subscriber also compares every payload
// with what was sent. On failure the chain is closed, so that nothing
// stays blocked.
func (c *Chain) move(ctx context.Context, n, size int, check bool) error {
	first := c.next
	groups := (n + ChainGroupObjects - 1) / ChainGroupObjects
	c.next += uint64(groups)
	objects := func(g uint64) int { // objects in group g of this move
		if k := int(g - first); k < groups-1 {
			return ChainGroupObjects
		}
		return n - (groups-1)*ChainGroupObjects
	}
	done := make(chan error, 1)
	go func() {
		done <- gather(c.subscribers, func(i int) error {
			return c.receive(ctx, i, first, groups, size, objects, check)
		})
	}()
	err := c.publishGroups(ctx, first, groups, size, objects)
	if err != nil {
		_ = c.path.close()
		return fmt.Errorf("bench: chain publisher: %w (subscribers: %v)", err, <-done)
	}
	if err := <-done; err != nil {
		_ = c.path.close()
		return err
	}
	return nil
}

// publishGroups writes groups first … first+groups-1, one after another.
func (c *Chain) publishGroups(ctx context.Context, first uint64, groups, size int, objects func(uint64) int) error {
	body := c.pay.get(0, size)
	for g := first; g < first+uint64(groups); g++ {
		w, err := c.path.publish(ctx, g)
		if err != nil {
			return err
		}
		for i := range objects(g) {
			stamp(body, i)
			if err := w.writeObject(uint64(i), body); err != nil {
				w.abandon()
				return err
			}
		}
		if err := w.close(); err != nil {
			return err
		}
	}
	return nil
}

// receive reads subscriber i's groups first … first+groups-1, in whatever
// order they arrive, each to its end on a goroutine of its own, as a
// subscriber must: groups arrive at once, and a reader that took them one
// after another would let the later ones fill its connection's
// flow-control window while it waits for the rest of an earlier one. On
// failure it closes the chain, so that nothing stays blocked.
func (c *Chain) receive(ctx context.Context, i int, first uint64, groups, size int, objects func(uint64) int, check bool) error {
	seen := make([]bool, groups)
	errs := make([]error, groups)
	var wg sync.WaitGroup
	err := func() error {
		for k := range groups {
			r, err := c.path.accept(ctx, i)
			if err != nil {
				return fmt.Errorf("bench: subscriber %d: %w", i, err)
			}
			g := r.group()
			if g < first || g >= first+uint64(groups) || seen[g-first] {
				return fmt.Errorf("bench: subscriber %d: unexpected group %d", i, g)
			}
			seen[g-first] = true
			wg.Go(func() {
				if errs[k] = readGroup(r, objects(g), size, check); errs[k] != nil {
					errs[k] = fmt.Errorf("bench: subscriber %d: group %d: %w", i, g, errs[k])
					_ = c.path.close()
				}
			})
		}
		return nil
	}()
	if err != nil {
		_ = c.path.close()
	}
	wg.Wait()
	return errors.Join(append(errs, err)...)
}

// readGroup reads the n objects of size bytes of one group and its end;
// with check it compares each payload with what was sent.
func readGroup(r groupReader, n, size int, check bool) error {
	buf := make([]byte, size)
	var scr []byte
	if check {
		scr = make([]byte, size)
	}
	for k := range n + 1 {
		id, b, err := r.readObject(buf)
		if k == n {
			if err != io.EOF {
				return fmt.Errorf("no end after %d objects: %v", n, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("object %d: %w", k, err)
		}
		if id != uint64(k) || len(b) != size {
			return fmt.Errorf("object %d of %d bytes, want object %d of %d", id, len(b), k, size)
		}
		if check {
			if err := verify(b, scr, k); err != nil {
				return err
			}
		}
		buf = b[:cap(b)]
	}
	return nil
}

// Media-like pace for Latency: MediaGroupsPerSec groups a second of
// MediaGroupObjects objects of MediaObjectSize bytes, the objects evenly
// spaced.
const (
	MediaGroupsPerSec = 30
	MediaGroupObjects = 10
	MediaObjectSize   = 1200
)

// epoch is the clock the latency stamps are read against: a monotonic
// reading shared by publisher and subscribers, all in this process.
var epoch = time.Now()

// Latency publishes groups groups at the media-like pace and returns, for
// every object at every subscriber, the time from just before the
// publisher's write to the end of the subscriber's read of it.
func (c *Chain) Latency(ctx context.Context, groups int) ([]time.Duration, error) {
	first := c.next
	c.next += uint64(groups)
	lat := make([][]time.Duration, c.subscribers)
	done := make(chan error, 1)
	go func() {
		done <- gather(c.subscribers, func(i int) error {
			var err error
			lat[i], err = c.receiveTimed(ctx, i, groups)
			return err
		})
	}()
	if err := c.publishPaced(ctx, first, groups); err != nil {
		_ = c.path.close()
		return nil, fmt.Errorf("bench: chain publisher: %w (subscribers: %v)", err, <-done)
	}
	if err := <-done; err != nil {
		_ = c.path.close()
		return nil, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return all, nil
}

// publishPaced writes the groups with each object at its time in the
// schedule, stamped with that time.
func (c *Chain) publishPaced(ctx context.Context, first uint64, groups int) error {
	body := c.pay.get(0, MediaObjectSize)
	gap := time.Second / (MediaGroupsPerSec * MediaGroupObjects)
	start := time.Now()
	for k := range groups {
		w, err := c.path.publish(ctx, first+uint64(k))
		if err != nil {
			return err
		}
		for i := range MediaGroupObjects {
			at := start.Add(time.Duration(k*MediaGroupObjects+i) * gap)
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			stamp(body, i)
			binary.BigEndian.PutUint64(body[8:], uint64(time.Since(epoch)))
			if err := w.writeObject(uint64(i), body); err != nil {
				w.abandon()
				return err
			}
		}
		if err := w.close(); err != nil {
			return err
		}
	}
	return nil
}

// receiveTimed reads subscriber i's next groups groups of the media-like
// pace and returns each object's latency.
func (c *Chain) receiveTimed(ctx context.Context, i, groups int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, groups*MediaGroupObjects)
	buf := make([]byte, MediaObjectSize)
	for range groups {
		r, err := c.path.accept(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("bench: subscriber %d: %w", i, err)
		}
		for k := range MediaGroupObjects + 1 {
			id, b, err := r.readObject(buf)
			if k == MediaGroupObjects {
				if err != io.EOF {
					return nil, fmt.Errorf("bench: subscriber %d: group %d did not end: %v", i, r.group(), err)
				}
				break
			}
			if err != nil {
				return nil, fmt.Errorf("bench: subscriber %d: group %d object %d: %w", i, r.group(), k, err)
			}
			now := time.Since(epoch)
			if id != uint64(k) || len(b) != MediaObjectSize {
				return nil, fmt.Errorf("bench: subscriber %d: object %d of %d bytes, want object %d", i, id, len(b), k)
			}
			lat = append(lat, now-time.Duration(binary.BigEndian.Uint64(b[8:])))
			buf = b[:cap(b)]
		}
	}
	return lat, nil
}

// Percentile returns the p-th percentile (0 < p ≤ 100) of ds, which it
// sorts; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	k := int(float64(len(ds))*p/100+0.5) - 1
	return ds[min(max(k, 0), len(ds)-1)]
}

// closers closes each of fs once, in order, whichever of several callers
// comes first, and remembers the first error.
type closers struct {
	once sync.Once
	err  error
}

func (c *closers) close(fs ...func() error) error {
	c.once.Do(func() {
		for _, f := range fs {
			if err := f(); err != nil && c.err == nil && !errors.Is(err, context.Canceled) {
				c.err = err
			}
		}
	})
	return c.err
}
