package moqt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// This file is a fake MoQT peer for conformance tests: it speaks raw wire
// bytes over a Pipe imitating a QUIC connection or WebTransport session,
// or for tests of the real transports over one on 127.0.0.1 opened with
// internal/transport, while the library's Session runs on the other end. It writes SETUP and requests itself, reads what the library
// sends with wire.MessageReader, and resets, stops or finishes streams at
// will. Nothing here is shared between tests.

// fakeGuard bounds every wait in these tests. It only turns a hang into a
// failure; no test waits for it to pass.
const fakeGuard = 10 * time.Second

// quietLogger keeps the library's close warnings out of test output.
var quietLogger = slog.New(slog.DiscardHandler)

// fakeTLS holds a certificate for 127.0.0.1 and a client config that trusts
// exactly it, made once for the package.
var fakeTLS = sync.OnceValues(func() (*tls.Config, *tls.Config) {
	cert, _, err := GenerateCertificate()
	if err != nil {
		panic(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		panic(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	return &tls.Config{Certificates: []tls.Certificate{cert}},
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
})

// withServerTLS returns a copy of cfg, or a new Config, whose TLSConfig is
// the package's server certificate unless cfg sets one.
func withServerTLS(cfg *Config) *Config {
	var out Config
	if cfg != nil {
		out = *cfg
	}
	if out.TLSConfig == nil {
		out.TLSConfig, _ = fakeTLS()
	}
	return &out
}

// fakeCtx returns a context that ends after fakeGuard or with the test.
func fakeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), fakeGuard)
	t.Cleanup(cancel)
	return ctx
}

// quietConfig returns cfg, or a new Config, with a quiet logger.
func quietConfig(cfg *Config) *Config {
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger
	}
	return cfg
}

// fakePeer is the far end of a library Session.
type fakePeer struct {
	t    *testing.T
	conn transport.Conn
	v    wire.Version

	ctrlMu sync.Mutex
	ctrl   transport.SendStream // our control stream, once opened
	// peerCtrl reads the library's control stream, once accepted.
	peerCtrl    *wire.MessageReader
	peerCtrlStr transport.ReceiveStream
}

func newFakePeer(t *testing.T, conn transport.Conn) *fakePeer {
	v, ok := wire.ParseALPN(conn.Protocol())
	require.True(t, ok, "negotiated %q", conn.Protocol())
	fp := &fakePeer{t: t, conn: conn, v: v}
	// A read that would hang fails instead: after fakeGuard the connection is
	// closed locally, which every blocked call reports.
	stop := time.AfterFunc(fakeGuard, func() { _ = conn.CloseWithError(0x7e57, "fake peer guard expired") })
	t.Cleanup(func() {
		stop.Stop()
		_ = conn.CloseWithError(uint64(wire.NoError), "test over")
	})
	return fp
}

// closeSession closes the fake's end with NO_ERROR, as an endpoint does
// once a GOAWAY has left nothing open (§6.6.1).
func (fp *fakePeer) closeSession() {
	require.NoError(fp.t, fp.conn.CloseWithError(uint64(wire.NoError), ""))
}

// ---- connecting ----

// libServer is a library Server that fake clients dial: over Pipes
// (startLibServer) or on 127.0.0.1 (startNetServer).
type libServer struct {
	t     *testing.T
	srv   *Server
	pipes *pipeListener // nil on 127.0.0.1
}

// startLibServer starts a Server over Pipes (startPipeServer). Call it
// inside inBubble.
func startLibServer(t *testing.T, cfg *Config, opts *ServerOptions) *libServer {
	t.Helper()
	return startPipeServer(t, cfg, opts)
}

