package moqt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Session is one MoQT session over a QUIC connection or a WebTransport
// session (§6). It is safe for concurrent use.
//
// A Session runs one goroutine accepting request streams, one accepting
// unidirectional streams, one reading the peer's control stream, one per
// request stream and one per request handed to the Handler. All of them end
// when the session closes; Close waits for all but the Handler calls.
type Session struct {
	conn     transport.Conn
	version  wire.Version
	isClient bool
	cfg      *Config
	log      *slog.Logger
	handler  Handler
	// path and authority are the URI parts the client asked for: from the
	// WebTransport request, or from the PATH and AUTHORITY Setup Options.
	path, authority string
	// checkSetup lets a Server refuse a client's SETUP (INVALID_PATH, …).
	checkSetup func(*wire.Setup) error

	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // the session's own goroutines, which Close waits for
	// handlers counts running Handler calls, which Close does not wait
	// for: user code, possibly the caller of Close.
	handlers sync.WaitGroup

	setupDone chan struct{} // closed when the peer's SETUP has been accepted
	peerSetup *wire.Setup   // written once, before setupDone is closed
	// peerSetupTokens are the peer's SETUP tokens, resolved; written once,
	// before setupDone is closed.
	peerSetupTokens []AuthToken

	peerTokens *tokenCache // the peer's token registrations (§8.9)
	sentTokens *sentTokens // this endpoint's registrations with the peer

	// peerCtrl is set by the first unidirectional stream of type SETUP:
	// the peer's control stream. A second is a PROTOCOL_VIOLATION (§6.3).
	peerCtrl atomic.Bool

	ctrlMu  sync.Mutex // serializes writes to ctrl
	ctrl    transport.SendStream
	ctrlBuf []byte

	goawayIn   chan struct{} // closed when the peer sent GOAWAY on the control stream
	goawayURI  string        // written once, before goawayIn is closed
	goawayOnce sync.Once

	mu         sync.Mutex // guards the fields below; never held while calling out
	nextID     uint64
	peerIDs    requestIDs
	active     map[*requestStream]struct{}
	idle       chan struct{} // closed and replaced when active becomes empty
	sentGoaway bool
	aliases    aliasTable
	// aliasBound is closed and replaced whenever an alias is bound, waking
	// the data streams that wait for theirs.
	aliasBound       chan struct{}
	pendingStreams   int               // data streams waiting for their alias
	pendingBytes     int               // bytes read ahead from them
	pendingDatagrams []pendingDatagram // datagrams waiting for their alias
	droppedDatagrams uint64            // datagrams dropped while waiting

	prio prioTable // urgency of this session's data streams (raw QUIC)
}

// newSession wraps conn. The caller runs handshake next.
func newSession(conn transport.Conn, version wire.Version, isClient bool, cfg *Config) *Session {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &Session{
		conn:       conn,
		version:    version,
		isClient:   isClient,
		cfg:        cfg,
		handler:    cfg.Handler,
		ctx:        ctx,
		cancel:     cancel,
		setupDone:  make(chan struct{}),
		goawayIn:   make(chan struct{}),
		active:     map[*requestStream]struct{}{},
		idle:       make(chan struct{}),
		aliasBound: make(chan struct{}),
		peerTokens: newTokenCache(cfg.MaxAuthTokenCacheSize),
		sentTokens: newSentTokens(),
	}
	role := "server"
	if isClient {
		role = "client"
		s.peerIDs = newRequestIDs(1) // the server's IDs are odd
	} else {
		s.nextID = 1
		s.peerIDs = newRequestIDs(0) // the client's IDs are even
	}
	close(s.idle)
	s.log = cfg.Logger.With("role", role, "version", version.String(), "remote", conn.RemoteAddr().String())
	return s
}

