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
