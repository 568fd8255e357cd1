package moqt

import (
	"fmt"
	"strings"

	"github.com/moqt-go/moqt/internal/sendq"
	"github.com/moqt-go/moqt/wire"
)

// REQUEST_UPDATEs held (served_update.go, namespace_served.go).
//
// An update that comes before its request is answered, or while the
// application's OnUpdate decides an earlier one, is kept, detached from
// the read buffer, until it is answered. The count is bounded (16 per
// request, the read loop then waits), but one update may be 64 KiB, and
// more once decoded: a Range is 2 bytes on the wire and 24 in memory. So
// the bytes are bounded too, per request (maxHeldUpdateBytes) and per
// session, where they count against Config.MaxSessionBacklog and the
// shared BacklogBudget with what is queued for the peer: both are what the
// peer makes this end hold. An update past either bound is refused with
// REQUEST_ERROR EXCESSIVE_LOAD, in its turn, which ends the request as
// any refused update does (§9.5.1): PUBLISH_DONE UPDATE_FAILED for a
// subscription, the stream closed for a namespace request.

// maxHeldUpdateBytes bounds the bytes of the REQUEST_UPDATEs one request
// holds unanswered; one update alone is always held, so that any update
// the wire allows can be decided.
const maxHeldUpdateBytes = 64 << 10

// heldUpdateCost estimates the memory a detached REQUEST_UPDATE holds: its
// encoded body (which its byte fields alias), what decoding makes of its
// parameters, and a fixed overhead for the message and its queue slot.
func heldUpdateCost(body int, p *wire.Params) int {
	const overhead = 512
	return overhead + body + paramsCost(p)
}

// paramsCost is the decoded size of p's variable parts beyond its struct.
func paramsCost(p *wire.Params) int {
	n := 48 * len(p.AuthorizationTokens)
	for _, f := range p.RangeFilters {
		n += 48 + 48*len(f.Ranges) // a Range is 24 bytes; append may double
	}
	if p.TrackNamespacePrefix.Set {
		n += 24 * len(p.TrackNamespacePrefix.Value)
	}
	if p.FillParameters != nil {
		n += 280 + paramsCost(p.FillParameters)
	}
	return n
}

// updateHold counts the bytes of one request's held REQUEST_UPDATEs,
// charged to its session's backlog budget. Its owner's mutex guards it.
type updateHold struct {
	bytes  int
	closed bool // the request is over: everything released, nothing more taken
}

// take charges n bytes for an update about to be held, or returns why it
// is refused.
func (h *updateHold) take(sb *sendq.Session, n int) error {
	if h.closed {
		return errStreamDone
	}
	if h.bytes > 0 && h.bytes+n > maxHeldUpdateBytes {
		return fmt.Errorf("%w: the request's unanswered REQUEST_UPDATEs would hold more than %d bytes", errExcessiveLoad, maxHeldUpdateBytes)
	}
	if err := sb.Charge(n); err != nil {
		return err
	}
	h.bytes += n
	return nil
}

// give releases n bytes taken for an update now answered.
func (h *updateHold) give(sb *sendq.Session, n int) {
	if h.closed || n == 0 {
		return
	}
	h.bytes -= n
	sb.Release(n)
}

// close releases what the request still holds; it is idempotent.
func (h *updateHold) close(sb *sendq.Session) {
	if h.closed {
		return
	}
	h.closed = true
	sb.Release(h.bytes)
	h.bytes = 0
}

// refusedUpdate is the update with Request ID id, refused for holding too
// much (take's error): only its Request ID is kept, for the REQUEST_ERROR.
func refusedUpdate(id uint64, err error) pendingUpdate {
	return pendingUpdate{msg: &wire.RequestUpdate{RequestID: id},
		rej: &wire.RejectError{Code: wire.ReqExcessiveLoad, Reason: strings.TrimPrefix(err.Error(), "moqt: ")}}
}
