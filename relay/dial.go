package relay

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// redialBackoff is how long a Dialer waits after a failed dial before it
// dials again, so that a dead upstream is not hammered by every request.
const redialBackoff = time.Second

// retireTimeout bounds how long a Dialer keeps a session the upstream sent
// GOAWAY on once it dialed the next one: its subscriptions end by
// themselves meanwhile, as the upstream drains it, or are closed then.
const retireTimeout = 10 * time.Second

// maxRetired bounds the sessions a Dialer keeps after GOAWAY: an upstream
// that sends GOAWAY on every session at once would otherwise have it dial
// without end. Past it, the session going away serves on.
const maxRetired = 4

// Dialer is the Upstream of a relay chained to another: one session to it,
// dialed when first needed, again after it ends, and when the upstream
// sends GOAWAY (§6.6.1: to its New Session URI, or the same one), for every
// namespace.
type Dialer struct {
	url string
	cfg *moqt.Config

	mu      sync.Mutex
	sess    *moqt.Session
	at      string                     // the URL sess was dialed at
	next    string                     // where the next dial goes after GOAWAY; "" for url
	retired map[*moqt.Session]struct{} // sessions left after GOAWAY, not ended yet
	dialing chan struct{}              // closed when the dial in progress ends
	failed  time.Time                  // when the last dial failed
	lastErr error
	closed  bool
}

// DialUpstream returns an Upstream that keeps one session to url, a
// "moqt://" (raw QUIC) or "https://" (WebTransport) URL as moqt.Dial takes,
// dialed with cfg. cfg.Handler serves the requests the upstream sends this
// way, such as the PUBLISHes a SUBSCRIBE_TRACKS brings: usually the Relay
// itself, set once it exists. Close ends the session.
func DialUpstream(url string, cfg *moqt.Config) *Dialer {
	return &Dialer{url: url, cfg: cfg}
}

// ErrDialerClosed is returned by a closed Dialer.
var ErrDialerClosed = errors.New("relay: upstream dialer closed")

// Session returns the session to the upstream, dialing it if there is none,
// the last one ended, or the upstream sent GOAWAY on it: then at the GOAWAY's
// New Session URI, or the URL it was dialed at when the URI is empty (after
// a failed dial, at the Dialer's URL again), and the old session is retired
// (retireTimeout). A dial that failed less than a second ago is not
// retried: its error is returned.
func (d *Dialer) Session(ctx context.Context, _ wire.Namespace) (*moqt.Session, error) {
	for {
		d.mu.Lock()
		switch {
		case d.closed:
			d.mu.Unlock()
			return nil, ErrDialerClosed
		case d.sess != nil && d.sess.Context().Err() == nil && (!goingAway(d.sess) || len(d.retired) >= maxRetired):
			s := d.sess
			d.mu.Unlock()
			return s, nil
		case d.dialing != nil:
			ch := d.dialing
			d.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case !d.failed.IsZero() && time.Since(d.failed) < redialBackoff:
			err := d.lastErr
			d.mu.Unlock()
			return nil, err
		}
		// After GOAWAY, at its URI, even when the old session is over
		// already (an idle one closes at once, closeWhenIdle).
		if old := d.sess; old != nil && goingAway(old) {
			d.next = cmp.Or(old.GoawayURI(), d.at)
			if old.Context().Err() == nil {
				d.retireLocked(old)
			}
		}
		d.sess = nil
		url := cmp.Or(d.next, d.url)
		ch := make(chan struct{})
		d.dialing = ch
		d.mu.Unlock()

		s, err := moqt.Dial(ctx, url, d.cfg)

		d.mu.Lock()
		d.dialing = nil
		close(ch)
		if err != nil {
			if ctx.Err() == nil { // a dial the caller gave up is no failure of the upstream
				d.failed, d.lastErr, d.next = time.Now(), err, ""
			}
			d.mu.Unlock()
			return nil, err
		}
		d.failed, d.lastErr, d.next = time.Time{}, nil, ""
		if d.closed {
			d.mu.Unlock()
			_ = s.Close()
			return nil, ErrDialerClosed
		}
		d.sess, d.at = s, url
		d.mu.Unlock()
		return s, nil
	}
}

// goingAway reports whether the peer sent GOAWAY on s.
func goingAway(s *moqt.Session) bool {
	select {
	case <-s.GoingAway():
		return true
	default:
		return false
	}
}

// retireLocked drains old, which the upstream sent GOAWAY on, within
// retireTimeout: it closes once its requests have ended, or then. Close
// closes it sooner.
func (d *Dialer) retireLocked(old *moqt.Session) {
	if d.retired == nil {
		d.retired = map[*moqt.Session]struct{}{}
	}
	d.retired[old] = struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), retireTimeout)
	go func() {
		defer cancel()
		_ = old.Shutdown(ctx, "") // a client's GOAWAY has no URI (§9.2)
		d.mu.Lock()
		delete(d.retired, old)
		d.mu.Unlock()
	}()
}

// Close closes the session to the upstream, if any, and makes later calls
// of Session fail. It returns that session's Close error: one wrapping
// moqt.ErrCloseTimeout when the upstream did not confirm, in time, what
// was sent to it.
func (d *Dialer) Close() error {
	d.mu.Lock()
	d.closed = true
	s := d.sess
	d.sess = nil
	retired := make([]*moqt.Session, 0, len(d.retired))
	for r := range d.retired {
		retired = append(retired, r)
	}
	d.mu.Unlock()
	for _, r := range retired {
		_ = r.Close()
	}
	if s != nil {
		return s.Close()
	}
	return nil
}
