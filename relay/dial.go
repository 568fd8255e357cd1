package relay

import (
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

// Dialer is the Upstream of a relay chained to another: one session to it,
// dialed when first needed and again after it ends, for every namespace.
type Dialer struct {
	url string
	cfg *moqt.Config

	mu      sync.Mutex
	sess    *moqt.Session
	dialing chan struct{} // closed when the dial in progress ends
	failed  time.Time     // when the last dial failed
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

// Session returns the session to the upstream, dialing it if there is none
// or the last one ended. A dial that failed less than a second ago is not
// retried: its error is returned.
func (d *Dialer) Session(ctx context.Context, _ wire.Namespace) (*moqt.Session, error) {
	for {
		d.mu.Lock()
		switch {
		case d.closed:
			d.mu.Unlock()
			return nil, ErrDialerClosed
		case d.sess != nil && d.sess.Context().Err() == nil:
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
		ch := make(chan struct{})
		d.dialing = ch
		d.mu.Unlock()

		s, err := moqt.Dial(ctx, d.url, d.cfg)

		d.mu.Lock()
		d.dialing = nil
		close(ch)
		if err != nil {
			if ctx.Err() == nil { // a dial the caller gave up is no failure of the upstream
				d.failed, d.lastErr = time.Now(), err
			}
			d.mu.Unlock()
			return nil, err
		}
		d.failed, d.lastErr = time.Time{}, nil
		if d.closed {
			d.mu.Unlock()
			_ = s.Close()
			return nil, ErrDialerClosed
		}
		d.sess = s
		d.mu.Unlock()
		return s, nil
	}
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
	d.mu.Unlock()
	if s != nil {
		return s.Close()
	}
	return nil
}
