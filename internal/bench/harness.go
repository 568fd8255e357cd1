// Package bench measures publisher → subscriber throughput of moqt against
// raw quic-go over loopback QUIC on the same machine, in the same run
// (DESIGN.md, "Performance targets"). Absolute numbers on a shared machine
// are noise; the ratio moqt/raw is what is reported.
//
// Both paths move the same objects the same way: the server end publishes
// n objects of one size on one unidirectional stream and finishes it; the
// client end reads every object and the FIN. A Move returns only once the
// reader has confirmed every byte and the end of the stream.
//
//   - raw-quic: each object is one Write of a 4-byte big-endian length and
//     the payload; the reader reads the length, then exactly that many
//     bytes, through a bufio.Reader (as moqt does).
//   - moqt: a LocalTrack serves one subscription; each Move writes one
//     subgroup with SubgroupWriter.WriteObject and Close; the subscriber
//     reads it with AcceptSubgroup, Next and Read until io.EOF.
//
// Beside the rate, each measurement records the process's CPU time per
// object, a steadier figure on a shared machine. A second scenario fans
// one publisher out to FanoutSubscribers subscribers and compares CPU time
// per delivered object with a bare quic-go fan-out (Fanout).
package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/quic-go/quic-go"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Sizes are the object sizes measured.
var Sizes = []int{100, 1 << 10, 64 << 10, 1 << 20}

// SizeName names a size the way the benchmarks do: 100B, 1KiB, 64KiB, 1MiB.
func SizeName(size int) string {
	switch {
	case size >= 1<<20 && size%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", size>>20)
	case size >= 1<<10 && size%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", size>>10)
	default:
		return fmt.Sprintf("%dB", size)
	}
}

// Path moves objects from a publisher to a subscriber over one loopback
// QUIC connection. It is not safe for concurrent use.
type Path interface {
	// Move publishes n objects of size bytes on one new stream and returns
	// once the subscriber has read all of them and the stream's end. With
	// check, the subscriber also compares every payload byte with what
	// was sent; otherwise it checks counts and lengths only.
	Move(ctx context.Context, n, size int, check bool) error
	// Close closes the connection and waits for its goroutines.
	Close() error
}

// Kind is one way of moving objects.
type Kind struct {
	Name string
	New  func(ctx context.Context) (Path, error)
}

// Kinds are the paths compared: raw quic-go first, as the ceiling.
var Kinds = []Kind{
	{Name: "raw-quic", New: func(ctx context.Context) (Path, error) { return NewRawQUIC(ctx) }},
	{Name: "moqt", New: func(ctx context.Context) (Path, error) { return NewMoQT(ctx) }},
}

// QuietQUIC stops quic-go from logging its UDP buffer size warning. It
// must run before the first socket is opened.
func QuietQUIC() {
	if os.Getenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING") == "" {
		_ = os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
	}
}

// payload is the publisher's object buffer: room for a prefix, then a
// fixed pattern, with the object's index stamped into its first 8 bytes so
// that a receiver that checks can tell objects apart.
type payload struct {
	b            []byte
	prefix, size int
}

// get returns a buffer of prefix+size bytes whose last size bytes hold the
// pattern.
func (p *payload) get(prefix, size int) []byte {
	if cap(p.b) < prefix+size {
		p.b = make([]byte, prefix+size)
	}
	if p.prefix != prefix || p.size != size {
		p.prefix, p.size = prefix, size
		fillPattern(p.b[prefix : prefix+size])
	}
	return p.b[:prefix+size]
}

func fillPattern(b []byte) {
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
}

func stamp(b []byte, i int) {
	if len(b) >= 8 {
		binary.BigEndian.PutUint64(b, uint64(i))
	}
}

// expected returns the payload of object i into buf.
func expected(buf []byte, i int) []byte {
	fillPattern(buf)
	stamp(buf, i)
	return buf
}

// verify compares a received payload with object i's.
func verify(got, scratch []byte, i int) error {
	want := expected(scratch[:len(got)], i)
	if string(got) != string(want) {
		return fmt.Errorf("bench: object %d: payload differs from what was sent", i)
	}
	return nil
}

// tlsConfigs returns a server configuration with a fresh self-signed
// certificate for 127.0.0.1 and a client configuration that trusts it.
func tlsConfigs(alpn ...string) (server, client *tls.Config, err error) {
	cert, _, err := moqt.GenerateCertificate("127.0.0.1")
	if err != nil {
		return nil, nil, err
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: alpn}
	if client, err = trusting(cert.Certificate[0], alpn...); err != nil {
		return nil, nil, err
	}
	return server, client, nil
}

