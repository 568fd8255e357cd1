package moqt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

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

// Close closes the session with NO_ERROR once what was sent before it
// has reached the peer, within Config.CloseTimeout, as a program that
// ends a track and exits expects (a QUIC close discards stream data still
// in flight). It refuses the peer's new requests with GOING_AWAY, ends
// each subscription this end serves with PUBLISH_DONE GOING_AWAY (the
// streams its writers finished are delivered first, the others reset),
// and waits until the peer has finished every request stream this end
// finished, PUBLISH_DONEs and answers included: a peer using this library
// finishes a subscription's stream only once it has read every data
// stream PUBLISH_DONE counted. Then it closes as CloseWithError does.
//
// Close returns nil when the peer confirmed everything, and an error when
// it could not tell that what was sent arrived, so that a program can
// exit with a failure rather than lose data without a word: one wrapping
// ErrCloseTimeout when Config.CloseTimeout passed first (the session is
// closed all the same, and what was in flight is lost), or one wrapping
// the session's cause (a *SessionError) when the session ended during
// the wait other than by a NO_ERROR close (the peer's connection lost,
// say). Close returns nil without waiting when the session had already
// ended (the first close wins: Context's cause says how it ended), and
// when Config.CloseTimeout is negative.
func (s *Session) Close() error {
	err := s.linger()
	_ = s.CloseWithError(wire.NoError, "")
	return err
}

// linger is Close's wait for what was sent to be delivered. It reports
// what was not confirmed, as Close documents.
func (s *Session) linger() error {
	if s.cfg.CloseTimeout < 0 || s.ctx.Err() != nil {
		return nil
	}
	s.closing.Store(true)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.CloseTimeout)
	defer cancel()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		var wg sync.WaitGroup
		for _, rs := range s.requests.snapshot() {
			if end := rs.onClose.Load(); end != nil {
				wg.Go(*end)
			}
		}
		wg.Wait()
	}()
	select {
	case <-ended:
		if s.requests.waitFinished(ctx) == nil {
			return nil
		}
	case <-ctx.Done():
	}
	if cause := context.Cause(s.ctx); cause != nil {
		if se := sessionErrorFrom(cause); se.Code == wire.NoError {
			return nil // ended as an application chose, this one's or the peer's
		}
		return fmt.Errorf("moqt: the session ended before the peer confirmed what was sent: %w", cause)
	}
	n := s.requests.unconfirmed()
	if n == 0 {
		return nil // confirmed as the time ran out
	}
	return fmt.Errorf("%w: after %v, %d request(s) not confirmed by the peer; what was in flight on them is lost", ErrCloseTimeout, s.cfg.CloseTimeout, n)
}

// waitGoroutines waits, at most closeWait, for the session's goroutines.
func (s *Session) waitGoroutines() {
	done := make(chan struct{})
	go func() {
		s.goroutines.Wait()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("moqt: session", "event", "goroutines_stuck", "waited", closeWait)
	}
}

// fail closes the session with the error err maps to (§12.2). It is the
// one place where a session ends locally.
func (s *Session) fail(err error) {
	se := sessionErrorFrom(err)
	if c := s.rules.sessionCode(se.Code); c != se.Code {
		se = &SessionError{Code: c, Reason: se.Reason} // a code only another draft has
	}
	if context.Cause(s.ctx) != nil {
		return
	}
	if s.conn.Context().Err() != nil {
		// The connection ended first, closed by the peer or lost, and
		// watchTransport has not seen it yet: that end is the session's,
		// as this close can no longer reach the peer.
		s.cancel(s.transportCloseError())
		return
	}
	s.cancel(se)
	if context.Cause(s.ctx) != se {
		return // another close won the race
	}
	// The transport cuts the reason to the Reason Phrase limit.
	_ = s.conn.CloseWithError(uint64(se.Code), se.Reason)
}

// watchTransport ends the session when the connection goes away by itself.
func (s *Session) watchTransport() {
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
	s.logEnd()
	s.hook(func(h *sessionHooks) func() { return h.sessionEnded })
	s.abortRequests()
}

// logEnd logs how the session ended: at Info for NO_ERROR, else at Warn.
func (s *Session) logEnd() {
	se := sessionErrorFrom(context.Cause(s.ctx))
	by := "local"
	if se.Remote {
		by = "peer"
	}
	established := false
	select {
	case <-s.setupDone:
		established = true
	default:
	}
	level := slog.LevelInfo
	if se.Code != wire.NoError {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "moqt: session", "event", "end", "code", se.Code.String(),
		"reason", se.Reason, "by", by, "established", established)
}

// abortRequests unblocks every request stream once the session has ended.
// A closed QUIC connection does that by itself, but a WebTransport stream
// can block a Read until its session is torn down, which may lag.
func (s *Session) abortRequests() {
	for _, rs := range s.requests.snapshot() {
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
