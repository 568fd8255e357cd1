package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/moqt-go/moqt/wire"
)

// A subscriber's fill on drafts 18 and 19, which have no FILL_PARAMETERS
// (docs/drafts.md §6): Subscribe sends the SUBSCRIBE without them and, at
// once, a Joining FETCH naming it (18 §10.12.2) on a request stream of its
// own. The fill slot is keyed by the FETCH's Request ID, which its data
// stream's FETCH_HEADER carries (fetch_route.go), and is the initial fill
// as on 21: ReadObject and AcceptFill cannot tell the difference.
//
// The range, 21 against 18 (21 §9.20.10, 18 §10.12.2.1). With L the
// Largest Object of SUBSCRIBE_OK, which the publisher saves as the Joining
// Location, a 21 fill with the relative filter StartGroup = N covers
// {L.Group + 1 − N, 0} through L; an 18 Relative Joining FETCH with
// Joining Start J covers {L.Group − J, 0} through L. So N ≥ 1 is J = N − 1
// (N = 1, the current group, is J = 0), both clamped at group 0. N = 0
// (the Next Group) and the Next Object start past L: an empty fill, for
// which 21 opens no stream, and no FETCH is sent. An absolute {G, 0} with
// no end is an Absolute Joining FETCH with Joining Start G; no filter (the
// whole track) is G = 0. The rest (a start object other than 0, an end)
// has no joining form, nor have range filters on 18, nor a fill in
// REQUEST_UPDATE, whose range would be evaluated against the Largest
// Object at the update, not the Joining Location; they are refused before
// anything is sent.

// joinPlan is the Joining FETCH a SUBSCRIBE's fill becomes.
type joinPlan struct {
	typ    wire.FetchType
	start  uint64      // Joining Start
	params wire.Params // the FETCH's parameters
	fill   *wire.Params
}

// planJoin returns the Joining FETCH of the fill asked by params (a
// SUBSCRIBE's, FillParameters set), nil when the fill is empty whatever
// the publisher has, or the *wire.NotInDraftError of a fill it cannot
// express.
func planJoin(v wire.Version, params *wire.Params) (*joinPlan, error) {
	fp := params.FillParameters
	notIn := func(what string) error {
		return fmt.Errorf("moqt: fill: %w", &wire.NotInDraftError{What: what, Version: v})
	}
	if !forwardOf(params) {
		return nil, nil // Forward 0 opens no fill (21 §3.4.1)
	}
	lf := params.LocationFilter
	if fp.LocationFilter.Set {
		lf = fp.LocationFilter
	}
	plan := &joinPlan{typ: wire.FetchAbsoluteJoining}
	f := lf.Value
	switch {
	case !lf.Set || f.Fields == 0:
		// The whole track: absolute from group 0.
	case f.Fields == 1 && f.StartGroup == 0, f.Fields == 2 && f.StartGroup == 0 && f.StartObject == 0:
		return nil, nil // starts after the Largest Object: empty
	case f.Fields == 1:
		plan.typ, plan.start = wire.FetchRelativeJoining, f.StartGroup-1
	case f.Fields == 2 && f.StartObject == 0:
		plan.start = f.StartGroup
	case f.Fields == 2:
		return nil, notIn("a fill starting inside a group (a joining FETCH starts at Object 0)")
	default:
		return nil, notIn("a fill with an end (a joining FETCH ends at the Joining Location)")
	}
	rf := params.RangeFilters
	if len(fp.RangeFilters) > 0 {
		rf = fp.RangeFilters
	}
	if len(rf) > 0 && !v.Profile().RangeFilters {
		return nil, notIn("a fill with range filters")
	}
	p := wire.Params{SubscriberPriority: params.SubscriberPriority, GroupOrder: params.GroupOrder,
		FillTimeout: fp.FillTimeout, RangeFilters: rf}
	if fp.SubscriberPriority.Set {
		p.SubscriberPriority = fp.SubscriberPriority
	}
	if fp.GroupOrder.Set {
		p.GroupOrder = fp.GroupOrder
	}
	if !p.GroupOrder.Set {
		// The track's default order is not known before SUBSCRIBE_OK; the
		// FETCH names one, which the fill's reader then expects.
		p.GroupOrder = wire.Some(wire.GroupOrderAscending)
	}
	for _, t := range params.AuthorizationTokens {
		// The SUBSCRIBE's credentials, by value: an alias it registers
		// may not be known yet when the FETCH, on another stream, arrives.
		if t.AliasType == wire.TokenRegister || t.AliasType == wire.TokenUseValue {
			p.AuthorizationTokens = append(p.AuthorizationTokens, wire.Token{AliasType: wire.TokenUseValue, Type: t.Type, Value: t.Value})
		}
	}
	fill := *fp
	fill.GroupOrder = p.GroupOrder
	plan.params, plan.fill = p, &fill
	return plan, nil
}