// trusting returns a client TLS configuration that trusts the certificate
// der (ASN.1 DER) for 127.0.0.1, with the ALPN protocols alpn.
func trusting(der []byte, alpn ...string) (*tls.Config, error) {
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: alpn}, nil
}

// leafDER is the certificate a server TLS configuration made by
// tlsConfigs presents.
func leafDER(server *tls.Config) []byte { return server.Certificates[0].Certificate[0] }

// result is what a reader reports.
type result struct {
	objects int
	err     error
}

// RawQUIC is the ceiling: quic-go with nothing on top. The server
// publishes, as in the moqt path.
type RawQUIC struct {
	ln     *quic.Listener
	server *quic.Conn
	client *quic.Conn
	pay    payload
	rbuf   []byte
	scr    []byte
	// Coalesce, when positive, makes the writer gather objects into
	// Writes of up to that many bytes (a bufio.Writer) instead of one
	// Write per object: the baseline for a path that coalesces too.
	Coalesce int
}

// rawALPN is the raw path's application protocol.
const rawALPN = "bench"

// rawListen starts a quic-go listener on 127.0.0.1 with the transport
// settings moqt's own transport uses, and returns the TLS configuration
// that trusts it.
func rawListen() (*quic.Listener, *tls.Config, error) {
	stls, ctls, err := tlsConfigs(rawALPN)
	if err != nil {
		return nil, nil, err
	}
	ln, err := listenRaw(stls)
	if err != nil {
		return nil, nil, err
	}
	return ln, ctls, nil
}

