package moqt

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// relayHop is one relay hop over real loopback QUIC: an origin serves up, a
// relay subscribes to it and serves down, and a subscriber subscribes to
// down. The relay forwards what it reads from its subscription to down.
type relayHop struct {
	up, down *LocalTrack
	relayIn  *Subscription // the relay's subscription to up
	out      *Subscription // the subscriber's subscription to down
}

var relayTrack = wire.FullTrackName{Namespace: wire.NewNamespace("relay"), Name: []byte("hop")}

// newRelayHop connects origin → relay → subscriber over raw QUIC.
func newRelayHop(tb testing.TB) *relayHop {
	tb.Helper()
	up, err := NewLocalTrack(relayTrack, nil)
	require.NoError(tb, err)
	down, err := NewLocalTrack(relayTrack, nil)
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := &relayHop{up: up, down: down}
	h.relayIn = benchSubscribe(ctx, tb, up)
	h.out = benchSubscribe(ctx, tb, down)
	return h
}

// benchSubscribe serves track on a new loopback server, dials it and
// subscribes to track; everything is closed when tb ends.
func benchSubscribe(ctx context.Context, tb testing.TB, track *LocalTrack) *Subscription {
	tb.Helper()
	quiet := slog.New(slog.DiscardHandler)
	cert, hash, err := GenerateCertificate()
	require.NoError(tb, err)
	handler := HandlerFunc(func(r Request) {
		if sr, ok := r.(*SubscribeRequest); ok && sr.Track.Equal(track.Name()) {
			_, _ = track.Accept(sr, AcceptOptions{})
			return
		}
		DefaultHandler.ServeMOQT(r)
	})
	srv, err := Listen("127.0.0.1:0",
		&Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Logger: quiet, Handler: handler}, nil)
	require.NoError(tb, err)
	tb.Cleanup(func() { srv.Close() })
	accepted := make(chan *Session, 1)
	go func() {
		s, _ := srv.Accept(ctx)
		accepted <- s
	}()
	client, err := Dial(ctx, "moqt://"+srv.Addr().String()+"/relay",
		&Config{Logger: quiet, ServerCertificateHashes: [][32]byte{hash}})
	require.NoError(tb, err)
	server := <-accepted
	require.NotNil(tb, server)
	tb.Cleanup(func() {
		client.Close()
		server.Close()
		<-client.Context().Done()
		<-server.Context().Done()
	})
	sub, err := client.Subscribe(ctx, track.Name(), wire.Params{})
	require.NoError(tb, err)
	return sub
}

