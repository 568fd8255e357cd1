package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// moqtHop is a relay hop written by hand on the public API: the forwarder
// subscribes to the publisher's LocalTrack and writes every object it
// reads, as it reads it, to a LocalTrack of its own that serves the
// subscribers, one subgroup for each it receives. It is what a relay does
// with nothing else to do: no routing, no cache policy, no metrics.
type moqtHop struct {
	up      moqtPair // server: the publisher; client: the forwarder
	in      *moqt.Subscription
	down    *MoQTFanout
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the forwarding goroutines
	closing closers
}

// NewMoQTHop connects a moqt publisher to a hand-written forwarder and
// subscribers subscribers to the forwarder, each on its own loopback
// connection.
func NewMoQTHop(ctx context.Context, subscribers int) (_ *Chain, err error) {
	p := &moqtHop{cancel: func() {}}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if p.up, err = newMoQTPair(ctx, fanoutConfig(), nil); err != nil {
		return nil, err
	}
	if p.in, err = p.up.client.Subscribe(ctx, benchTrack, wire.Params{}); err != nil {
		return nil, err
	}
	if p.down, err = NewMoQTFanout(ctx, subscribers); err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Go(func() { p.run(fctx) })
	return newChain(p, subscribers), nil
}

// run forwards every subgroup of the forwarder's subscription, each on a
// goroutine of its own, until ctx ends or the subscription does.
func (p *moqtHop) run(ctx context.Context) {
	for {
		r, err := p.in.AcceptSubgroup(ctx)
		if err != nil {
			return
		}
		p.wg.Go(func() {
			if err := p.forward(r); err != nil {
				_ = r.Close()
			}
		})
	}
}

// forward copies one subgroup to the subscribers, reusing one payload
// buffer.
func (p *moqtHop) forward(r *moqt.SubgroupReader) error {
	hdr := r.Header()
	w := p.down.track.OpenSubgroup(hdr.GroupID, hdr.SubgroupID, moqt.SubgroupOptions{Properties: hdr.HasProperties})
	var buf []byte
	for {
		obj, err := r.ReadObject(buf)
		if errors.Is(err, io.EOF) {
			return w.Close()
		}
		if err != nil {
			w.Reset(wire.ResetInternalError)
			return err
		}
		buf = obj.Payload
		if err := w.WriteObject(obj); err != nil {
			w.Reset(wire.ResetInternalError)
			return err
		}
	}
}

func (p *moqtHop) publish(_ context.Context, g uint64) (groupWriter, error) {
	return moqtWriter{w: p.up.track.OpenSubgroup(g, 0, moqt.SubgroupOptions{}), group: g}, nil
}

func (p *moqtHop) accept(ctx context.Context, i int) (groupReader, error) {
	return acceptMoQT(ctx, p.down.subs[i])
}

func (p *moqtHop) close() error {
	return p.closing.close(
		func() error { p.cancel(); return nil },
		func() error {
			if p.down == nil {
				return nil
			}
			return p.down.Close()
		},
		func() error {
			if p.up.srv == nil {
				return nil
			}
			return p.up.Close()
		},
		func() error { p.wg.Wait(); return nil },
	)
}

// moqtWriter writes one group at a moqt publisher, as one subgroup.
type moqtWriter struct {
	w     *moqt.SubgroupWriter
	group uint64
}

func (w moqtWriter) writeObject(id uint64, payload []byte) error {
	return w.w.WriteObject(moqt.Object{Location: wire.Location{Group: w.group, Object: id}, Payload: payload})
}

func (w moqtWriter) close() error { return w.w.Close() }
func (w moqtWriter) abandon()     { w.w.Reset(wire.ResetCancelled) }

// acceptMoQT returns the next subgroup of sub.
func acceptMoQT(ctx context.Context, sub *moqt.Subscription) (groupReader, error) {
	r, err := sub.AcceptSubgroup(ctx)
	if err != nil {
		return nil, err
	}
	return moqtReader{r}, nil
}

// moqtReader reads one subgroup at a moqt subscriber.
type moqtReader struct{ r *moqt.SubgroupReader }

func (r moqtReader) group() uint64 { return r.r.Header().GroupID }

func (r moqtReader) readObject(buf []byte) (uint64, []byte, error) {
	obj, err := r.r.ReadObject(buf)
	if errors.Is(err, io.EOF) {
		return 0, nil, io.EOF
	}
	if err != nil {
		return 0, nil, fmt.Errorf("bench: moqt object: %w", err)
	}
	return obj.Location.Object, obj.Payload, nil
}
