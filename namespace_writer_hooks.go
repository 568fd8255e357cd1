package moqt

import (
	"slices"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// writerHooks is what a NamespaceWriter keeps of the requester's
// REQUEST_UPDATEs for the application beyond the prefix: the Range
// filters in effect, which select the tracks of a SUBSCRIBE_TRACKS
// (§4.3), and the signal of a change. Guarded by the writer's srv.mu.
type writerHooks struct {
	filters []wire.RangeFilter // the request's, as updates left them
	match   filter.RangeMatcher
	// changed is closed when an accepted update changes the prefix or
	// the filters; nil until Changed asks for it.
	changed chan struct{}
}

// setFilters makes fs, copied, the filters in effect.
func (h *writerHooks) setFilters(fs []wire.RangeFilter) {
	h.filters = make([]wire.RangeFilter, 0, len(fs))
	for _, f := range fs {
		if !f.Clear {
			f.Ranges = slices.Clone(f.Ranges)
			h.filters = append(h.filters, f)
		}
	}
	h.match = filter.CompileRanges(h.filters)
}

// signal closes the channel Changed returned; the next call makes a
// fresh one.
func (h *writerHooks) signal() {
	if h.changed != nil {
		close(h.changed)
		h.changed = nil
	}
}

// Changed returns a channel closed when the requester's next accepted
// REQUEST_UPDATE changes Prefix or the filters Wants applies; call it
// again for the change after that, before reading the state again, so
// that no change falls between. A SUBSCRIBE_TRACKS responder that
// waits on it offers, after a change, the tracks that now fall under the
// prefix and pass the filters; the PUBLISHes made already go on (§9.5.2).
// It is not closed when the request ends: see the request's Context.
func (w *NamespaceWriter) Changed() <-chan struct{} {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	if w.hooks.changed == nil {
		w.hooks.changed = make(chan struct{})
	}
	return w.hooks.changed
}

// Wants reports whether a track with Track Properties props passes the
// request's TRACK_PROPERTY_FILTERs in effect (§3.3.2, §9.20.15): those of
// the SUBSCRIBE_TRACKS as its REQUEST_UPDATEs replaced or removed them. A
// SUBSCRIBE_TRACKS responder sends PUBLISH only for a track that passes
// (§4.3). With no such filter every track passes; a SUBSCRIBE_NAMESPACE
// has none.
func (w *NamespaceWriter) Wants(props wire.KVList) bool {
	w.srv.mu.Lock()
	defer w.srv.mu.Unlock()
	return w.hooks.match.MatchTrack(props)
}

// update applies an accepted REQUEST_UPDATE, under srv.mu: its Range
// filters, within this end's MAX_FILTER_RANGES (§3.3.2), its prefix
// (updatePrefix), and its other parameters to Params (§9.5: what it omits
// stays). Nothing applies if either is refused.
func (w *NamespaceWriter) update(u *wire.RequestUpdate) ([]wire.Message, *RequestError) {
	fs := u.Parameters.RangeFilters
	merged := w.hooks.filters
	if len(fs) > 0 {
		p := wire.Params{RangeFilters: slices.Clone(w.hooks.filters)}
		mergeParams(&p, &wire.Params{RangeFilters: fs})
		if err := checkRanges(&p, w.srv.sess.cfg.MaxFilterRanges); err != nil {
			return nil, asRequestError(err)
		}
		merged = p.RangeFilters
	}
	old := w.prefix
	out, refusal := w.updatePrefix(u)
	if refusal != nil {
		return nil, refusal
	}
	if len(fs) > 0 {
		w.hooks.setFilters(merged)
	}
	up := ownParams(u.Parameters)
	mergeParams(&w.params, &up)
	if len(fs) > 0 || !w.prefix.Equal(old) {
		w.hooks.signal()
	}
	return out, nil
}
