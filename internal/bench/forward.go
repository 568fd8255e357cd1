package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/quic-go/quic-go"
)

// bareForwarder is the ceiling of the chains: quic-go with nothing on top.
// The publisher opens one unidirectional stream per group on its
// connection to the forwarder and writes an 8-byte group number, then each
// object as RawQUIC does (a 4-byte length and the payload, one Write). The
// forwarder accepts each such stream, opens a stream per subscriber on
// their connections, and writes every object it reads to each of them in
// turn (one Write per object and subscriber, as RawFanout does), then
// finishes them when the publisher's stream ends.
type bareForwarder struct {
	up      *RawQUIC   // server: the publisher; client: the forwarder's upstream
	down    *RawFanout // servers: the forwarder's ends; clients: the subscribers
	fwd     *bareRelay
	closing closers
	frame   []byte // the publisher's framing buffer
}

// NewBareForwarder connects a publisher to a bare quic-go forwarder and
// subscribers subscribers to the forwarder, each on its own loopback
// connection.
func NewBareForwarder(ctx context.Context, subscribers int) (_ *Chain, err error) {
	up, err := NewRawQUIC(ctx)
	if err != nil {
		return nil, err
	}
	down, err := NewRawFanout(ctx, subscribers)
	if err != nil {
		_ = up.Close()
		return nil, err
	}
	p := &bareForwarder{up: up, down: down, fwd: startBareRelay(up.client, down.servers)}
	return newChain(p, subscribers), nil
}

// bareRelay is the bare forwarder's forwarding, wherever it runs: it
// copies every stream the peer of up opens to a stream of its own on each
// of down.
type bareRelay struct {
	up     *quic.Conn
	down   []*quic.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup // the forwarding goroutines
}

// startBareRelay starts forwarding from up to down; stop ends it.
func startBareRelay(up *quic.Conn, down []*quic.Conn) *bareRelay {
	ctx, cancel := context.WithCancel(context.Background())
	f := &bareRelay{up: up, down: down, cancel: cancel}
	f.wg.Go(func() { f.run(ctx) })
	return f
}

// stop ends the forwarding and waits for its goroutines; the connections
// are the caller's to close, first if a stream may be blocked.
func (f *bareRelay) stop() {
	f.cancel()
	f.wg.Wait()
}

// run forwards every stream the publisher opens, each on a goroutine of
// its own, until ctx ends or the upstream connection does.
func (f *bareRelay) run(ctx context.Context) {
	for {
		str, err := f.up.AcceptUniStream(ctx)
		if err != nil {
			return
		}
		f.wg.Go(func() {
			if err := f.forward(ctx, str); err != nil {
				str.CancelRead(1)
			}
		})
	}
}

// forward copies one group stream to every subscriber. On failure it
// resets the downstream streams it opened.
func (f *bareRelay) forward(ctx context.Context, in *quic.ReceiveStream) (err error) {
	br := bufio.NewReader(in)
	hdr := make([]byte, 8)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return err
	}
	outs := make([]*quic.SendStream, 0, len(f.down))
	defer func() {
		if err != nil {
			for _, o := range outs {
				o.CancelWrite(1)
			}
		}
	}()
	for _, c := range f.down {
		o, err := c.OpenUniStreamSync(ctx)
		if err != nil {
			return err
		}
		outs = append(outs, o)
		if _, err := o.Write(hdr); err != nil {
			return err
		}
	}
	var frame []byte
	for {
		var l [4]byte
		if _, err := io.ReadFull(br, l[:]); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(l[:]))
		if n > 1<<24 {
			return errors.New("bench: forwarded object too large")
		}
		if cap(frame) < 4+n {
			frame = make([]byte, 4+n)
		}
		frame = frame[:4+n]
		copy(frame, l[:])
		if _, err := io.ReadFull(br, frame[4:]); err != nil {
			return err
		}
		for _, o := range outs {
			if _, err := o.Write(frame); err != nil {
				return err
			}
		}
	}
	for _, o := range outs {
		if err := o.Close(); err != nil {
			return err
		}
	}
	return nil
}

func (p *bareForwarder) publish(ctx context.Context, g uint64) (groupWriter, error) {
	return publishBare(ctx, p.up.server, g, &p.frame)
}

// publishBare opens group g on the bare publisher's connection to the
// forwarder; frame is the publisher's framing buffer.
func publishBare(ctx context.Context, conn *quic.Conn, g uint64, frame *[]byte) (groupWriter, error) {
	str, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], g)
	if _, err := str.Write(hdr[:]); err != nil {
		str.CancelWrite(1)
		return nil, err
	}
	return &bareWriter{frame: frame, str: str}, nil
}

// bareWriter writes one group at the bare publisher.
type bareWriter struct {
	frame *[]byte
	str   *quic.SendStream
}

func (w *bareWriter) writeObject(_ uint64, payload []byte) error {
	if len(payload) > 1<<24 {
		return errors.New("bench: object too large")
	}
	if cap(*w.frame) < 4+len(payload) {
		*w.frame = make([]byte, 4+len(payload))
	}
	f := (*w.frame)[:4+len(payload)]
	binary.BigEndian.PutUint32(f, uint32(len(payload)))
	copy(f[4:], payload)
	_, err := w.str.Write(f)
	return err
}

func (w *bareWriter) close() error { return w.str.Close() }
func (w *bareWriter) abandon()     { w.str.CancelWrite(1) }

func (p *bareForwarder) accept(ctx context.Context, i int) (groupReader, error) {
	return acceptBare(ctx, p.down.clients[i])
}

// acceptBare returns the next group a bare subscriber's connection gets.
func acceptBare(ctx context.Context, conn *quic.Conn) (groupReader, error) {
	str, err := conn.AcceptUniStream(ctx)
	if err != nil {
		return nil, err
	}
	r := &bareReader{br: bufio.NewReader(str)}
	var hdr [8]byte
	if _, err := io.ReadFull(r.br, hdr[:]); err != nil {
		return nil, fmt.Errorf("bench: group header: %w", err)
	}
	r.g = binary.BigEndian.Uint64(hdr[:])
	return r, nil
}

// bareReader reads one group at a bare subscriber.
type bareReader struct {
	br   *bufio.Reader
	g    uint64
	next uint64
}

func (r *bareReader) group() uint64 { return r.g }

func (r *bareReader) readObject(buf []byte) (uint64, []byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(r.br, l[:]); err != nil {
		return 0, nil, err // io.EOF: the stream ended between objects
	}
	n := int(binary.BigEndian.Uint32(l[:]))
	if n > 1<<24 {
		return 0, nil, errors.New("bench: object too large")
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r.br, buf); err != nil {
		return 0, nil, fmt.Errorf("bench: payload: %w", err)
	}
	id := r.next
	r.next++
	return id, buf, nil
}

func (p *bareForwarder) close() error {
	return p.closing.close(
		func() error { p.fwd.cancel(); return nil },
		p.up.Close,
		p.down.Close,
		func() error { p.fwd.stop(); return nil },
	)
}
