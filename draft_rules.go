package moqt

import (
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

// draftRules are the session behaviours that differ between the drafts a
// session may speak (docs/drafts.md §6), read once from the codec's
// profile of the negotiated version: the session consults these switches,
// never the version number.
type draftRules struct {
	prof *wire.Profile
	// onePerTrack: an endpoint has at most one subscription to a track per
	// role, and a second is refused with DUPLICATE_SUBSCRIPTION (18 §5.1).
	onePerTrack bool
	// endAtFilterEnd: a publisher may end a subscription whose filter end
	// has been passed with PUBLISH_DONE SUBSCRIPTION_ENDED (18/19 §10.11);
	// 20 removed the code and the behaviour (#1833).
	endAtFilterEnd bool
	// publishOKParams: PUBLISH_OK carries the subscriber's parameters of a
	// PUBLISH-initiated subscription, those omitted taking their defaults
	// (18/19 §10.2.x); from 20 they travel in REQUEST_UPDATE (#1790).
	publishOKParams bool
	// updateLimit: MAX_REQUEST_UPDATES and TOO_MANY_REQUEST_UPDATES exist
	// (19 §10.3.1.7); on 18 no limit is advertised or enforced.
	updateLimit bool
	// filterRanges: range filters and MAX_FILTER_RANGES exist (19 §5.1.3).
	filterRanges bool
	// notify: PUBLISH_STATE_NOTIFY exists (21 §9.10).
	notify bool
	// goawayRequestID: a control-stream GOAWAY carries the Request ID
	// below which the sender processed the peer's requests (18 §10.4).
	goawayRequestID bool
}

// rulesOf returns the rules of version v, which the codec speaks.
func rulesOf(v wire.Version) draftRules {
	p := v.Profile()
	if p == nil {
		p = wire.Draft21.Profile()
	}
	fwd, _ := p.ParamContexts(wire.ParamForward)
	return draftRules{
		prof:            p,
		onePerTrack:     p.HasRequestError(wire.ReqDuplicateSubscription),
		endAtFilterEnd:  p.HasPublishDoneCode(wire.DoneSubscriptionEnded),
		publishOKParams: fwd&wire.InPublishOK != 0,
		updateLimit:     p.HasSetupOption(wire.SetupMaxRequestUpdates),
		filterRanges:    p.RangeFilters,
		notify:          p.HasMessage(wire.MsgPublishStateNotify),
		goawayRequestID: p.GoawayRequestID,
	}
}

// notIn is the error refusing what the session's draft cannot express,
// before anything is sent. It wraps wire.ErrNotInDraft.
func (r draftRules) notIn(what string) error {
	return &wire.NotInDraftError{What: what, Version: r.prof.Version}
}

// Codes that another draft defines and this one lacks are never sent: the
// library's own choice is replaced by the nearest code the draft has, and
// an application's is refused before anything is sent (docs/design-notes.md,
// "Drafts 18 to 21").

// anyDraft reports whether some draft the codec speaks defines code c: a
// code no draft defines is the application's own, sent as it is and read
// as INTERNAL_ERROR (§12).
func anyDraft[C any](has func(*wire.Profile, C) bool, c C) bool {
	for _, v := range wire.Versions {
		if has(v.Profile(), c) {
			return true
		}
	}
	return false
}

// requestCode returns c, or the nearest REQUEST_ERROR code the draft has.
func (r draftRules) requestCode(c wire.RequestErrorCode) wire.RequestErrorCode {
	if r.prof.HasRequestError(c) || !anyDraft((*wire.Profile).HasRequestError, c) {
		return c
	}
	switch c {
	case wire.ReqConflictingFilters, wire.ReqInvalidFilter:
		return wire.ReqInvalidRange // 18: the filter is what cannot be satisfied
	case wire.ReqInvalidJoiningRequestID:
		return wire.ReqDoesNotExist // 21: the subscription named does not exist
	}
	return wire.ReqInternalError
}

// sessionCode returns c, or the nearest session close code the draft has.
func (r draftRules) sessionCode(c wire.SessionErrorCode) wire.SessionErrorCode {
	if r.prof.HasSessionError(c) || !anyDraft((*wire.Profile).HasSessionError, c) {
		return c
	}
	return wire.ProtocolViolation // TOO_MANY_REQUEST_UPDATES (18), VERSION_NEGOTIATION_FAILED (20+)
}

// doneCode returns c, or the nearest PUBLISH_DONE code the draft has.
func (r draftRules) doneCode(c wire.PublishDoneCode) wire.PublishDoneCode {
	if r.prof.HasPublishDoneCode(c) || !anyDraft((*wire.Profile).HasPublishDoneCode, c) {
		return c
	}
	return wire.DoneInternalError // SUBSCRIPTION_ENDED (20+)
}

// checkRequestCode refuses an application's REQUEST_ERROR code that only
// another draft defines.
func (r draftRules) checkRequestCode(c wire.RequestErrorCode) error {
	if r.requestCode(c) != c {
		return r.notIn(fmt.Sprintf("REQUEST_ERROR code %s", c))
	}
	return nil
}

// checkDoneCode refuses an application's PUBLISH_DONE code that only
// another draft defines.
func (r draftRules) checkDoneCode(c wire.PublishDoneCode) error {
	if r.doneCode(c) != c {
		return r.notIn(fmt.Sprintf("PUBLISH_DONE code %s", c))
	}
	return nil
}

// fitMessage returns m with a code the draft lacks replaced by its
// nearest (requestCode, doneCode): the safety net under every message a
// request stream writes.
func (r draftRules) fitMessage(m wire.Message) wire.Message {
	switch m := m.(type) {
	case *wire.RequestError:
		if c := r.requestCode(m.ErrorCode); c != m.ErrorCode {
			out := *m
			out.ErrorCode = c
			return &out
		}
	case *wire.PublishDone:
		if c := r.doneCode(m.StatusCode); c != m.StatusCode {
			out := *m
			out.StatusCode = c
			return &out
		}
		if m.StreamCount == unknownStreamCount {
			out := *m
			out.StreamCount = r.prof.UnknownStreamCount
			return &out
		}
	}
	return m
}

// unknownStreamCount is how the session says, in PUBLISH_DONE, that it
// does not know its exact stream count; fitMessage writes it as the
// draft's value (2^62−1 in 18/19 §10.11, 2^64−1 in 21 §9.9).
const unknownStreamCount = ^uint64(0)

// checkOwnParams refuses, before anything is sent, parameters the
// application gives for a message of context where: one that no draft
// allows there fails as Params.Check does; one that another draft allows
// but this one does not, or a value this draft cannot encode (a relative
// LOCATION_FILTER on 18/19, range filters on 18), fails with a
// *wire.NotInDraftError.
func (r draftRules) checkOwnParams(p *wire.Params, where wire.ParamContext) error {
	v := r.prof.Version
	if err := p.CheckFor(v, where); err != nil {
		for _, other := range wire.Versions {
			if p.CheckFor(other, where) == nil {
				if _, aerr := p.AppendFor(v, where, nil); aerr != nil {
					return aerr
				}
				return r.notIn("a parameter of this message")
			}
		}
		return err
	}
	_, err := p.AppendFor(v, where, nil)
	return err
}

// checkPeerParams applies the draft's table of where parameters may
// appear to parameters the peer sent (§9.20.1): PROTOCOL_VIOLATION.
func (r draftRules) checkPeerParams(p *wire.Params, where wire.ParamContext) error {
	return p.CheckFor(r.prof.Version, where)
}

// checkRequestOK applies to a peer's REQUEST_OK answering in context where
// the draft's parameter table and the rule that only TRACK_STATUS_OK
// carries Track Properties (§9.3; 18/19 §10.5).
func (r draftRules) checkRequestOK(m *wire.RequestOK, where wire.ParamContext) error {
	if err := r.checkPeerParams(&m.Parameters, where); err != nil {
		return err
	}
	if len(m.TrackProperties) > 0 && where != wire.InTrackStatusOK {
		return protocolViolation("REQUEST_OK carries Track Properties outside TRACK_STATUS_OK")
	}
	return nil
}

// maxRequestUpdates is the MAX_REQUEST_UPDATES this end advertises and
// enforces: Config.MaxRequestUpdates, or 0, no limit, on a draft without
// the option (18), where TOO_MANY_REQUEST_UPDATES does not exist either.
func (s *Session) maxRequestUpdates() uint64 {
	if !s.rules.updateLimit {
		return 0
	}
	return s.cfg.MaxRequestUpdates
}