// open opens the Joining FETCH's request stream and registers its fill
// slot with sub, before the SUBSCRIBE is sent. sub.rs is open.
func (plan *joinPlan) open(ctx context.Context, sub *Subscription) (*requestStream, error) {
	rs, err := sub.sess.openChecked(ctx, &plan.params, wire.InFetch)
	if err != nil {
		return nil, err
	}
	sub.mu.Lock()
	sub.askFillLocked(rs.id, plan.fill)
	sub.fill.joinID = wire.Some(rs.id)
	sub.mu.Unlock()
	return rs, nil
}

// send writes the Joining FETCH on rs, once sub's SUBSCRIBE is out, and
// reads its answers. A FETCH that cannot be written fails the fill.
func (plan *joinPlan) send(sub *Subscription, rs *requestStream) {
	j := &joinReq{sub: sub, rs: rs}
	sub.mu.Lock()
	sub.join = j
	sub.mu.Unlock()
	m := &wire.Fetch{RequestID: rs.id, FetchType: plan.typ, JoiningRequestID: sub.rs.id, JoiningStart: plan.start,
		Parameters: plan.params}
	if err := rs.write(m); err != nil {
		rs.cancel(wire.ResetInternalError)
		sub.sess.requests.remove(rs)
		sub.joinFailed(rs.id, err)
		return
	}
	rs.goServe(j)
}

// joinReq is the request side of a Joining FETCH this end sent for a fill.
// Its data stream goes to the subscription's fill slot; the request stream
// only carries FETCH_OK or REQUEST_ERROR.
type joinReq struct {
	sub       *Subscription
	rs        *requestStream
	gotAnswer bool // reader goroutine only
}

func (j *joinReq) handle(m wire.Message, _ *wire.RejectError) error {
	switch m := m.(type) {
	case *wire.Goaway:
		return nil
	case *wire.FetchOK:
		if j.gotAnswer {
			return protocolViolation("FETCH_OK after the FETCH's answer") // C085
		}
		j.gotAnswer = true
		j.rs.answered()
		own, err := detach(j.rs.sess.version, m)
		if err != nil {
			return err
		}
		if err := own.Parameters.Check(wire.InFetchOK); err != nil {
			return err
		}
		return checkTrackProperties(own.TrackProperties)
	case *wire.RequestError:
		if j.gotAnswer {
			return protocolViolation("REQUEST_ERROR after the FETCH's answer")
		}
		j.gotAnswer = true
		j.rs.answered()
		own, err := detach(j.rs.sess.version, m)
		if err != nil {
			return err
		}
		j.sub.joinFailed(j.rs.id, requestErrorFrom(own))
		return nil // the publisher's FIN follows
	}
	return protocolViolation("unexpected %s answering FETCH", m.Type())
}

// peerFinished: the publisher finished after its answer and its data
// stream (fetchServed completes so), and this end has nothing to send.
func (j *joinReq) peerFinished() {
	if !j.gotAnswer {
		j.rs.cancel(wire.ResetCancelled)
		j.sub.joinFailed(j.rs.id, errors.New("moqt: joining FETCH stream closed without an answer"))
		return
	}
	_ = j.rs.fin()
}

func (j *joinReq) reset(cause error) {
	j.rs.cancel(wire.ResetCancelled)
	j.sub.joinFailed(j.rs.id, cause)
}

func (j *joinReq) failed(*SessionError) {}

// cancel ends the Joining FETCH from this end: the subscription's data
// plane is over (§3.2.1: STOP_SENDING on the request stream).
func (j *joinReq) cancel() { j.rs.cancel(wire.ResetCancelled) }

// endedStream is the stream of a fill whose data stream never came.
type endedStream struct{}

func (endedStream) Read([]byte) (int, error) { return 0, io.EOF }
func (endedStream) CancelRead(uint64)        {}