// handshake opens the control stream, sends SETUP, starts the session's
// goroutines and waits for the peer's SETUP (§6.3). On failure the session
// is closed.
func (s *Session) handshake(ctx context.Context, setup *wire.Setup) error {
	s.wg.Add(4)
	go s.receiveDatagrams()
	go s.watchTransport()
	go s.acceptUniStreams()
	go s.acceptRequestStreams()

	ctrl, err := s.conn.OpenUniStreamSync(ctx)
	if err != nil {
		s.fail(&SessionError{Code: wire.InternalError, Reason: "opening the control stream: " + err.Error()})
		return s.closeErr(err)
	}
	s.ctrl = ctrl
	context.AfterFunc(ctrl.Context(), s.controlStreamEnded)
	if err := s.writeControl(setup); err != nil {
		s.fail(err)
		return s.closeErr(err)
	}
	timer := time.NewTimer(s.cfg.SetupTimeout)
	defer timer.Stop()
	select {
	case <-s.setupDone:
		return nil
	case <-s.ctx.Done():
		return context.Cause(s.ctx)
	case <-timer.C:
		s.fail(&SessionError{Code: wire.ControlMessageTimeout, Reason: "no SETUP from peer"})
		return context.Cause(s.ctx)
	case <-ctx.Done():
		s.fail(&SessionError{Code: wire.InternalError, Reason: "setup abandoned"})
		return ctx.Err()
	}
}

// controlStreamEnded runs once this endpoint's control stream can no
// longer be written. If the peer stopped it with STOP_SENDING, the stream
// was closed at the transport layer during the session, which is a
// PROTOCOL_VIOLATION (§6.3). An empty write reports the reason without
// sending anything: the peer's STOP_SENDING as a remote stream error, the
// connection's end as a close error.
func (s *Session) controlStreamEnded() {
	s.ctrlMu.Lock()
	_, err := s.ctrl.Write(nil)
	s.ctrlMu.Unlock()
	var se *transport.StreamError
	if errors.As(err, &se) && se.Remote {
		s.fail(protocolViolation("peer stopped this endpoint's control stream"))
	}
}

// hook runs the test hook pick selects, if any.
func (s *Session) hook(pick func(*sessionHooks) func()) {
	if h := s.cfg.hooks; h != nil {
		if f := pick(h); f != nil {
			f()
		}
	}
}

// closeErr returns the session's close cause if it is closed, else err.
func (s *Session) closeErr(err error) error {
	if cause := context.Cause(s.ctx); cause != nil {
		return cause
	}
	return err
}

// ownSetup builds the SETUP this endpoint sends.
func (s *Session) ownSetup() *wire.Setup {
	st := &wire.Setup{}
	if !s.cfg.DisableImplementation {
		st.MoqtImplementation = wire.Some(s.cfg.Implementation)
	}
	if s.cfg.MaxRequestUpdates != 0 {
		st.MaxRequestUpdates = wire.Some(s.cfg.MaxRequestUpdates)
	}
	if s.cfg.MaxFilterRanges != 0 {
		st.MaxFilterRanges = wire.Some(s.cfg.MaxFilterRanges)
	}
	if s.cfg.MaxAuthTokenCacheSize != 0 {
		st.MaxAuthTokenCacheSize = wire.Some(s.cfg.MaxAuthTokenCacheSize)
	}
	st.AuthorizationTokens = s.cfg.AuthorizationTokens
	return st
}

// Context is cancelled when the session ends; its cause is the
// *SessionError that ended it.
func (s *Session) Context() context.Context { return s.ctx }

// Version is the negotiated draft.
func (s *Session) Version() wire.Version { return s.version }

// IsClient reports whether this endpoint is the client.
func (s *Session) IsClient() bool { return s.isClient }

// WebTransport reports whether the session runs over WebTransport.
func (s *Session) WebTransport() bool { return s.conn.WebTransport() }

// Path is the path and query the client asked for.
func (s *Session) Path() string { return s.path }

// Authority is the authority the client asked for (raw QUIC only).
func (s *Session) Authority() string { return s.authority }

// PeerSetup returns the peer's SETUP: its Setup Options, including any
// AUTHORIZATION_TOKENs as sent, for the application to inspect.
// PeerAuthorizationTokens has the tokens resolved.
func (s *Session) PeerSetup() *wire.Setup { return s.peerSetup }

// closeWait bounds how long Close waits for the session's goroutines.
// They end as soon as the connection is closed; the bound only guards
// against a bug, or a CheckSetup callback that calls Close itself.
const closeWait = 5 * time.Second

// CloseWithError closes the session with code and reason (§6.6). The first
// close wins; later calls return nil.
//
// It returns once the close is on the wire (raw QUIC: CONNECTION_CLOSE has
// been sent; WebTransport: the peer has closed the connection after reading
// WT_CLOSE_SESSION, or a second has passed and the connection was closed
// with H3_NO_ERROR), so that a process may exit right after, and once the
// session's goroutines have ended (at most closeWait). Handler calls still
// running are not waited for: a Handler may call Close itself. Their
// requests end with the session.
func (s *Session) CloseWithError(code wire.SessionErrorCode, reason string) error {
	s.fail(&SessionError{Code: code, Reason: reason})
	<-s.conn.Context().Done()
	s.waitGoroutines()
	return nil
}