// forward is the relay: it reads one subgroup of its subscription and
// writes each object to down as it arrives, reusing one payload buffer.
func (h *relayHop) forward(ctx context.Context, n int) error {
	r, err := h.relayIn.AcceptSubgroup(ctx)
	if err != nil {
		return err
	}
	hdr := r.Header()
	w := h.down.OpenSubgroup(hdr.GroupID, hdr.SubgroupID, SubgroupOptions{Properties: hdr.HasProperties})
	var buf []byte
	for i := range n {
		obj, err := r.ReadObject(buf)
		if err != nil {
			w.Reset(wire.ResetInternalError)
			return fmt.Errorf("relay: object %d: %w", i, err)
		}
		buf = obj.Payload
		if err := w.WriteObject(obj); err != nil { // forwarded as read
			return fmt.Errorf("relay: writing object %d: %w", i, err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		return fmt.Errorf("relay: subgroup did not end after %d objects: %v", n, err)
	}
	return w.Close()
}

// forwardArrival is forward reading with Subscription.ReadObject, which
// takes objects from every stream in arrival order.
func (h *relayHop) forwardArrival(ctx context.Context, n int) error {
	var w *SubgroupWriter
	for i := range n {
		obj, err := h.relayIn.ReadObject(ctx)
		if err != nil {
			return fmt.Errorf("relay: object %d: %w", i, err)
		}
		if w == nil {
			w = h.down.OpenSubgroup(obj.Location.Group, obj.SubgroupID, SubgroupOptions{})
		}
		if err := w.WriteObject(obj); err != nil { // forwarded as read
			return fmt.Errorf("relay: writing object %d: %w", i, err)
		}
	}
	if w == nil {
		return nil
	}
	return w.Close()
}

// receive reads one subgroup of n objects of size bytes at the subscriber.
func (h *relayHop) receive(ctx context.Context, n, size int) error {
	r, err := h.out.AcceptSubgroup(ctx)
	if err != nil {
		return err
	}
	var buf []byte
	for i := range n {
		obj, err := r.ReadObject(buf)
		if err != nil {
			return fmt.Errorf("subscriber: object %d: %w", i, err)
		}
		if obj.Location.Object != uint64(i) || len(obj.Payload) != size {
			return fmt.Errorf("subscriber: object %d of %d bytes, want object %d of %d", obj.Location.Object, len(obj.Payload), i, size)
		}
		buf = obj.Payload
	}
	if _, err := r.Next(); err != io.EOF {
		return fmt.Errorf("subscriber: subgroup did not end after %d objects: %v", n, err)
	}
	return nil
}

// BenchmarkRelayHop moves objects origin → relay → subscriber over
// loopback QUIC; one op is one object through the whole hop, so allocs/op
// is per object (quic-go's included). Each run is one subgroup of b.N
// objects: the per-stream setup is spread over them.
//
// The "subgroup" runs read with SubgroupReader.ReadObject, the "arrival"
// runs with Subscription.ReadObject.
func BenchmarkRelayHop(b *testing.B) {
	for _, mode := range []string{"subgroup", "arrival"} {
		for _, size := range []int{100, 1 << 10, 16 << 10} {
			b.Run(fmt.Sprintf("%s/%dB", mode, size), func(b *testing.B) { benchRelayHop(b, mode, size) })
		}
	}
}

func benchRelayHop(b *testing.B, mode string, size int) {
	h := newRelayHop(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	payload := make([]byte, size)
	forward := h.forward
	if mode == "arrival" {
		forward = h.forwardArrival
	}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	relayed := make(chan error, 1)
	received := make(chan error, 1)
	n := b.N
	go func() { relayed <- forward(ctx, n) }()
	go func() { received <- h.receive(ctx, n, size) }()
	w := h.up.OpenSubgroup(0, 0, SubgroupOptions{})
	for i := range n {
		if err := writeObject(w, uint64(i), nil, payload); err != nil {
			b.Fatal(err)
		}
	}
	require.NoError(b, w.Close())
	require.NoError(b, <-relayed)
	require.NoError(b, <-received)
	b.StopTimer()
}

// TestRelayHop checks the hop the benchmark measures: every object arrives
// once, in order, with its payload and properties.
func TestRelayHop(t *testing.T) {
	h := newRelayHop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	relayed := make(chan error, 1)
	go func() { relayed <- h.forward(ctx, n) }()
	got := make(chan error, 1)
	go func() {
		r, err := h.out.AcceptSubgroup(ctx)
		if err != nil {
			got <- err
			return
		}
		var buf []byte
		for i := range n {
			obj, err := r.ReadObject(buf)
			if err != nil {
				got <- err
				return
			}
			if want := fmt.Sprint("payload ", i); string(obj.Payload) != want || obj.Location != (wire.Location{Group: 3, Object: uint64(i)}) {
				got <- fmt.Errorf("object %v: %q, want %q", obj.Location, obj.Payload, want)
				return
			}
			if want := relayProps(t, i); !bytes.Equal(obj.Properties, want) {
				got <- fmt.Errorf("object %v: properties %x, want %x", obj.Location, obj.Properties, want)
				return
			}
			buf = obj.Payload
		}
		_, err = r.Next()
		if !errors.Is(err, io.EOF) {
			got <- fmt.Errorf("no FIN: %v", err)
			return
		}
		got <- nil
	}()
	w := h.up.OpenSubgroup(3, 0, SubgroupOptions{Properties: true})
	for i := range n {
		require.NoError(t, writeObject(w, uint64(i), relayProps(t, i), fmt.Append(nil, "payload ", i)))
	}
	require.NoError(t, w.Close())
	require.NoError(t, <-relayed)
	require.NoError(t, <-got)
}

// relayProps are the Object Properties of object i in TestRelayHop: some
// objects have none.
func relayProps(t *testing.T, i int) []byte {
	if i%3 == 0 {
		return nil
	}
	return propsBlock(t, wire.KVList{{Type: 0x10, Value: uint64(i)}})
}
