package relay

import (
	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Scaffolding of the first commit, replaced by the routing files.

type trackEntry struct{}

func (e *trackEntry) shutdown(wire.PublishDoneCode, string) {}

type sessionState struct{}

func (rl *Relay) watchSession(*moqt.Session) bool { return true }

func (rl *Relay) serveSubscribe(r *moqt.SubscribeRequest) {
	_ = r.Reject(wire.ReqNotSupported, "not yet")
}

func (rl *Relay) servePublish(r *moqt.PublishRequest) {
	_ = r.Reject(wire.ReqNotSupported, "not yet")
}

func (rl *Relay) serveTrackStatus(r *moqt.TrackStatusRequest) {
	_ = r.Reject(wire.ReqNotSupported, "not yet")
}