// Close closes the session with NO_ERROR; see CloseWithError.
func (s *Session) Close() error { return s.CloseWithError(wire.NoError, "") }

// waitGoroutines waits, at most closeWait, for the session's goroutines.
func (s *Session) waitGoroutines() {
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("session goroutines still running after close", "waited", closeWait)
	}
}

// fail closes the session with the error err maps to (§12.2). It is the
// one place where a session ends locally.
func (s *Session) fail(err error) {
	se := sessionErrorFrom(err)
	if context.Cause(s.ctx) != nil {
		return
	}
	s.cancel(se)
	if context.Cause(s.ctx) != se {
		return // another close won the race
	}
	if se.Code != wire.NoError {
		s.log.Warn("closing session", "code", se.Code.String(), "reason", se.Reason)
	}
	reason := se.Reason
	if len(reason) > wire.MaxReasonLen {
		reason = reason[:wire.MaxReasonLen]
	}
	_ = s.conn.CloseWithError(uint64(se.Code), reason)
}

// watchTransport ends the session when the connection goes away by itself.
func (s *Session) watchTransport() {
	defer s.wg.Done()
	select {
	case <-s.ctx.Done():
		// Closed from this end: fail closes the connection next. The
		// resets below wait for that, or they could reach the peer
		// before the close and read as the end of single requests.
		select {
		case <-s.conn.Context().Done():
		case <-time.After(time.Second):
		}
	case <-s.conn.Context().Done():
		s.cancel(s.transportCloseError())
	}
	s.hook(func(h *sessionHooks) func() { return h.sessionEnded })
	s.abortRequests()
}

// abortRequests unblocks every request stream once the session has ended.
// A closed QUIC connection does that by itself, but a WebTransport stream
// can block a Read until its session is torn down, which may lag.
func (s *Session) abortRequests() {
	s.mu.Lock()
	open := make([]*requestStream, 0, len(s.active))
	for rs := range s.active {
		open = append(open, rs)
	}
	s.mu.Unlock()
	for _, rs := range open {
		rs.cancel(wire.ResetSessionClosed)
	}
}

// transportCloseError turns the transport's close into a *SessionError.
func (s *Session) transportCloseError() *SessionError {
	cause := context.Cause(s.conn.Context())
	if se := connEnded(cause); se != nil {
		return se
	}
	reason := "connection closed"
	if cause != nil {
		reason = cause.Error()
	}
	return &SessionError{Code: wire.InternalError, Reason: reason, Remote: true}
}

// connEnded returns the *SessionError for an error that says the
// connection ended: a close with a MoQT code (*transport.CloseError), or
// its death without one (*transport.ConnError). Otherwise nil.
func connEnded(err error) *SessionError {
	if ce, ok := errors.AsType[*transport.CloseError](err); ok {
		return &SessionError{Code: wire.SessionErrorCode(ce.Code), Reason: ce.Reason, Remote: ce.Remote}
	}
	if ce, ok := errors.AsType[*transport.ConnError](err); ok {
		te := transportError(ce)
		return &SessionError{Code: wire.InternalError, Reason: te.Error(), Remote: te.Remote, Transport: te}
	}
	return nil
}

// streamError maps a stream read or write error: once the session is
// closed that is the session's error, the same one its Context has as
// cause, however it ended; otherwise a *StreamError for a reset or
// STOP_SENDING, or the error as it is.
func (s *Session) streamError(err error) error {
	if cause := context.Cause(s.ctx); cause != nil {
		return cause
	}
	if se := connEnded(err); se != nil {
		// Read before watchTransport saw the connection end: this is
		// its cause, unless another won the race.
		s.cancel(se)
		return context.Cause(s.ctx)
	}
	return publicError(err)
}

// writeControl sends one message on this endpoint's control stream.
func (s *Session) writeControl(m wire.Message) error {
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	b, err := wire.AppendMessage(s.version, s.ctrlBuf[:0], m)
	if err != nil {
		return err
	}
	s.ctrlBuf = b
	if _, err := s.ctrl.Write(b); err != nil {
		return s.streamError(err)
	}
	return nil
}