// listenRaw starts a quic-go listener on 127.0.0.1 with stls and the
// transport settings moqt's own transport uses.
func listenRaw(stls *tls.Config) (*quic.Listener, error) {
	return quic.ListenAddr("127.0.0.1:0", stls, &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
}

// NewRawQUIC starts a quic-go listener on 127.0.0.1 and connects to it.
// Both ends use the transport settings moqt's own transport uses.
func NewRawQUIC(ctx context.Context) (*RawQUIC, error) {
	ln, ctls, err := rawListen()
	if err != nil {
		return nil, err
	}
	accepted := make(chan *quic.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	client, err := quic.DialAddr(ctx, ln.Addr().String(), ctls, &quic.Config{EnableDatagrams: true})
	if err != nil {
		_ = ln.Close()
		<-accepted
		return nil, err
	}
	server := <-accepted
	if server == nil {
		_ = client.CloseWithError(0, "")
		_ = ln.Close()
		return nil, errors.New("bench: raw QUIC server accepted no connection")
	}
	return &RawQUIC{ln: ln, server: server, client: client}, nil
}

// Move sends n length-prefixed objects on one server-initiated
// unidirectional stream.
func (p *RawQUIC) Move(ctx context.Context, n, size int, check bool) error {
	if size > 1<<31 {
		return errors.New("bench: object too large")
	}
	done := make(chan result, 1)
	go func() { done <- p.receive(ctx, n, size, check) }()

	frame := p.pay.get(4, size)
	binary.BigEndian.PutUint32(frame, uint32(size))
	body := frame[4:]
	str, err := p.server.OpenUniStreamSync(ctx)
	if err != nil {
		return p.fail(done, err)
	}
	var dst io.Writer = str
	bw := (*bufio.Writer)(nil)
	if p.Coalesce > 0 {
		bw = bufio.NewWriterSize(str, p.Coalesce)
		dst = bw
	}
	for i := range n {
		stamp(body, i)
		if _, err := dst.Write(frame); err != nil {
			return p.fail(done, err)
		}
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return p.fail(done, err)
		}
	}
	if err := str.Close(); err != nil {
		return p.fail(done, err)
	}
	r := <-done
	return r.err
}

// fail aborts a Move whose writer failed: the connection goes, so the
// reader stops too.
func (p *RawQUIC) fail(done chan result, err error) error {
	_ = p.client.CloseWithError(1, "writer failed")
	if r := <-done; r.err != nil {
		return fmt.Errorf("bench: raw writer: %w (reader: %v)", err, r.err)
	}
	return fmt.Errorf("bench: raw writer: %w", err)
}

// receive reads n objects and the FIN from the next stream. On failure it
// closes the connection so the writer cannot block.
func (p *RawQUIC) receive(ctx context.Context, n, size int, check bool) result {
	got, err := p.read(ctx, n, size, check)
	if err != nil {
		_ = p.client.CloseWithError(1, "reader failed")
	}
	return result{objects: got, err: err}
}

func (p *RawQUIC) read(ctx context.Context, n, size int, check bool) (int, error) {
	if cap(p.rbuf) < size {
		p.rbuf = make([]byte, size)
		p.scr = make([]byte, size)
	}
	return readRaw(ctx, p.client, n, size, check, p.rbuf, p.scr)
}

// readRaw reads n length-prefixed objects of size bytes and the FIN from
// the next unidirectional stream of conn, into rbuf; with check it
// verifies each against object i's payload, using scr.
func readRaw(ctx context.Context, conn *quic.Conn, n, size int, check bool, rbuf, scr []byte) (int, error) {
	str, err := conn.AcceptUniStream(ctx)
	if err != nil {
		return 0, err
	}
	br := bufio.NewReader(str)
	var hdr [4]byte
	for i := range n {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return i, fmt.Errorf("bench: raw object %d header: %w", i, err)
		}
		l := int(binary.BigEndian.Uint32(hdr[:]))
		if l != size {
			return i, fmt.Errorf("bench: raw object %d has %d bytes, want %d", i, l, size)
		}
		buf := rbuf[:l]
		if _, err := io.ReadFull(br, buf); err != nil {
			return i, fmt.Errorf("bench: raw object %d payload: %w", i, err)
		}
		if check {
			if err := verify(buf, scr, i); err != nil {
				return i, err
			}
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return n, fmt.Errorf("bench: raw stream did not end after %d objects: %v", n, err)
	}
	return n, nil
}

// Close closes both ends and the listener.
func (p *RawQUIC) Close() error {
	err := p.client.CloseWithError(0, "")
	_ = p.server.CloseWithError(0, "")
	<-p.client.Context().Done()
	<-p.server.Context().Done()
	if e := p.ln.Close(); err == nil {
		err = e
	}
	return err
}

// benchTrack is the track the moqt path publishes.
var benchTrack = wire.FullTrackName{Namespace: wire.NewNamespace("bench"), Name: []byte("objects")}

// MoQT is the moqt path: a Server whose LocalTrack serves the subscription
// of a client over raw QUIC (moqt://).
type MoQT struct {
	moqtPair
	sub   *moqt.Subscription
	group uint64
	pay   payload
	rbuf  []byte
	scr   []byte
}

// moqtPair is a moqt Server on 127.0.0.1 serving one LocalTrack, and a
// client session connected to it.
type moqtPair struct {
	srv    *moqt.Server
	server *moqt.Session
	client *moqt.Session
	track  *moqt.LocalTrack
}

// NewMoQT starts a moqt Server on 127.0.0.1 serving one LocalTrack,
// connects to it and subscribes.
func NewMoQT(ctx context.Context) (_ *MoQT, err error) {
	p := &MoQT{}
	if p.moqtPair, err = newMoQTPair(ctx, nil, nil); err != nil {
		return nil, err
	}
	if p.sub, err = p.client.Subscribe(ctx, benchTrack, wire.Params{}); err != nil {
		_ = p.Close()
		return nil, err
	}
	return p, nil
}

// newMoQTPair starts the server with cfg (nil for the defaults), prepares
// its track with prepare (if not nil) before any session connects, and
// connects a client.
func newMoQTPair(ctx context.Context, cfg *moqt.Config, prepare func(*moqt.LocalTrack) error) (_ moqtPair, err error) {
	if cfg == nil {
		cfg = &moqt.Config{}
	}
	srv, track, ctls, err := trackServer(cfg, nil)
	if err != nil {
		return moqtPair{}, err
	}
	p := moqtPair{srv: srv, track: track}
	defer func() {
		if err != nil {
			_ = p.Close()
		}
	}()
	if prepare != nil {
		if err := prepare(track); err != nil {
			return p, err
		}
	}
	accepted := make(chan *moqt.Session, 1)
	go func() {
		s, err := srv.Accept(ctx)
		if err != nil {
			s = nil
		}
		accepted <- s
	}()
	// On failure the deferred Close closes srv, which ends the Accept.
	p.client, err = moqt.Dial(ctx, "moqt://"+srv.Addr().String()+"/bench", &moqt.Config{Logger: quiet, TLSConfig: ctls})
	if err != nil {
		return p, err
	}
	if p.server = <-accepted; p.server == nil {
		return p, errors.New("bench: moqt server accepted no session")
	}
	return p, nil
}

// quiet is the sessions' logger: the benchmarks log nothing.
var quiet = slog.New(slog.DiscardHandler)

// trackServer starts a moqt Server on 127.0.0.1 with cfg, its Logger and
// Handler set, serving SUBSCRIBEs for benchTrack from a new LocalTrack. It
// returns the TLS configuration that trusts the server.
func trackServer(cfg *moqt.Config, opts *moqt.ServerOptions) (*moqt.Server, *moqt.LocalTrack, *tls.Config, error) {
	stls, ctls, err := tlsConfigs()
	if err != nil {
		return nil, nil, nil, err
	}
	track, err := moqt.NewLocalTrack(benchTrack, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg.Logger = quiet
	cfg.Handler = moqt.HandlerFunc(func(r moqt.Request) {
		switch r := r.(type) {
		case *moqt.SubscribeRequest:
			_, _ = track.Accept(r, moqt.AcceptOptions{})
		case *moqt.FetchRequest:
			_ = track.Fetch(r)
		default:
			moqt.DefaultHandler.ServeMOQT(r)
		}
	})
	cfg.TLSConfig = stls
	srv, err := moqt.Listen("127.0.0.1:0", cfg, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	return srv, track, ctls, nil
}

// Move publishes n objects as one new subgroup (group numbers increase
// from one Move to the next) and reads it back.
func (p *MoQT) Move(ctx context.Context, n, size int, check bool) error {
	group := p.group
	p.group++
	done := make(chan result, 1)
	go func() { done <- p.receive(ctx, group, n, size, check) }()

	body := p.pay.get(0, size)
	w := p.track.OpenSubgroup(group, 0, moqt.SubgroupOptions{})
	for i := range n {
		stamp(body, i)
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: group, Object: uint64(i)}, Payload: body}); err != nil {
			w.Reset(wire.ResetCancelled)
			_ = p.client.CloseWithError(wire.InternalError, "writer failed")
			<-done
			return fmt.Errorf("bench: moqt writer: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		_ = p.client.CloseWithError(wire.InternalError, "writer failed")
		<-done
		return fmt.Errorf("bench: moqt writer: %w", err)
	}
	r := <-done
	return r.err
}

// receive reads the subgroup of group to its end. On failure it closes the
// client session so the writer cannot block on flow control.
func (p *MoQT) receive(ctx context.Context, group uint64, n, size int, check bool) result {
	got, err := p.read(ctx, group, n, size, check)
	if err != nil {
		_ = p.client.CloseWithError(wire.InternalError, "reader failed")
	}
	return result{objects: got, err: err}
}

func (p *MoQT) read(ctx context.Context, group uint64, n, size int, check bool) (int, error) {
	if cap(p.rbuf) < size {
		p.rbuf = make([]byte, size)
		p.scr = make([]byte, size)
	}
	return readMoQT(ctx, p.sub, group, n, size, check, p.rbuf, p.scr)
}

// readMoQT reads the next subgroup of sub, which must be of group, to its
// end: n objects of size bytes, into rbuf, or with check through the
// allocating API, verified against what was sent using scr.
func readMoQT(ctx context.Context, sub *moqt.Subscription, group uint64, n, size int, check bool, rbuf, scr []byte) (int, error) {
	r, err := sub.AcceptSubgroup(ctx)
	if err != nil {
		return 0, err
	}
	if g := r.Header().GroupID; g != group {
		return 0, fmt.Errorf("bench: moqt subgroup of group %d, want %d", g, group)
	}
	for i := range n {
		h, err := r.Next()
		if err != nil {
			return i, fmt.Errorf("bench: moqt object %d: %w", i, err)
		}
		if h.Location.Object != uint64(i) || r.PayloadLen() != uint64(size) {
			return i, fmt.Errorf("bench: moqt object %d: got object %d of %d bytes, want %d bytes",
				i, h.Location.Object, r.PayloadLen(), size)
		}
		if check {
			// The allocating API, as an application would use it.
			b, err := io.ReadAll(r)
			if err != nil {
				return i, fmt.Errorf("bench: moqt object %d payload: %w", i, err)
			}
			if err := verify(b, scr, i); err != nil {
				return i, err
			}
			continue
		}
		if _, err := io.ReadFull(r, rbuf[:size]); err != nil {
			return i, fmt.Errorf("bench: moqt object %d payload: %w", i, err)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		return n, fmt.Errorf("bench: moqt subgroup did not end after %d objects: %v", n, err)
	}
	return n, nil
}

// Close closes both sessions and the server, and waits for the sessions'
// goroutines.
func (p *moqtPair) Close() error {
	var err error
	if p.client != nil {
		err = p.client.Close()
	}
	if p.server != nil {
		_ = p.server.Close()
	}
	if p.client != nil {
		<-p.client.Context().Done()
	}
	if p.server != nil {
		<-p.server.Context().Done()
	}
	if e := p.srv.Close(); err == nil {
		err = e
	}
	return err
}
