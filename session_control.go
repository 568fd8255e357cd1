package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/moqt-go/moqt/wire"
)

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
		ctl.stop()
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
	close(s.setupDone)
	s.log.Debug("peer SETUP", "implementation", st.MoqtImplementation.Value)
	return nil
}
