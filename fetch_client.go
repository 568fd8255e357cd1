package moqt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/wire"
)

// Fetch is the subscriber's end of a FETCH (§9.11), or of a subscription's
// fill fetch stream (§3.4, Subscription.AcceptFill). Its fields are set
// once, from FETCH_OK; a fill has none of them. ReadObject and Close may be
// called from different goroutines; ReadObject is not safe for concurrent
// use with itself. A Fetch not read to its end should be closed: its data
// stream, unread, holds connection flow-control credit.
type Fetch struct {
	// EndOfTrack reports that the End Location is the track's last object.
	EndOfTrack bool
	// End is the FETCH_OK End Location: the end of the range the response
	// covers (§9.12), inclusive whatever the draft (18 and 19 send the
	// last Object plus one, 18 §10.13; End.Object 2^64−1 is a whole group).
	End wire.Location
	// Properties are the Track Properties of FETCH_OK.
	Properties wire.KVList
	// Params are the FETCH's parameters as sent.
	Params wire.Params

	sess *Session
	req  *fetchReq // nil for a fill fetch stream
	data fetchData
}

// Fetch sends FETCH for track (§9.11) and waits for FETCH_OK. params carry
// the FETCH's parameters: LOCATION_FILTER (none fetches from {0, 0} to the
// Largest Object), GROUP_ORDER (Ascending by default), SUBSCRIBER_PRIORITY,
// range filters, INCLUDE_PROPERTIES and AUTHORIZATION_TOKENs, held to the
// peer's limits as Subscribe holds them. A REQUEST_ERROR is returned as
// *RequestError, and whatever objects came before it are discarded. If ctx
// ends first, the fetch is cancelled (STOP_SENDING on its streams, §3.2.1).
//
// A FETCH_OK whose End Location is before the Start Location closes the
// session with PROTOCOL_VIOLATION (§9.12). The Start is known when the
// LOCATION_FILTER is absolute; a relative one resolves against the
// publisher's Largest Object, which this end does not know, so then only
// {0, 0} is checked. A FETCH_OK with a Mandatory Track Property this end
// does not understand cancels the fetch (§3.6), which fails with a
// *RequestError of UNSUPPORTED_EXTENSION.
//
// On a draft 18 or 19 session (Session.Version) the range goes as a
// Standalone FETCH's Start and End Location (18 §10.12.1), and FETCH_OK's
// End Location comes back as the last object plus one, which End reports
// inclusive; a relative LOCATION_FILTER has no Standalone form and fails,
// wrapping wire.ErrNotInDraft, before anything is sent.
func (s *Session) Fetch(ctx context.Context, track wire.FullTrackName, params wire.Params) (*Fetch, error) {
	msg := &wire.Fetch{TrackNamespace: track.Namespace, TrackName: track.Name}
	sent := params
	if s.profile().JoiningFetch {
		// 18/19: the range travels as a Standalone FETCH's Start and End
		// Location, not as LOCATION_FILTER (18 §10.12.1).
		start, end, err := standaloneRange(s.version, params.LocationFilter)
		if err != nil {
			return nil, fmt.Errorf("moqt: FETCH: %w", err)
		}
		msg.FetchType, msg.StartLocation, msg.EndLocation = wire.FetchStandalone, start, end
		sent.LocationFilter = wire.Opt[wire.LocationFilter]{}
	}
	rs, err := s.openChecked(ctx, &sent, wire.InFetch)
	if err != nil {
		return nil, err
	}
	params.AuthorizationTokens = sent.AuthorizationTokens
	f := &Fetch{sess: s, Params: params}
	f.data.init()
	q := &fetchReq{f: f, rs: rs, track: track, answer: make(chan struct{}), done: make(chan struct{})}
	q.updates = newUpdateQueue(rs, &q.mu, q.done, q.endErr)
	q.updates.closedLocked = func() bool { return q.ended || q.peerDone }
	q.start, q.startKnown = fetchStart(params.LocationFilter)
	f.req = q
	f.data.desc = params.GroupOrder.Set && params.GroupOrder.Value == wire.GroupOrderDescending
	f.data.malformed = q.malformed
	// Registered before the FETCH leaves, so the data stream, which may
	// precede FETCH_OK, always finds it (§9.12).
	s.fetches.add(rs.id, f)
	msg.RequestID, msg.Parameters = rs.id, sent
	if err := rs.write(msg); err != nil {
		s.fetches.remove(rs.id)
		rs.cancel(wire.ResetInternalError)
		s.requests.remove(rs)
		return nil, err
	}
	rs.goServe(q)
	select {
	case <-q.answer:
		if err := q.result(); err != nil {
			return nil, err
		}
		return f, nil
	case <-ctx.Done():
		f.cancel(ctx.Err())
		return nil, ctx.Err()
	}
}

