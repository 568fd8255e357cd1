package relay

import (
	"context"
	"errors"
	"log/slog"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/goroutines"
	"github.com/moqt-go/moqt/wire"
)

// env is what every part of the relay shares: its configuration, records
// and lifetime. Each part embeds a copy; none holds the Relay.
type env struct {
	cfg Config // defaults applied by New; read only
	log *slog.Logger
	met Metrics
	ctx context.Context   // ends with Relay.Close
	gs  *goroutines.Group // the goroutines Relay.Close waits for
}

// goRun runs f on a goroutine Relay.Close waits for.
func (v *env) goRun(f func()) { v.gs.Go(f) }

// reqDone reports a request's outcome to Metrics.
func (v *env) reqDone(kind, outcome string) {
	v.met.Request(kind, outcome)
}

// refuse rejects r and counts it.
func (v *env) refuse(r moqt.Request, code wire.RequestErrorCode, reason, outcome string) {
	re := &moqt.RequestError{Code: code, Reason: reason}
	if code == wire.ReqExcessiveLoad {
		re.RetryInterval = moqt.LoadRetryInterval() // §12.3
	}
	rejectWith(r, re)
	v.reqDone(requestKind(r), outcome)
	v.log.Debug("relay: request", "event", "refused", "kind", requestKind(r), "code", code.String(), "reason", reason)
}

// rejectWith answers r with re. An upstream's refusal passed on to a
// session of another draft may carry a code that draft lacks, which the
// session does not send (wire.ErrNotInDraft): DUPLICATE_SUBSCRIPTION (18
// only), INVALID_JOINING_REQUEST_ID (18 and 19), CONFLICTING_FILTERS and
// INVALID_FILTER (19 on). It goes as INTERNAL_ERROR, as which the
// requester's draft reads a code it does not define (§13; 18 and 19 the
// same), the code named in the reason.
func rejectWith(r moqt.Request, re *moqt.RequestError) {
	if err := r.RejectWith(re); errors.Is(err, wire.ErrNotInDraft) {
		_ = r.RejectWith(&moqt.RequestError{Code: wire.ReqInternalError, Reason: re.Code.String() + ": " + re.Reason})
	}
}

// authorize runs Config.Authorize on req or, update set, on one of its
// REQUEST_UPDATEs; nil refuses.
func (v *env) authorize(req moqt.Request, update *wire.Params) error {
	if v.cfg.Authorize == nil {
		return errors.New("relay: no authorizer configured")
	}
	return v.cfg.Authorize(req, update)
}

// authorizeUpdate decides a REQUEST_UPDATE of req by Config.Authorize: a
// refusal is a REQUEST_ERROR UNAUTHORIZED, or the *moqt.RequestError the
// authorizer returned.
func (v *env) authorizeUpdate(req moqt.Request, update *wire.Params) error {
	err := v.authorize(req, update)
	if err == nil {
		return nil
	}
	v.log.Debug("relay: request", "event", "update_unauthorized", "kind", requestKind(req), "err", err)
	return refusal(err)
}

// refusal is the REQUEST_ERROR that reports err, a refusal by
// Config.Authorize: a *moqt.RequestError in err's chain as it is, with its
// own Code and Reason (its Error text, which names the code, would say it
// twice), any other error as UNAUTHORIZED with its text.
func refusal(err error) *moqt.RequestError {
	var re *moqt.RequestError
	if errors.As(err, &re) {
		return re
	}
	return &moqt.RequestError{Code: wire.ReqUnauthorized, Reason: err.Error()}
}