// acceptUniStreams dispatches the peer's unidirectional streams by their
// stream type (§6.4.1).
func (s *Session) acceptUniStreams() {
	defer s.wg.Done()
	for {
		str, err := s.conn.AcceptUniStream(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.serveUniStream(str); err != nil {
				s.fail(err)
			}
		}()
	}
}

// serveUniStream reads a unidirectional stream's type and routes it
// (§6.4.1). The control stream's type is SETUP's own Type, 0x2F00, so a
// control stream cannot start with any other message: a stream that starts
// with another message's bytes is a stream of that type. Message types
// that are not stream types (SUBSCRIBE 0x03, REQUEST_OK 0x07, the old
// CLIENT_SETUP 0x20 and 0x40, …) close the session with PROTOCOL_VIOLATION;
// those that coincide with a data stream type (GOAWAY 0x10 is a
// SUBGROUP_HEADER type, REQUEST_ERROR 0x05 is FETCH_HEADER) are read as
// data streams.
//
// The type and the header must arrive within Config.DataStreamTimeout;
// otherwise the session is closed with DATA_STREAM_TIMEOUT (§12.2), which
// ends the read: a stream stalled there would hold its goroutine and
// buffer for the rest of the session.
func (s *Session) serveUniStream(str transport.ReceiveStream) error {
	var state atomic.Int32 // 0 reading, 1 timed out, 2 read
	timer := time.AfterFunc(s.cfg.DataStreamTimeout, func() {
		if state.CompareAndSwap(0, 1) {
			s.fail(&SessionError{Code: wire.DataStreamTimeout,
				Reason: "a unidirectional stream's type or header did not arrive in time"})
		}
	})
	br := bufio.NewReader(str)
	h, err := wire.ReadStreamHeader(br)
	timer.Stop()
	if !state.CompareAndSwap(0, 2) {
		str.CancelRead(uint64(wire.ResetSessionClosed))
		return nil // the session is closing for it
	}
	switch {
	case err == nil:
	case isCleanEOF(err):
		// A stream that ends before its type carries nothing.
		str.CancelRead(uint64(wire.ResetCancelled))
		return nil
	default:
		// An unknown stream type or a malformed header closes the session
		// (§6.4.1, §11.3.1); a reset only drops the stream.
		return s.dataStreamError(str, err)
	}
	switch h.Type {
	case wire.StreamControl:
		// The stream type is the SETUP message's Type (§9.1): put it back
		// in front of the message.
		prefix := wire.AppendVarint(nil, wire.ControlStreamType)
		ctl := &controlReader{r: io.MultiReader(bytes.NewReader(prefix), br), s: s}
		defer ctl.stop()
		return s.readControl(wire.NewMessageReader(ctl), ctl)
	case wire.StreamSubgroup:
		return s.receiveSubgroup(str, br, h.Subgroup)
	default:
		// Padding is discarded (§11.5.1). A FETCH_HEADER stream answers
		// a FETCH; this endpoint sends none yet, so none is expected.
		str.CancelRead(uint64(wire.ResetCancelled))
		return nil
	}
}

// readControl reads the peer's control stream: SETUP first, then only
// GOAWAY (§6.3, §9). The stream must stay open for the whole session.
func (s *Session) readControl(mr *wire.MessageReader, ctl *controlReader) error {
	// Claimed before anything is read, so that two control streams racing
	// each other cannot both deliver a SETUP.
	if !s.peerCtrl.CompareAndSwap(false, true) {
		return protocolViolation("second control stream")
	}
	m, err := mr.ReadMessage(s.version)
	if err != nil {
		return s.controlReadError(err)
	}
	setup, ok := m.(*wire.Setup)
	if !ok {
		return protocolViolation("control stream starts with %s", m.Type())
	}
	if err := s.acceptSetup(setup); err != nil {
		return err
	}
	ctl.timed = true // SETUP had SetupTimeout; every later message is timed
	for {
		m, err := mr.ReadMessage(s.version)
		ctl.done()
		if err != nil {
			return s.controlReadError(err)
		}
		g, ok := m.(*wire.Goaway)
		if !ok {
			return protocolViolation("%s on the control stream", m.Type())
		}
		if err := s.receiveGoaway(g); err != nil {
			return err
		}
	}
}