// fetchStart is the Start Location of a FETCH's Location filter as far as
// this end can know it (§3.3.1): absolute forms name it; no filter starts
// at {0, 0}; the relative forms depend on the publisher's Largest Object,
// and known is false.
func fetchStart(lf wire.Opt[wire.LocationFilter]) (start wire.Location, known bool) {
	f := lf.Value
	switch {
	case !lf.Set || f.Fields == 0:
		return wire.Location{}, true
	case f.IsRelative():
		return wire.Location{}, false
	}
	return wire.Location{Group: f.StartGroup, Object: f.StartObject}, true
}

// ReadObject returns the fetch's next entry, in the order of the stream:
// objects (Location, SubgroupID, Priority and Properties set, Datagram for
// a Datagram Forwarding Preference; Payload and Properties are the
// caller's) and the ends of ranges the stream does not carry
// (Object.EndOfRange set, Location the range's end, §11.4.1.2). After the
// publisher's FIN it returns io.EOF; a reset stream returns an error
// wrapping *StreamError with the publisher's code (such as
// UNKNOWN_OBJECT_STATUS, §12.5). An entry outside the fetched range or out
// of order is a Malformed Track (§12.1): the fetch, and every subscription
// to the track on the session, is cancelled, and ReadObject returns
// *MalformedTrackError. An object larger than Config.MaxObjectSize stops
// the stream and cancels the fetch (ErrObjectTooLarge). Bad stream data closes the session
// (§11.4.1). ReadObject returns ctx's error if ctx ends first, and an
// error wrapping ErrCancelled after Close.
func (f *Fetch) ReadObject(ctx context.Context) (Object, error) {
	p, err := f.data.wait(ctx, f.sess)
	if err != nil {
		return Object{}, err
	}
	it, err := p.take(ctx, f.data.quit, f.sess)
	switch {
	case err == errFetchQuit:
		return Object{}, f.data.closedErr()
	case err != nil:
		return Object{}, err
	}
	if err := f.data.closedErr(); err != nil {
		return Object{}, err
	}
	if it.err != nil {
		switch {
		case f.req == nil:
		case it.err == io.EOF, errors.As(it.err, new(*StreamError)):
			// The data stream's FIN, or the publisher's reset of it:
			// either way the fetch is over (§3.2.1).
			f.req.complete()
		case errors.Is(it.err, ErrObjectTooLarge):
			// This end stopped the data stream: that cancels the fetch,
			// whose request stream is stopped too (§3.2.1).
			f.req.cancel(it.err, wire.ResetCancelled)
		}
		return Object{}, it.err
	}
	return it.obj, nil
}

// Update sends REQUEST_UPDATE for the fetch (§9.5) and waits for its
// answer; SUBSCRIBER_PRIORITY is what a FETCH can change. A refused update
// returns *RequestError, and the publisher resets the data stream
// (§9.5.1). The Fetch's Params keep the values of the FETCH. Updates are
// sent one at a time.
func (f *Fetch) Update(ctx context.Context, params wire.Params) error {
	q := f.req
	if q == nil {
		return errors.New("moqt: a fill fetch stream has no request to update")
	}
	if err := params.Check(wire.InUpdateFetch); err != nil {
		return err
	}
	// The turn is held until the answer: updates go one at a time.
	if err := q.updates.enter(ctx); err != nil {
		return err
	}
	defer q.updates.leave()
	u, err := q.updates.send(ctx, &params, nil)
	if err != nil {
		return err
	}
	_, err = q.updates.await(ctx, u)
	return err
}

