package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// upForward announces one namespace upstream (PUBLISH_NAMESPACE) while a
// session other than the upstream itself announces it here.
type upForward struct {
	e    *nsEntry
	ctx  context.Context
	stop context.CancelFunc
	wake chan struct{} // cap 1: the entry's announcers changed

	ups     upstreamSessions
	log     *slog.Logger
	timeout time.Duration // Config.UpstreamTimeout
	// others reports whether a session other than u announces the
	// namespace here: an announcement is never sent back to the session
	// it came from.
	others func(u *moqt.Session) bool
}

// wait waits d, or for the entry's announcers to change when d is 0; false
// once f is stopped.
func (f *upForward) wait(d time.Duration) bool {
	var t <-chan time.Time
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		t = timer.C
	}
	select {
	case <-f.ctx.Done():
		return false
	case <-f.wake:
		return true
	case <-t:
		return true
	}
}

// run keeps f's namespace announced upstream until f is stopped,
// announcing it again on a new upstream session when the last one ended.
// A refusal, or a revocation by the upstream (§4.2), is not retried until
// the namespace's announcers change.
func (f *upForward) run() {
	ns := f.e.ns
	for f.ctx.Err() == nil {
		ups, err := f.ups.upstreamSession(f.ctx, ns)
		if err != nil {
			f.log.Warn("relay: upstream", "event", "unavailable", "namespace", ns.String(), "err", err)
			if !f.wait(redialBackoff) {
				return
			}
			continue
		}
		if len(ups) == 0 || !f.others(ups[0]) {
			if !f.wait(0) {
				return
			}
			continue
		}
		u := ups[0]
		ann, err := u.PublishNamespace(f.ctx, ns, wire.Params{})
		if err != nil {
			var re *moqt.RequestError
			refused := errors.As(err, &re)
			if f.ctx.Err() == nil {
				f.log.Warn("relay: upstream publish_namespace", "event", "failed", "namespace", ns.String(), "err", err)
			}
			if refused && !f.wait(0) || !refused && !f.wait(redialBackoff) {
				return
			}
			continue
		}
		f.log.Debug("relay: upstream publish_namespace", "event", "ok", "namespace", ns.String())
		if !f.hold(u, ann) {
			return
		}
	}
}

// hold keeps ann while f lasts and a local announcer other than u
// remains, renewing a granted EXPIRES (§9.20.17) halfway. It reports false
// once f is stopped.
func (f *upForward) hold(u *moqt.Session, ann *moqt.Announcement) bool {
	defer ann.Close()
	renew := time.NewTimer(time.Hour)
	defer renew.Stop()
	arm := func() {
		renew.Stop()
		if x, ok := ann.Params.Expires.Get(); ok && x > 0 {
			renew.Reset(time.Duration(x) * time.Millisecond / 2)
		}
	}
	arm()
	for {
		select {
		case <-f.ctx.Done():
			return false
		case <-ann.Done():
			if u.Context().Err() != nil {
				return f.wait(redialBackoff) // the session ended: announce on the next one
			}
			f.log.Warn("relay: upstream publish_namespace", "event", "revoked", "namespace", f.e.ns.String(), "err", ann.Err())
			return f.wait(0)
		case <-f.wake:
			if !f.others(u) {
				return true
			}
		case <-renew.C:
			ctx, cancel := context.WithTimeout(f.ctx, f.timeout)
			err := ann.Update(ctx, wire.Params{})
			cancel()
			if err != nil {
				f.log.Warn("relay: upstream publish_namespace", "event", "not_renewed", "namespace", f.e.ns.String(), "err", err)
			}
			arm()
		}
	}
}