// controlReader reads the peer's control stream. Once timed, the first
// byte of a message starts its CONTROL_MESSAGE_TIMEOUT (§12.2): a GOAWAY
// left half sent would otherwise go unread for the rest of the session.
// Only the goroutine reading the stream uses it.
type controlReader struct {
	r     io.Reader
	s     *Session
	timed bool
	armed bool
	timer *time.Timer
}

func (c *controlReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.timed && !c.armed {
		c.armed = true
		d := c.s.cfg.ControlMessageTimeout
		if c.timer == nil {
			c.timer = time.AfterFunc(d, func() {
				c.s.fail(&SessionError{Code: wire.ControlMessageTimeout,
					Reason: fmt.Sprintf("control message on the control stream not complete after %v", d)})
			})
		} else {
			c.timer.Reset(d)
		}
	}
	return n, err
}

// done ends the timing of the message just read.
func (c *controlReader) done() {
	if c.armed {
		c.armed = false
		c.timer.Stop()
	}
}

// stop releases the timer when the stream is no longer read.
func (c *controlReader) stop() {
	if c.timer != nil {
		c.timer.Stop()
	}
}

func (s *Session) controlReadError(err error) error {
	if cause := context.Cause(s.ctx); cause != nil {
		return nil // the session is already closing
	}
	var pe *wire.ProtocolError
	if errors.As(err, &pe) && !errors.Is(err, wire.ErrTruncated) {
		return err
	}
	if connEnded(err) != nil {
		_ = s.streamError(err) // the connection's end, not the stream's
		return nil
	}
	return protocolViolation("control stream closed: %v", err)
}

// acceptSetup validates the peer's SETUP (§9.1) and releases everything
// that waited for it.
func (s *Session) acceptSetup(st *wire.Setup) error {
	if err := st.Check(!s.isClient, s.conn.WebTransport()); err != nil {
		return err
	}
	if !s.isClient && !s.conn.WebTransport() {
		if st.Path.Set {
			s.path = st.Path.Value
		}
		if st.Authority.Set {
			s.authority = st.Authority.Value
		}
	}
	toks, rej, err := s.peerTokens.resolve(st.AuthorizationTokens, true)
	if err != nil {
		return err
	}
	if rej != nil {
		// Rejecting SETUP can only mean closing the session.
		return &SessionError{Code: wire.MalformedAuthToken, Reason: "SETUP: " + rej.Reason}
	}
	s.peerSetupTokens = toks
	s.sentTokens.setup(s.cfg.AuthorizationTokens, st.MaxAuthTokenCacheSize.Value)
	if s.checkSetup != nil {
		if err := s.checkSetup(st); err != nil {
			return err
		}
	}
	own, err := detach(s.version, st)
	if err != nil {
		return err
	}
	s.peerSetup = own
	close(s.setupDone)
	s.log.Debug("peer SETUP", "implementation", st.MoqtImplementation.Value)
	return nil
}

// receiveGoaway handles GOAWAY on the control stream (§9.2).
func (s *Session) receiveGoaway(g *wire.Goaway) error {
	if err := s.checkGoaway(g); err != nil {
		return err
	}
	seen := true
	s.goawayOnce.Do(func() {
		seen = false
		s.goawayURI = g.NewSessionURI
		close(s.goawayIn)
	})
	if seen {
		return protocolViolation("second GOAWAY on the control stream")
	}
	s.log.Info("peer sent GOAWAY", "uri", s.goawayURI, "timeout_ms", g.Timeout)
	s.wg.Add(1)
	go s.closeWhenIdle()
	return nil
}

// checkGoaway applies the rule that a client always sends an empty URI.
func (s *Session) checkGoaway(g *wire.Goaway) error {
	if !s.isClient && len(g.NewSessionURI) != 0 {
		return protocolViolation("client sent GOAWAY with a New Session URI")
	}
	return nil
}

// GoingAway is closed when the peer sends GOAWAY on the control stream. New
// requests then fail with ErrGoingAway.
func (s *Session) GoingAway() <-chan struct{} { return s.goawayIn }

// GoawayURI is the New Session URI of the peer's GOAWAY, if any.
func (s *Session) GoawayURI() string {
	select {
	case <-s.goawayIn:
		return s.goawayURI
	default:
		return ""
	}
}