// Close cancels the fetch, if it is not complete: STOP_SENDING on its
// request stream (§3.2.1) and on its data stream if it is open, and
// a reset of this end's direction (§6.4.2.3). Once ReadObject has
// returned the data stream's end (io.EOF, or the publisher's reset), the
// fetch is over and this end's direction finished: Close then only
// releases what is left. It is safe to call at any time, more than once.
func (f *Fetch) Close() error {
	f.cancel(errFetchClosed)
	return nil
}

// cancel ends the fetch from this end with err.
func (f *Fetch) cancel(err error) { f.cancelWith(err, wire.ResetCancelled) }

func (f *Fetch) cancelWith(err error, code wire.ResetCode) {
	f.data.close(code, err)
	if f.req != nil {
		f.req.cancel(err, code)
	}
}

// takeFetchStream is the route of the FETCH's data stream (fetch_route.go).
func (f *Fetch) takeFetchStream(r *fetchStream) bool { return f.data.take(f.sess, r) }

// fetchData is a Fetch's data stream: awaited, held, then read.
type fetchData struct {
	ready chan struct{} // closed once r or err is set
	quit  chan struct{} // closed by close

	// Set before the stream is read.
	window    filter.Window
	desc      bool
	malformed func(*MalformedTrackError)
	track     *trackCheck // a fill's subscription's, for fetchCheck

	mu       sync.Mutex // guards the fields below
	r        *fetchStream
	err      error // why no stream will be read
	answered bool  // the request has its answer: a stream is no longer held
	closed   bool
	closeErr error // what reads return once closed
	pump     *fetchPump
	started  atomic.Pointer[fetchPump] // pump, once set: wait's fast path
}

func (d *fetchData) init() {
	d.ready = make(chan struct{})
	d.quit = make(chan struct{})
}

// take accepts the data stream; before the answer it is held, within
// Config.MaxPendingStreams.
func (d *fetchData) take(s *Session, r *fetchStream) bool {
	d.mu.Lock()
	if d.r != nil || d.err != nil || d.closed {
		d.mu.Unlock()
		return false
	}
	if !d.answered {
		if r.hold = reserveHold(s); r.hold == nil {
			d.err = errHeldStreams
			close(d.ready)
			d.mu.Unlock()
			r.str.CancelRead(uint64(wire.ResetExcessiveLoad))
			return true
		}
	}
	d.r = r
	close(d.ready)
	d.mu.Unlock()
	return true
}

// markAnswered ends the holding: the application may read now.
func (d *fetchData) markAnswered(window filter.Window) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answered = true
	d.window = window
	if d.r != nil {
		d.r.hold.release()
	}
}

// fail records that no stream will be read; one held for an answer that
// did not come is stopped.
func (d *fetchData) fail(err error) {
	d.mu.Lock()
	r := d.r
	if d.err == nil && r == nil {
		d.err = err
		close(d.ready)
	}
	stop := !d.answered
	d.mu.Unlock()
	if r != nil && stop {
		r.stop(wire.ResetCancelled)
	}
}

// close stops the stream with code and wakes ReadObject, which returns err
// from now on.
func (d *fetchData) close(code wire.ResetCode, err error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed, d.closeErr = true, err
	close(d.quit)
	r, p := d.r, d.pump
	d.mu.Unlock()
	if r != nil {
		r.stop(code)
	}
	if p != nil {
		p.halt()
	}
}

// closedErr is what reads return once closed, or nil.
func (d *fetchData) closedErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		return nil
	}
	return d.closeErr
}

