package moqt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/wire"
)

// goawayState is GOAWAY on the control stream, both ways (§9.2): the
// peer's, after which this end opens no request, and this endpoint's,
// after which it refuses the peer's new requests with GOING_AWAY. A
// Subscription keeps the publisher's on its request stream in one too
// (in and uri only).
type goawayState struct {
	in   chan struct{} // closed when the peer sent GOAWAY
	uri  string        // the peer's New Session URI; written once, before in is closed
	once sync.Once
	sent atomic.Bool // this endpoint sent, or is sending, GOAWAY
}

// receive records the peer's GOAWAY. It reports false for a second one.
func (a *goawayState) receive(uri string) bool {
	first := false
	a.once.Do(func() {
		first = true
		a.uri = uri
		close(a.in)
	})
	return first
}

// received reports whether the peer sent GOAWAY.
func (a *goawayState) received() bool {
	select {
	case <-a.in:
		return true
	default:
		return false
	}
}

// receiveGoaway handles GOAWAY on the control stream (§9.2).
func (s *Session) receiveGoaway(g *wire.Goaway) error {
	if err := s.checkGoaway(g, true); err != nil {
		return err
	}
	if !s.away.receive(g.NewSessionURI) {
		return protocolViolation("second GOAWAY on the control stream")
	}
	// On 18 the peer rejects this end's requests from g.RequestID on with
	// GOING_AWAY, on their own streams (18 §10.4); none is opened now.
	s.log.Info("moqt: session", "event", "goaway_received", "uri", s.away.uri, "timeout_ms", g.Timeout,
		"request_id", g.RequestID.Value)
	s.goroutines.Go(s.closeWhenIdle)
	return nil
}

// checkGoaway applies the rule that a client always sends an empty URI,
// and on 18 those of the Request ID (18 §10.4): present only on the
// control stream, and there of this end's parity (INVALID_REQUEST_ID),
// this end's Request IDs being the ones the peer reports on.
func (s *Session) checkGoaway(g *wire.Goaway, onControl bool) error {
	if !s.isClient && len(g.NewSessionURI) != 0 {
		return protocolViolation("client sent GOAWAY with a New Session URI")
	}
	if !s.rules.goawayRequestID {
		return nil // the codec reads none
	}
	switch {
	case onControl && !g.RequestID.Set:
		return protocolViolation("GOAWAY on the control stream without a Request ID")
	case !onControl && g.RequestID.Set:
		return protocolViolation("GOAWAY on a request stream with a Request ID")
	case onControl && g.RequestID.Value%2 != s.ids.ownParity():
		return &SessionError{Code: wire.InvalidRequestID,
			Reason: fmt.Sprintf("GOAWAY Request ID %d has the wrong parity", g.RequestID.Value)}
	}
	return nil
}

// GoingAway is closed when the peer sends GOAWAY on the control stream. New
// requests then fail with ErrGoingAway.
func (s *Session) GoingAway() <-chan struct{} { return s.away.in }

// GoawayURI is the New Session URI of the peer's GOAWAY, if any.
func (s *Session) GoawayURI() string {
	if s.away.received() {
		return s.away.uri
	}
	return ""
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
	if len(uri) > wire.MaxURILen {
		// Refused before the session counts as going away, which would
		// refuse the peer's requests with no GOAWAY sent.
		return fmt.Errorf("moqt: a GOAWAY's New Session URI is %d bytes, more than %d (§9.2)", len(uri), wire.MaxURILen)
	}
	if err := s.sendGoaway(uri, timeout); err != nil {
		return err
	}
	if err := s.requests.waitIdle(ctx); err != nil {
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

// sendGoaway sends GOAWAY on the control stream, unless it was sent
// already; from then on the peer's new requests are refused with
// GOING_AWAY.
func (s *Session) sendGoaway(uri string, timeout uint64) error {
	if s.away.sent.Swap(true) {
		return nil
	}
	g := &wire.Goaway{NewSessionURI: uri, Timeout: timeout}
	if s.rules.goawayRequestID {
		// Read after sent is set: a request whose refusal check came
		// before has had its ID recorded and is below this one; every
		// request refusal finds later, whatever its ID, is refused with
		// GOING_AWAY, as 18 §10.4 requires of both.
		g.RequestID = wire.Some(s.ids.nextPeer())
	}
	if err := s.writeControl(g); err != nil {
		return err
	}
	s.log.Info("moqt: session", "event", "goaway_sent", "uri", uri, "timeout_ms", timeout, "request_id", g.RequestID.Value)
	return nil
}

// goawayFirst is the GOAWAY a server's session sends right after its
// SETUP when it sets up while Server.Serve drains: the client learns where
// to go before any of its requests is answered, rather than once Serve
// reaches its session (Server.setup).
type goawayFirst struct {
	uri      string
	deadline time.Time // the drain's end
}

// send sends g on s, with what is left of the drain as its Timeout.
func (g *goawayFirst) send(s *Session) error {
	return s.sendGoaway(g.uri, uint64(max(time.Until(g.deadline).Milliseconds(), 1)))
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

// closeWhenIdle closes the session with NO_ERROR once no request is open,
// after the peer's GOAWAY: the close the spec recommends (§6.6.1), which
// the peer's drain waits for.
func (s *Session) closeWhenIdle() {
	if s.requests.waitIdle(s.ctx) == nil {
		s.log.Debug("moqt: session", "event", "goaway_drained")
		s.fail(&SessionError{Code: wire.NoError}) // not Close, which would wait for this goroutine
	}
}