// Shutdown drains the session (§6.6.1): it sends GOAWAY on the control
// stream, refuses new requests from the peer with GOING_AWAY, and waits for
// the open requests to end and then for the peer to close the session, as
// the spec recommends it do once nothing is open (this library does). When
// ctx ends first, Shutdown closes the session itself: with NO_ERROR if
// nothing is open, else with GOAWAY_TIMEOUT. The GOAWAY's Timeout is taken
// from ctx's deadline; give it one, or a peer that ignores GOAWAY keeps
// Shutdown waiting. uri is sent only by a server.
//
// A request is open until its stream is closed in both directions, by FIN
// or reset: a subscription this end ended with PUBLISH_DONE stays open
// until the subscriber finishes its side too. A QUIC close discards stream
// data not yet read, so waiting is what guarantees that final messages,
// and the GOAWAY with its New Session URI, reach the peer.
func (s *Session) Shutdown(ctx context.Context, uri string) error {
	var timeout uint64
	if d, ok := ctx.Deadline(); ok {
		timeout = uint64(max(time.Until(d).Milliseconds(), 1))
	}
	if s.isClient {
		uri = ""
	}
	s.mu.Lock()
	already := s.sentGoaway
	s.sentGoaway = true
	s.mu.Unlock()
	if !already {
		if err := s.writeControl(&wire.Goaway{NewSessionURI: uri, Timeout: timeout}); err != nil {
			return err
		}
	}
	if err := s.waitIdle(ctx); err != nil {
		if s.ctx.Err() != nil {
			return s.closedByPeer()
		}
		return s.CloseWithError(wire.GoawayTimeout, "requests still open after GOAWAY timeout")
	}
	select {
	case <-s.ctx.Done():
		return s.closedByPeer()
	case <-ctx.Done():
		return s.Close()
	}
}

// closedByPeer is Shutdown's result once the session has ended: nil for a
// close with NO_ERROR, else the cause.
func (s *Session) closedByPeer() error {
	var se *SessionError
	if cause := context.Cause(s.ctx); !errors.As(cause, &se) || se.Code != wire.NoError {
		return cause
	}
	return nil
}

// waitIdle waits until no request is open. It fails when ctx or the
// session ends first.
func (s *Session) waitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		idle := s.idle
		n := len(s.active)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-idle:
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// closeWhenIdle closes the session with NO_ERROR once no request is open,
// after the peer's GOAWAY: the close the spec recommends (§6.6.1), which
// the peer's drain waits for.
func (s *Session) closeWhenIdle() {
	defer s.wg.Done()
	if s.waitIdle(s.ctx) == nil {
		s.log.Info("closing after the peer's GOAWAY: no request is open")
		s.fail(&SessionError{Code: wire.NoError}) // not Close, which would wait for this goroutine
	}
}

// acceptRequestStreams serves the request streams the peer opens.
func (s *Session) acceptRequestStreams() {
	defer s.wg.Done()
	for {
		str, err := s.conn.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.serveRequestStream(str); err != nil {
				s.fail(err)
			}
		}()
	}
}

// serveRequestStream reads the request that opens a peer's stream and
// dispatches it (§6.4.2). Requests that arrive before the peer's SETUP wait
// in their stream's flow-control window, which bounds them (§6.3).
func (s *Session) serveRequestStream(str transport.Stream) error {
	select {
	case <-s.setupDone:
	default:
		s.hook(func(h *sessionHooks) func() { return h.requestWaitsForSetup })
		select {
		case <-s.setupDone:
		case <-s.ctx.Done():
			return nil
		}
	}
	rs := newRequestStream(s, str, 0, false)
	// The peer opened the stream to send its request: it has
	// ControlMessageTimeout to get it here whole.
	rs.startTimer()
	t, body, err := rs.mr.ReadFrame()
	rs.stopTimer()
	if err != nil {
		if errors.Is(err, wire.ErrTruncated) {
			return err
		}
		str.CancelRead(uint64(wire.ResetCancelled))
		str.CancelWrite(uint64(wire.ResetCancelled))
		return nil // closed or reset before its first message
	}
	if !t.IsRequest() {
		return protocolViolation("request stream starts with %s", t)
	}
	rs.typ = t
	m, perr := wire.ParseMessage(s.version, t, body)
	var rej *wire.RejectError
	if perr != nil && !errors.As(perr, &rej) {
		return perr
	}
	rs.id = requestID(m)
	if err := s.checkPeerRequestID(rs.id); err != nil {
		return err
	}
	// Tokens are resolved whatever becomes of the request: a REGISTER
	// stands even if the request fails (§8.9).
	toks, tokRej, err := s.takeTokens(requestParams(m))
	if err != nil {
		return err
	}
	if !s.track(rs) {
		return nil
	}
	defer s.untrack(rs)
	if e := s.refusal(m, rej, tokRej); e != nil {
		rs.reject(e)
		return rs.drain()
	}
	switch m := m.(type) {
	case *wire.Subscribe:
		return s.serveSubscribe(rs, m, toks)
	case *wire.Publish:
		return s.servePublish(rs, m, toks)
	case *wire.TrackStatus:
		return s.serveTrackStatus(rs, m, toks)
	default:
		rs.reject(&RequestError{Code: wire.ReqNotSupported, Reason: m.Type().String() + " is not supported"})
		return rs.drain()
	}
}

