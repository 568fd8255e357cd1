package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// upDisc is one SUBSCRIBE_NAMESPACE, or with tracks SUBSCRIBE_TRACKS,
// upstream, shared by the downstream ones of its type whose prefix it
// covers. The relay's prefixes of each type are pairwise disjoint, so that
// the upstream never answers PREFIX_OVERLAP (§4.3.1): a downstream prefix
// that covers some of them replaces them.
type upDisc struct {
	tracks bool
	prefix wire.Namespace
	users  int
	ctx    context.Context
	cancel context.CancelFunc
	seen   map[wire.NamespaceKey]*nsEntry // guarded by router.mu

	ups upstreamSessions
	log *slog.Logger
	// apply applies one report of the upstream u, under router.mu
	// (router.applyDisc); false once d has ended.
	apply func(u *moqt.Session, ev moqt.NamespaceEvent) bool
}

// overlapRetries bounds the attempts of an upstream SUBSCRIBE_NAMESPACE
// refused with PREFIX_OVERLAP while the one it replaces is being
// cancelled: the cancellation and the new request travel on different
// streams.
const overlapRetries = 8

// run keeps d's request upstream until d ends, asking again on a new
// upstream session when the last one ended.
func (d *upDisc) run() {
	overlaps := 0
	for d.ctx.Err() == nil {
		ups, err := d.ups.upstreamSession(d.ctx, d.prefix)
		if err == nil && len(ups) == 0 {
			return // no upstream for the prefix
		}
		if err != nil {
			d.log.Warn("relay: upstream", "event", "unavailable", "prefix", d.prefix.String(), "err", err)
			if !sleepCtx(d.ctx, redialBackoff) {
				return
			}
			continue
		}
		u := ups[0]
		subscribe := u.SubscribeNamespace
		if d.tracks {
			subscribe = u.SubscribeTracks
		}
		sub, err := subscribe(d.ctx, d.prefix, wire.Params{})
		if err != nil {
			var re *moqt.RequestError
			if errors.As(err, &re) && re.Code == wire.ReqPrefixOverlap && overlaps < overlapRetries {
				overlaps++
				if !sleepCtx(d.ctx, time.Duration(overlaps)*20*time.Millisecond) {
					return
				}
				continue
			}
			if d.ctx.Err() == nil {
				d.log.Warn("relay: upstream subscribe_namespace", "event", "failed", "prefix", d.prefix.String(), "err", err)
			}
			if errors.As(err, &re) || !sleepCtx(d.ctx, redialBackoff) {
				return
			}
			continue
		}
		overlaps = 0
		d.log.Debug("relay: upstream subscribe_namespace", "event", "ok", "prefix", d.prefix.String())
		d.read(u, sub)
		_ = sub.Close()
		if !sleepCtx(d.ctx, redialBackoff) {
			return
		}
	}
}

// read applies the upstream's reports until its stream ends (whose
// end reports every namespace Done, §9.15) or d does.
func (d *upDisc) read(u *moqt.Session, sub *moqt.NamespaceSubscription) {
	for {
		ev, err := sub.Next(d.ctx)
		if err != nil || !d.apply(u, ev) {
			return
		}
	}
}

// sleepCtx waits d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
