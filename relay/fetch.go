package relay

import (
	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// This file is a placeholder until FETCH is routed (helper "fetch" takes it
// over): FETCH is refused as not supported.

// fetchState is what the FETCH routing keeps.
type fetchState struct{}

// serveFetch answers a FETCH.
func (rl *Relay) serveFetch(r *moqt.FetchRequest) {
	_ = r.Reject(wire.ReqNotSupported, "FETCH not supported by this relay")
	rl.reqDone(KindFetch, OutcomeRefused)
}

// closeFetches ends the fetches being served.
func (rl *Relay) closeFetches() {}

// fetchesEmpty reports that no fetch state is left.
func (rl *Relay) fetchesEmpty() bool { return true }