// refusal returns the REQUEST_ERROR that answers request m without any
// application processing, or nil when the request goes on (§6.4.2.3): a
// problem found in parsing, then one with its authorization tokens.
func (s *Session) refusal(m wire.Message, rej *wire.RejectError, tokRej *RequestError) *RequestError {
	if rej != nil {
		return &RequestError{Code: rej.Code, Reason: rej.Reason}
	}
	if tokRej != nil {
		return tokRej
	}
	if s.goingAway() {
		return &RequestError{Code: wire.ReqGoingAway, Reason: "session is draining"}
	}
	if track, ok := requestTrack(m); ok && isSessionNamespace(track.Namespace) {
		// Session-level tracks are the implementation's, never the
		// application's; none are defined, so none exist (§6.5).
		return &RequestError{Code: wire.ReqDoesNotExist, Reason: "unknown session-level track"}
	}
	var ns wire.Namespace
	switch m := m.(type) {
	case *wire.PublishNamespace:
		ns = m.TrackNamespace
	case *wire.SubscribeNamespace:
		ns = m.TrackNamespacePrefix
	case *wire.SubscribeTracks:
		ns = m.TrackNamespacePrefix
	}
	if isSessionNamespace(ns) {
		// The same for session-level namespaces: DOES_NOT_EXIST, not
		// the NOT_SUPPORTED of other namespace requests (§6.5).
		return &RequestError{Code: wire.ReqDoesNotExist, Reason: "unknown session-level namespace"}
	}
	return nil
}

// reject answers a request with REQUEST_ERROR and FIN (§6.4.2.3). The
// requester finishes its direction in turn, and whoever reads the stream
// keeps reading until it does (§6.4.2.2); the request counts as open, for
// Shutdown, until then. A STOP_SENDING here would read as a cancellation,
// so none is sent.
func (rs *requestStream) reject(e *RequestError) {
	// A failed write means the stream or session is gone already, which
	// ends the request just the same.
	_ = rs.writeAndFin(e.message())
}

// goingAway reports whether this endpoint sent GOAWAY.
func (s *Session) goingAway() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sentGoaway
}

// track registers an open request, for Shutdown's drain. It reports false
// once the session is closed.
func (s *Session) track(rs *requestStream) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	if len(s.active) == 0 {
		s.idle = make(chan struct{})
	}
	s.active[rs] = struct{}{}
	return true
}

func (s *Session) untrack(rs *requestStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.active[rs]; !ok {
		return
	}
	delete(s.active, rs)
	if len(s.active) == 0 {
		close(s.idle)
	}
}

// newRequestID allocates this endpoint's next Request ID (§6.4.2.1).
func (s *Session) newRequestID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID += 2
	return id
}

// checkPeerRequestID enforces the peer's parity and uniqueness (§6.4.2.1).
func (s *Session) checkPeerRequestID(id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.peerIDs.add(id); err != nil {
		return &SessionError{Code: wire.InvalidRequestID, Reason: err.Error()}
	}
	return nil
}

// openRequest opens a request stream for a new request of this endpoint,
// whose message will carry toks. The tokens are checked against the peer's
// token cache first (§8.9): if they break its rules, nothing is opened.
func (s *Session) openRequest(ctx context.Context, toks []wire.Token) (*requestStream, error) {
	select {
	case <-s.goawayIn:
		return nil, ErrGoingAway
	default:
	}
	if cause := context.Cause(s.ctx); cause != nil {
		return nil, cause
	}
	key := new(tokenStream)
	use, err := s.sentTokens.prepare(toks, key)
	if err != nil {
		return nil, err
	}
	str, err := s.conn.OpenStreamSync(ctx)
	if err != nil {
		s.sentTokens.abort(use)
		return nil, s.closeErr(err)
	}
	rs := newRequestStream(s, str, s.newRequestID(), true)
	rs.tokenKey, rs.sentTokens = key, use
	if !s.track(rs) {
		str.CancelWrite(uint64(wire.ResetSessionClosed))
		s.sentTokens.abort(use)
		return nil, context.Cause(s.ctx)
	}
	return rs, nil
}

