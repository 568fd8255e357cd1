package relay

import (
	"context"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// serveTrackStatus answers TRACK_STATUS (§9.13) from the track when it has an
// Established upstream, else from the first of its publishers that answers.
func (rl *Relay) serveTrackStatus(r *moqt.TrackStatusRequest) {
	if e := rl.lookup(r.Track); e != nil {
		e.mu.Lock()
		track := e.track
		if e.dead {
			track = nil
		}
		e.mu.Unlock()
		if track != nil {
			if err := track.Status(r); err != nil {
				rl.reqDone(KindTrackStatus, OutcomeRefused)
				return
			}
			rl.reqDone(KindTrackStatus, OutcomeOK)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), rl.cfg.UpstreamTimeout)
	defer cancel()
	pubs, err := rl.publishersFor(ctx, r.Track)
	if err != nil || len(pubs) == 0 {
		rl.refuse(r, wire.ReqDoesNotExist, "no publisher", OutcomeNotFound)
		return
	}
	var last error
	for _, s := range pubs {
		ts, err := s.TrackStatus(ctx, r.Track, wire.Params{})
		if err == nil {
			if r.Accept(ts.Largest, ts.Properties) != nil {
				rl.reqDone(KindTrackStatus, OutcomeRefused)
				return
			}
			rl.reqDone(KindTrackStatus, OutcomeOK)
			return
		}
		last = err
	}
	re := requestErrorOf(last)
	rl.refuse(r, re.Code, re.Reason, OutcomeRefused)
}