// wait waits for the stream and returns its pump, started on first use.
func (d *fetchData) wait(ctx context.Context, s *Session) (*fetchPump, error) {
	if p := d.started.Load(); p != nil {
		return p, nil // ReadObject checks closedErr after
	}
	select {
	case <-d.ready:
	case <-d.quit:
		return nil, d.closedErr()
	case <-s.ctx.Done():
		return nil, s.closeErr(ErrCancelled)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil, d.closeErr
	case d.r == nil:
		return nil, d.err
	case d.pump == nil:
		d.r.window, d.r.dec.Descending, d.r.malformed = d.window, d.desc, d.malformed
		d.r.chk.track = d.track
		d.pump = startPump(d.r)
		d.started.Store(d.pump)
	}
	return d.pump, nil
}

// fetchReq is the request side of a FETCH this end sent, as the request
// stream's read loop drives it (requestSide).
type fetchReq struct {
	f          *Fetch
	rs         *requestStream
	track      wire.FullTrackName
	start      wire.Location
	startKnown bool
	answer     chan struct{} // closed once FETCH_OK or REQUEST_ERROR came, or the request ended
	done       chan struct{} // closed when the request has ended
	gotAnswer  bool          // reader goroutine only
	answerOnce sync.Once
	doneOnce   sync.Once
	completed  atomic.Bool // the data stream's end, FIN or reset, was read

	mu       sync.Mutex // guards the fields below
	err      error      // the request's result or end
	ended    bool
	peerDone bool        // the publisher finished its direction
	updates  updateQueue // this end's REQUEST_UPDATEs, under mu
}

func (q *fetchReq) result() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *fetchReq) endErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return q.err
	}
	return fmt.Errorf("moqt: fetch request stream closed: %w", ErrCancelled)
}

// settle sets the answer: nil for FETCH_OK.
func (q *fetchReq) settle(err error) {
	q.answerOnce.Do(func() {
		q.mu.Lock()
		if q.err == nil {
			q.err = err
		}
		q.mu.Unlock()
		close(q.answer)
	})
}

// end ends the request with err: the data stream, if still awaited, never
// comes; outstanding updates fail. One held before the answer is stopped:
// after a REQUEST_ERROR its objects are discarded (§3.2.1).
func (q *fetchReq) end(err error) {
	q.settle(err)
	q.mu.Lock()
	q.ended = true
	if q.err == nil {
		q.err = err
	}
	ups := q.updates.takeAllLocked()
	q.mu.Unlock()
	for _, u := range ups {
		u.settle(wire.Params{}, err)
	}
	q.rs.sess.fetches.remove(q.rs.id)
	q.f.data.fail(err)
	q.doneOnce.Do(func() { close(q.done) })
}

// cancel cancels the request from this end, unless it is complete, in
// which case this end's direction is finished.
func (q *fetchReq) cancel(err error, code wire.ResetCode) {
	if q.completed.Load() {
		_ = q.rs.fin()
	} else {
		q.rs.cancel(code)
	}
	q.end(err)
}

// complete records the data stream's end, read: its FIN, or the
// publisher's reset. The fetch has all it will get, and this end has
// nothing more to send (§6.4.2.2).
func (q *fetchReq) complete() {
	q.completed.Store(true)
	q.rs.sess.fetches.remove(q.rs.id)
	_ = q.rs.fin()
}

// malformed cancels, on a Malformed Track, the fetch and every other
// subscription to and FETCH of the track (§12.1).
func (q *fetchReq) malformed(e *MalformedTrackError) {
	q.f.cancelWith(e, wire.ResetMalformedTrack)
	q.rs.sess.malformedTrack(q.track, e, nil, q.f)
}

func (q *fetchReq) handle(m wire.Message, _ *wire.RejectError) error {
	if _, ok := m.(*wire.Goaway); ok {
		return nil
	}
	switch m := m.(type) {
	case *wire.FetchOK:
		if q.gotAnswer {
			return protocolViolation("FETCH_OK after the FETCH's answer") // C085
		}
		q.gotAnswer = true
		q.rs.answered()
		return q.accept(m)
	case *wire.RequestError:
		own, err := detach(q.rs.sess.version, m)
		if err != nil {
			return err
		}
		if !q.gotAnswer {
			q.gotAnswer = true
			q.rs.answered()
			// Objects sent before it are discarded (§3.2.1).
			q.end(requestErrorFrom(own))
			return nil // the publisher's FIN follows
		}
		return q.answerUpdate(requestErrorFrom(own))
	case *wire.RequestOK:
		if err := m.Check(wire.InUpdateOK); err != nil {
			return err
		}
		return q.answerUpdate(nil)
	}
	return protocolViolation("unexpected %s answering FETCH", m.Type())
}