// requestIDs records the Request IDs a peer has used. IDs below floor are
// all used; used IDs above it wait in above until the gap closes. A peer
// that leaves a gap open cannot grow above past maxRequestIDGap: the floor
// then moves up, treating the skipped IDs as used.
type requestIDs struct {
	floor uint64
	above map[uint64]struct{}
}

const maxRequestIDGap = 1 << 12

func newRequestIDs(first uint64) requestIDs {
	return requestIDs{floor: first, above: map[uint64]struct{}{}}
}

func (r *requestIDs) add(id uint64) error {
	if id%2 != r.floor%2 {
		return fmt.Errorf("request ID %d has the wrong parity", id)
	}
	if _, dup := r.above[id]; id < r.floor || dup {
		return fmt.Errorf("request ID %d reused", id)
	}
	r.above[id] = struct{}{}
	if len(r.above) > maxRequestIDGap {
		lowest := id
		for k := range r.above {
			lowest = min(lowest, k)
		}
		r.floor = lowest
	}
	for {
		if _, ok := r.above[r.floor]; !ok {
			return nil
		}
		delete(r.above, r.floor)
		r.floor += 2
	}
}

// requestID returns the Request ID of a request message.
func requestID(m wire.Message) uint64 {
	switch m := m.(type) {
	case *wire.Subscribe:
		return m.RequestID
	case *wire.Publish:
		return m.RequestID
	case *wire.Fetch:
		return m.RequestID
	case *wire.TrackStatus:
		return m.RequestID
	case *wire.PublishNamespace:
		return m.RequestID
	case *wire.SubscribeNamespace:
		return m.RequestID
	case *wire.SubscribeTracks:
		return m.RequestID
	case *wire.RequestUpdate:
		return m.RequestID
	}
	return 0
}

// requestParams returns the parameters of a request message.
func requestParams(m wire.Message) *wire.Params {
	switch m := m.(type) {
	case *wire.Subscribe:
		return &m.Parameters
	case *wire.Publish:
		return &m.Parameters
	case *wire.Fetch:
		return &m.Parameters
	case *wire.TrackStatus:
		return &m.Parameters
	case *wire.PublishNamespace:
		return &m.Parameters
	case *wire.SubscribeNamespace:
		return &m.Parameters
	case *wire.SubscribeTracks:
		return &m.Parameters
	}
	return nil
}

// requestTrack returns the track a track-scoped request names.
func requestTrack(m wire.Message) (wire.FullTrackName, bool) {
	switch m := m.(type) {
	case *wire.Subscribe:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	case *wire.Publish:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	case *wire.Fetch:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	case *wire.TrackStatus:
		return wire.FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
	}
	return wire.FullTrackName{}, false
}

// sessionNamespace is the reserved first namespace field ".session" (§6.5).
var sessionNamespace = []byte(".session")

func isSessionNamespace(ns wire.Namespace) bool {
	return len(ns) > 0 && bytes.Equal(ns[0], sessionNamespace)
}

// detach returns a copy of m that owns its memory. Messages read from a
// stream alias the reader's buffer until the next read; anything kept longer
// is detached by encoding and decoding it again. The codec's fuzz targets
// check that every decoded message survives this round trip; an error here
// is an internal one.
func detach[M wire.Message](v wire.Version, m M) (M, error) {
	var zero M
	b, err := m.AppendBody(v, nil)
	if err != nil {
		return zero, &SessionError{Code: wire.InternalError, Reason: "re-encoding " + m.Type().String() + ": " + err.Error()}
	}
	out, err := wire.ParseMessage(v, m.Type(), b)
	var rej *wire.RejectError
	if err != nil && !errors.As(err, &rej) {
		return zero, &SessionError{Code: wire.InternalError, Reason: "re-decoding " + m.Type().String() + ": " + err.Error()}
	}
	return out.(M), nil
}
