package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// handshake opens the control stream, sends SETUP, starts the session's
// goroutines and waits for the peer's SETUP (§6.3). On failure the session
// is closed.
func (s *Session) handshake(ctx context.Context, setup *wire.Setup) error {
	s.goroutines.Go(s.receiveDatagrams)
	s.goroutines.Go(s.watchTransport)
	s.goroutines.Go(s.acceptUniStreams)
	s.goroutines.Go(s.acceptRequestStreams)

	ctrl, err := s.conn.OpenUniStreamSync(ctx)
	if err != nil {
		s.fail(&SessionError{Code: wire.InternalError, Reason: "opening the control stream: " + err.Error()})
		return s.closeErr(err)
	}
	s.ctrl.str = ctrl
	context.AfterFunc(ctrl.Context(), s.controlStreamEnded)
	if err := s.writeControl(setup); err != nil {
		s.fail(err)
		return s.closeErr(err)
	}
	if g := s.goawayFirst; g != nil {
		if err := g.send(s); err != nil {
			s.fail(err)
			return s.closeErr(err)
		}
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
	err := s.ctrl.probe()
	var se *transport.StreamError
	if errors.As(err, &se) && se.Remote {
		s.fail(protocolViolation("peer stopped this endpoint's control stream"))
	}
}

// ownSetup builds the SETUP this endpoint sends.
func (s *Session) ownSetup() *wire.Setup {
	st := &wire.Setup{}
	if !s.cfg.DisableImplementation {
		st.MoqtImplementation = wire.Some(s.cfg.Implementation)
	}
	// Options the draft lacks are not sent (draftRules).
	if l := s.maxRequestUpdates(); l != 0 {
		st.MaxRequestUpdates = wire.Some(l)
	}
	if s.cfg.MaxFilterRanges != 0 && s.rules.filterRanges {
		st.MaxFilterRanges = wire.Some(s.cfg.MaxFilterRanges)
	}
	if s.cfg.MaxAuthTokenCacheSize != 0 {
		st.MaxAuthTokenCacheSize = wire.Some(s.cfg.MaxAuthTokenCacheSize)
	}
	st.AuthorizationTokens = s.cfg.AuthorizationTokens
	return st
}

// controlStream is this endpoint's control stream, written one whole
// message at a time, and the claim on the peer's: only the first stream of
// type SETUP is its control stream (§6.3).
type controlStream struct {
	// peerClaimed is set by the first unidirectional stream of type SETUP:
	// the peer's control stream. A second is a PROTOCOL_VIOLATION (§6.3).
	peerClaimed atomic.Bool

	mu  sync.Mutex           // serializes writes to str
	str transport.SendStream // set by handshake before any write
	buf []byte               // reused for each message; guarded by mu
}

// write sends m whole; streamErr maps the stream's write error.
func (c *controlStream) write(v wire.Version, m wire.Message, streamErr func(error) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := wire.AppendMessage(v, c.buf[:0], m)
	if err != nil {
		return err
	}
	c.buf = b
	if _, err := c.str.Write(b); err != nil {
		return streamErr(err)
	}
	return nil
}

// probe writes nothing: its error says why the stream can no longer be
// written.
func (c *controlStream) probe() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.str.Write(nil)
	return err
}

// writeControl sends one message on this endpoint's control stream.
func (s *Session) writeControl(m wire.Message) error {
	return s.ctrl.write(s.version, m, s.streamError)
}

// readControl reads the peer's control stream: SETUP first, then only
// GOAWAY (§6.3, §9). The stream must stay open for the whole session.
func (s *Session) readControl(mr *wire.MessageReader, ctl *controlReader) error {
	// Claimed before anything is read, so that two control streams racing
	// each other cannot both deliver a SETUP.
	if !s.ctrl.peerClaimed.CompareAndSwap(false, true) {
		return protocolViolation("second control stream")
	}
	m, err := s.readControlMessage(mr, wire.MsgSetup, "control stream starts with %s")
	if err != nil {
		return s.controlReadError(err)
	}
	if err := s.acceptSetup(m.(*wire.Setup)); err != nil {
		return err
	}
	ctl.timed = true // SETUP had SetupTimeout; every later message is timed
	for {
		m, err := s.readControlMessage(mr, wire.MsgGoaway, "%s on the control stream")
		ctl.stop()
		if err != nil {
			return s.controlReadError(err)
		}
		if err := s.receiveGoaway(m.(*wire.Goaway)); err != nil {
			return err
		}
	}
}

// readControlMessage reads one message of type want from the peer's control
// stream. Any other type is a PROTOCOL_VIOLATION, told by format with the
// type, as soon as the type is read: a peer that declares a long message of
// the wrong type and sends no more is closed at once, not when the message
// times out.
func (s *Session) readControlMessage(mr *wire.MessageReader, want wire.MessageType, format string) (wire.Message, error) {
	t, body, err := mr.ReadFrameOf(func(t wire.MessageType) error {
		if t != want {
			return &wire.ProtocolError{Code: wire.ProtocolViolation, Reason: fmt.Sprintf(format, t)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return wire.ParseMessage(s.version, t, body)
}

// controlReader reads the peer's control stream. Once timed, the first
// byte of a message starts its CONTROL_MESSAGE_TIMEOUT (§12.2): a GOAWAY
// left half sent would otherwise go unread for the rest of the session.
// Only the goroutine reading the stream uses it.
type controlReader struct {
	r     io.Reader
	s     *Session
	timed bool
	messageTimer
}

func (c *controlReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 && c.timed && !c.armed {
		c.start(c.s, "on the control stream")
	}
	return n, err
}

// messageTimer is the CONTROL_MESSAGE_TIMEOUT of the message being read
// from one stream (§12.2): a message that has begun must arrive whole
// without the peer's help being awaited, or a peer that leaves one half
// sent holds the stream's reader and buffer for nothing. Only the
// stream's reader uses it.
type messageTimer struct {
	armed bool // the message being read is timed
	timer *time.Timer
}

// start times the message being read: past the timeout, s closes with
// CONTROL_MESSAGE_TIMEOUT.
func (m *messageTimer) start(s *Session, where string) {
	m.armed = true
	d := s.cfg.ControlMessageTimeout
	if m.timer != nil {
		m.timer.Reset(d)
		return
	}
	m.timer = time.AfterFunc(d, func() {
		s.fail(&SessionError{Code: wire.ControlMessageTimeout,
			Reason: fmt.Sprintf("control message %s not complete after %v", where, d)})
	})
}

// stop ends the timing of the message just read, or of the one left
// unfinished when the stream is no longer read.
func (m *messageTimer) stop() {
	if m.armed {
		m.armed = false
		m.timer.Stop()
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
	// Logged before the handshake is released, so "start" precedes every
	// record the session's use can cause.
	s.log.Info("moqt: session", "event", "start", "path", s.path, "authority", s.authority,
		"peer_implementation", st.MoqtImplementation.Value)
	close(s.setupDone)
	return nil
}