// startNetServer starts a Server on 127.0.0.1, for tests of what the real
// transports do.
func startNetServer(t *testing.T, cfg *Config, opts *ServerOptions) *libServer {
	t.Helper()
	srv, err := Listen("127.0.0.1:0", withServerTLS(quietConfig(cfg)), opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return &libServer{t: t, srv: srv}
}

// dial connects a fake client: scheme "moqt" for raw QUIC, "https" for
// WebTransport (over a Pipe, one imitating it). It sends nothing yet.
func (ls *libServer) dial(scheme string) *fakePeer {
	ls.t.Helper()
	if ls.pipes != nil {
		return newFakePeer(ls.t, ls.pipes.dial(draftPipe(ls.t, transport.PipeConfig{WebTransport: scheme == "https"})))
	}
	_, clientTLS := fakeTLS()
	conn, err := transport.Dial(fakeCtx(ls.t), scheme+"://"+ls.srv.Addr().String()+"/live", clientTLS, nil)
	require.NoError(ls.t, err)
	return newFakePeer(ls.t, conn)
}

// accept returns the next Session whose SETUP exchange completed.
func (ls *libServer) accept() *Session {
	ls.t.Helper()
	s, err := ls.srv.Accept(fakeCtx(ls.t))
	require.NoError(ls.t, err)
	// Abrupt: the fake peer takes no part in Close's wait for delivery.
	ls.t.Cleanup(func() { _ = s.CloseWithError(wire.NoError, "") })
	return s
}

// clientSetup is the SETUP a well-behaved fake client sends over raw QUIC.
func (ls *libServer) clientSetup() *wire.Setup {
	return &wire.Setup{Path: wire.Some("/live"), Authority: wire.Some(ls.srv.Addr().String())}
}

// serverSession is the library as the server of a fake client that has
// completed SETUP, over a Pipe imitating raw QUIC. Call it inside
// inBubble; serverSessionOver can imitate WebTransport.
func serverSession(t *testing.T, cfg *Config) (*Session, *fakePeer) {
	t.Helper()
	return pipeServerSession(t, transport.PipeConfig{}, cfg)
}

// fakeServer is a fake server the library Dials, over Pipes: each dialLib
// is one connection.
type fakeServer struct {
	t *testing.T
}

// startFakeServer starts a fake server. Call it inside inBubble.
func startFakeServer(t *testing.T) *fakeServer {
	return &fakeServer{t: t}
}

// pendingDial is a library Dial in progress.
type pendingDial struct {
	t    *testing.T
	ch   chan dialResult
	once sync.Once
	res  dialResult
	got  bool
}

type dialResult struct {
	s   *Session
	err error
}

// result waits for the Dial to return; it reports false on timeout.
func (d *pendingDial) result() (*Session, error) {
	d.once.Do(func() {
		select {
		case d.res = <-d.ch:
			d.got = true
		case <-time.After(fakeGuard + 2*time.Second):
		}
	})
	return d.res.s, d.res.err
}

// wait waits for the library's Dial to return.
func (d *pendingDial) wait() (*Session, error) {
	d.t.Helper()
	s, err := d.result()
	require.True(d.t, d.got, "Dial did not return")
	return s, err
}

// clientSession is the library as the client of a fake server that has
// completed SETUP, over a Pipe imitating raw QUIC. Call it inside
// inBubble; clientSessionOver can imitate WebTransport.
func clientSession(t *testing.T, cfg *Config) (*Session, *fakePeer) {
	t.Helper()
	return pipeClientSession(t, transport.PipeConfig{}, cfg)
}

// ---- control streams ----

// openControl opens the fake's control stream without writing to it.
func (fp *fakePeer) openControl() transport.SendStream {
	fp.t.Helper()
	str, err := fp.conn.OpenUniStreamSync(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	return str
}

// sendSetup opens the fake's control stream and writes SETUP on it.
func (fp *fakePeer) sendSetup(st *wire.Setup) {
	fp.t.Helper()
	fp.ctrlMu.Lock()
	defer fp.ctrlMu.Unlock()
	fp.ctrl = fp.openControl()
	fp.writeTo(fp.ctrl, st)
}

// sendControl writes m on the fake's control stream.
func (fp *fakePeer) sendControl(m wire.Message) {
	fp.t.Helper()
	fp.ctrlMu.Lock()
	defer fp.ctrlMu.Unlock()
	require.NotNil(fp.t, fp.ctrl, "no control stream")
	fp.writeTo(fp.ctrl, m)
}

// writeTo writes one framed message to w.
func (fp *fakePeer) writeTo(w io.Writer, m wire.Message) {
	fp.t.Helper()
	b, err := wire.AppendMessage(fp.v, nil, m)
	require.NoError(fp.t, err)
	_, err = w.Write(b)
	require.NoError(fp.t, err)
}

// readPeerSetup accepts the library's control stream and reads its SETUP.
func (fp *fakePeer) readPeerSetup() *wire.Setup {
	fp.t.Helper()
	str, err := fp.conn.AcceptUniStream(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	fp.peerCtrlStr = str
	fp.peerCtrl = wire.NewMessageReader(str)
	m, err := fp.peerCtrl.ReadMessage(fp.v)
	require.NoError(fp.t, err)
	st, ok := m.(*wire.Setup)
	require.True(fp.t, ok, "library's control stream starts with %s", m.Type())
	return st
}

// readControl reads the next message on the library's control stream.
func (fp *fakePeer) readControl() wire.Message {
	fp.t.Helper()
	require.NotNil(fp.t, fp.peerCtrl, "library's control stream not accepted")
	m, err := fp.peerCtrl.ReadMessage(fp.v)
	require.NoError(fp.t, err)
	return m
}

// ---- request streams ----

// fakeStream is one bidirectional request stream seen from the fake.
type fakeStream struct {
	fp  *fakePeer
	str transport.Stream
	mr  *wire.MessageReader
}

// open opens a request stream and writes m, normally a request, on it.
func (fp *fakePeer) open(m wire.Message) *fakeStream {
	fp.t.Helper()
	fs := fp.openStream()
	fs.send(m)
	return fs
}

// openStream opens an empty request stream.
func (fp *fakePeer) openStream() *fakeStream {
	fp.t.Helper()
	str, err := fp.conn.OpenStreamSync(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	return &fakeStream{fp: fp, str: str, mr: wire.NewMessageReader(str)}
}

// accept waits for the next request stream the library opens.
func (fp *fakePeer) accept() *fakeStream {
	fp.t.Helper()
	str, err := fp.conn.AcceptStream(fakeCtx(fp.t))
	require.NoError(fp.t, err)
	return &fakeStream{fp: fp, str: str, mr: wire.NewMessageReader(str)}
}

// send writes one framed message.
func (fs *fakeStream) send(m wire.Message) {
	fs.fp.t.Helper()
	fs.fp.writeTo(fs.str, m)
}

// sendRaw writes bytes as they are.
func (fs *fakeStream) sendRaw(b []byte) {
	fs.fp.t.Helper()
	_, err := fs.str.Write(b)
	require.NoError(fs.fp.t, err)
}

// fin closes the fake's sending direction.
func (fs *fakeStream) fin() {
	fs.fp.t.Helper()
	require.NoError(fs.fp.t, fs.str.Close())
}

// reset abandons the fake's sending direction (RESET_STREAM).
func (fs *fakeStream) reset(code wire.ResetCode) { fs.str.CancelWrite(uint64(code)) }

// stopSending asks the library to stop sending (STOP_SENDING).
func (fs *fakeStream) stopSending(code wire.ResetCode) { fs.str.CancelRead(uint64(code)) }

// cancel is a requester's cancellation: RESET_STREAM and STOP_SENDING
// (§6.4.2.3).
func (fs *fakeStream) cancel() {
	fs.reset(wire.ResetCancelled)
	fs.stopSending(wire.ResetCancelled)
}

// readErr reads the next message or the error that ends the stream.
func (fs *fakeStream) readErr() (wire.Message, error) {
	return fs.mr.ReadMessage(fs.fp.v)
}

// read reads the next message, which must arrive.
func (fs *fakeStream) read() wire.Message {
	fs.fp.t.Helper()
	m, err := fs.readErr()
	require.NoError(fs.fp.t, err)
	return m
}

// expect reads the next message and requires it to be of type T.
func expect[T wire.Message](fs *fakeStream) T {
	fs.fp.t.Helper()
	m := fs.read()
	v, ok := m.(T)
	require.True(fs.fp.t, ok, "got %s, want %T", m.Type(), *new(T))
	return v
}

// expectFIN requires the library to have finished its direction cleanly.
func (fs *fakeStream) expectFIN() {
	fs.fp.t.Helper()
	m, err := fs.readErr()
	if err == nil {
		require.Failf(fs.fp.t, "expected FIN", "got %s", m.Type())
	}
	require.ErrorIs(fs.fp.t, err, io.EOF)
}

// expectReset requires the library to have reset its direction with code.
func (fs *fakeStream) expectReset(code wire.ResetCode) {
	fs.fp.t.Helper()
	m, err := fs.readErr()
	if err == nil {
		require.Failf(fs.fp.t, "expected RESET_STREAM", "got %s", m.Type())
	}
	var se *transport.StreamError
	require.ErrorAs(fs.fp.t, err, &se)
	assert.True(fs.fp.t, se.Remote, "reset was local")
	assert.Equal(fs.fp.t, uint64(code), se.Code, "reset code")
}

// expectStopSending requires the library to have sent STOP_SENDING with
// code: the send side's context ends, and a write reports the code.
func (fs *fakeStream) expectStopSending(code wire.ResetCode) {
	fs.fp.t.Helper()
	select {
	case <-fs.str.Context().Done():
	case <-time.After(fakeGuard):
		require.FailNow(fs.fp.t, "no STOP_SENDING")
	}
	_, err := fs.str.Write([]byte{0})
	var se *transport.StreamError
	require.ErrorAs(fs.fp.t, err, &se)
	assert.True(fs.fp.t, se.Remote, "STOP_SENDING was local")
	assert.Equal(fs.fp.t, uint64(code), se.Code, "STOP_SENDING code")
}

// ---- session close ----

// expectClose waits for the library to close the session and checks the
// code it used. It returns the close for further checks.
func (fp *fakePeer) expectClose(code wire.SessionErrorCode) *transport.CloseError {
	fp.t.Helper()
	select {
	case <-fp.conn.Context().Done():
	case <-time.After(fakeGuard + time.Second):
		require.FailNow(fp.t, "session not closed")
	}
	var ce *transport.CloseError
	require.ErrorAs(fp.t, context.Cause(fp.conn.Context()), &ce)
	assert.True(fp.t, ce.Remote, "the fake closed the session itself: %v", ce)
	assert.Equal(fp.t, code.String(), wire.SessionErrorCode(ce.Code).String(), "close code (reason %q)", ce.Reason)
	return ce
}

// expectSessionError waits for s to end and checks its cause.
func expectSessionError(t *testing.T, s *Session, code wire.SessionErrorCode) *SessionError {
	t.Helper()
	select {
	case <-s.Context().Done():
	case <-time.After(fakeGuard):
		require.FailNow(t, "session not closed")
	}
	var se *SessionError
	require.ErrorAs(t, context.Cause(s.Context()), &se)
	assert.Equal(t, code.String(), se.Code.String(), "session close code (reason %q)", se.Reason)
	return se
}

// alive checks that the session still serves requests: a TRACK_STATUS from
// the fake must be answered (the default handler says DOES_NOT_EXIST).
func (fp *fakePeer) alive(id uint64) {
	fp.t.Helper()
	fs := fp.open(&wire.TrackStatus{RequestID: id, TrackNamespace: wire.NewNamespace("ping"), TrackName: []byte("x")})
	fs.fin()
	m := fs.read()
	switch m.(type) {
	case *wire.RequestOK, *wire.RequestError:
	default:
		require.Failf(fp.t, "session not alive", "TRACK_STATUS answered with %s", m.Type())
	}
}

// ---- message builders ----

var (
	trackA = wire.FullTrackName{Namespace: wire.NewNamespace("live", "a"), Name: []byte("video")}
	trackB = wire.FullTrackName{Namespace: wire.NewNamespace("live", "b"), Name: []byte("video")}
)

func subscribeMsg(id uint64, track wire.FullTrackName, params wire.Params) *wire.Subscribe {
	return &wire.Subscribe{RequestID: id, TrackNamespace: track.Namespace, TrackName: track.Name, Parameters: params}
}

func publishMsg(id uint64, track wire.FullTrackName, alias uint64, params wire.Params, props wire.KVList) *wire.Publish {
	return &wire.Publish{RequestID: id, TrackNamespace: track.Namespace, TrackName: track.Name,
		TrackAlias: alias, Parameters: params, TrackProperties: props}
}

// frame builds a control message by hand: Type, Length, body, for bodies
// the codec refuses to encode.
func frame(t wire.MessageType, body []byte) []byte {
	b := wire.AppendVarint(nil, uint64(t))
	b = append(b, byte(len(body)>>8), byte(len(body)))
	return append(b, body...)
}

// rawTrackRequest is the body of SUBSCRIBE or TRACK_STATUS followed by raw
// parameter bytes: count, then type delta and value per parameter.
func rawTrackRequest(t *testing.T, id uint64, track wire.FullTrackName, params ...byte) []byte {
	b := wire.AppendVarint(nil, id)
	b, err := track.Append(b)
	require.NoError(t, err)
	return append(b, params...)
}

// ---- handlers ----

// servedCh is a handler that accepts every SUBSCRIBE with opts and hands
// the ServedSubscription over; anything else is rejected.
func servedCh(opts AcceptOptions) (Handler, <-chan *ServedSubscription) {
	return servedChAt(wire.Opt[wire.Location]{}, opts)
}

// recv waits for a value on ch.
func recvOrFail[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(fakeGuard):
		require.FailNow(t, "nothing received")
		var zero T
		return zero
	}
}

// closedOrFail waits for ch to be closed.
func closedOrFail(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(fakeGuard):
		require.FailNow(t, what)
	}
}

// goErr runs f in a goroutine and returns a channel with its error.
func goErr(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}