// accept applies FETCH_OK.
func (q *fetchReq) accept(m *wire.FetchOK) error {
	own, err := detach(q.rs.sess.version, m)
	if err != nil {
		return err
	}
	if err := own.Parameters.Check(wire.InFetchOK); err != nil {
		return err
	}
	if err := checkTrackProperties(own.TrackProperties); err != nil {
		return err
	}
	// 18/19 send the end plus one (18 §10.13); the Fetch reports it
	// inclusive, as 21 does.
	end := q.rs.sess.fetchEndOf(own.EndLocation)
	if q.startKnown && end.Less(q.start) {
		return protocolViolation("FETCH_OK End Location %v is before the Start Location %v", own.EndLocation, q.start) // C096
	}
	if t, ok := unknownMandatory(own.TrackProperties); ok {
		// C091: a fetch of a track with a Mandatory Track Property this
		// endpoint does not understand is cancelled (§3.6).
		q.f.cancel(&RequestError{Code: wire.ReqUnsupportedExtension, Reason: fmt.Sprintf("mandatory track property 0x%x", t)})
		return io.EOF
	}
	f := q.f
	f.EndOfTrack, f.End, f.Properties = own.EndOfTrack, end, own.TrackProperties
	f.data.markAnswered(filter.Window{Start: q.start, End: end, Bounded: true})
	q.settle(nil)
	return nil
}

// answerUpdate resolves the oldest outstanding REQUEST_UPDATE.
func (q *fetchReq) answerUpdate(err error) error {
	if !q.gotAnswer {
		return protocolViolation("REQUEST_OK or REQUEST_ERROR with no REQUEST_UPDATE outstanding")
	}
	q.mu.Lock()
	u := q.updates.popLocked()
	q.mu.Unlock()
	if u == nil {
		return protocolViolation("REQUEST_OK or REQUEST_ERROR with no REQUEST_UPDATE outstanding")
	}
	u.settle(wire.Params{}, err)
	return nil
}

func (q *fetchReq) peerFinished() {
	if !q.gotAnswer {
		err := errors.New("moqt: FETCH stream closed without an answer")
		if q.rs.goawayIn {
			err = fmt.Errorf("moqt: FETCH migrated by the peer's GOAWAY: %w", ErrGoingAway)
		}
		q.rs.cancel(wire.ResetCancelled)
		q.end(err)
		return
	}
	// Nothing more comes from the publisher: no update can be answered.
	q.mu.Lock()
	q.peerDone = true
	ups := q.updates.takeAllLocked()
	q.mu.Unlock()
	for _, u := range ups {
		u.settle(wire.Params{}, errors.New("moqt: FETCH stream closed with a REQUEST_UPDATE unanswered"))
	}
	switch {
	case q.isEnded():
		// Refused (REQUEST_ERROR): the request is complete (§6.4.2.2),
		// and no Fetch went to the caller to finish it later, so this end
		// finishes its direction now. Left open, it held the publisher's
		// Session.Close for its whole CloseTimeout.
		_ = q.rs.fin()
	case q.completed.Load():
		q.end(io.EOF)
	}
}

// isEnded reports whether the request has ended.
func (q *fetchReq) isEnded() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ended
}

func (q *fetchReq) reset(cause error) {
	if !q.gotAnswer || q.rs.isCancelled() {
		q.end(cause)
		return
	}
	// The publisher cancelled after FETCH_OK (§3.2.1): a data stream it
	// never opened will not come, one it opened ends as it ends.
	q.rs.cancel(wire.ResetCancelled)
	q.end(cause)
}

func (q *fetchReq) failed(se *SessionError) { q.end(se) }
