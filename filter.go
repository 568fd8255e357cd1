package moqt

import (
	"errors"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// The filters that decide which objects a subscription or fetch delivers
// (§3.3) live in internal/filter. This file turns their verdicts into the
// errors requests are answered with.

// checkRanges enforces MAX_FILTER_RANGES on the Range filters of p
// (§9.1.6, C026; see filter.CheckRanges). The error is a *RequestError
// with INVALID_FILTER.
func checkRanges(p *wire.Params, limit uint64) error {
	return filterError(filter.CheckRanges(p, limit))
}

// filterError turns a *filter.Error into the *RequestError that answers
// the request, with the same code and reason. Other errors, and nil, are
// returned as they are.
func filterError(err error) error {
	var fe *filter.Error
	if errors.As(err, &fe) {
		return &RequestError{Code: fe.Code, Reason: fe.Reason}
	}
	return err
}
