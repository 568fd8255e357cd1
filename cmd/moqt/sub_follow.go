package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// followOptions are how moqt sub follows GOAWAY.
type followOptions struct {
	on      bool          // -follow-goaway
	timeout time.Duration // -reconnect: how long moving may take
	// dial opens a session at a URL; nil leaves GOAWAY unfollowed.
	dial func(ctx context.Context, url string) (*moqt.Session, error)
	url  string // the first session's URL
}

// move takes moqt sub's subscription off a session that sent GOAWAY onto a
// new one (§6.6.1, §7.4.1): once the GOAWAY comes, it dials the New
// Session URI, or the URL the session was dialed at when the GOAWAY
// carries none (§9.2), and tries again until timeout has passed. The
// reader goes on reading the old subscription meanwhile: wake ends once
// the dial is done, and the reader subscribes on the new session (a fill
// from where it stopped, resubscribe) and then cancels the old one.
type move struct {
	from    *moqt.Session
	fromURL string
	req     <-chan struct{} // closed by a GOAWAY on the subscription's own request stream
	wake    context.Context // ends once the dial is done (or ctx)
	// again is closed by retry: the session, itself reached by a move,
	// failed before retryUntil, and is to be dialed afresh.
	again      chan struct{}
	retryUntil time.Time
	done       chan struct{}
	// Set before done is closed:
	deadline time.Time // when the dial, and the subscribe after it, give up
	target   string
	to       *moqt.Session
	err      error

	noticed bool // the reader saw the dial fail and reads the old session on (reader only)
}

// watchGoaway starts a move of sub, on sess dialed at url, that waits for
// a GOAWAY: the session's, or one on sub's request stream (§9.2: that
// request alone, to be issued again at the URI, or where it is: on the
// same session). deadline, if set, is that of the
// move that reached sess: until then, a failure of sess is retried
// (retry). sub may be nil.
func watchGoaway(ctx context.Context, f *followOptions, n *narrator, sess *moqt.Session, sub *moqt.Subscription, url string, deadline time.Time) *move {
	wake, cancel := context.WithCancel(ctx)
	m := &move{from: sess, fromURL: url, wake: wake, again: make(chan struct{}), retryUntil: deadline, done: make(chan struct{})}
	if sub != nil { // nil for moqt pub's, whose offer's GOAWAY is not followed
		m.req = sub.GoingAway()
	}
	go func() {
		defer cancel()
		target := url
		select {
		case <-sess.GoingAway():
			if uri := sess.GoawayURI(); uri != "" {
				target = uri
			}
			deadline = time.Now().Add(f.timeout)
			n.say("%s is going away (GOAWAY): moving to %s", url, target)
		case <-m.req:
			deadline = time.Now().Add(f.timeout)
			if target = sub.GoawayURI(); target == "" {
				// That request again, where it is (§9.2).
				n.say("%s moves the subscription (GOAWAY on its request stream): subscribing again on the same session", url)
				m.target, m.deadline, m.to = url, deadline, sess
				close(m.done)
				return
			}
			n.say("%s moves the subscription (GOAWAY on its request stream): moving to %s", url, target)
		case <-m.again:
		case <-ctx.Done():
			return
		}
		m.target, m.deadline = target, deadline
		m.to, m.err = redial(wake, f, target, deadline)
		close(m.done)
	}()
	return m
}

// moveAgain starts m's move afresh, after a pause: the session it reached
// refused or lost the subscription before m's deadline.
func moveAgain(ctx context.Context, f *followOptions, m *move) *move {
	wake, cancel := context.WithCancel(ctx)
	again := &move{from: m.from, fromURL: m.fromURL, req: m.req, wake: wake, done: make(chan struct{})}
	go func() {
		defer cancel()
		again.target, again.deadline = m.target, m.deadline
		select {
		case <-time.After(retryPause):
			again.to, again.err = redial(wake, f, m.target, m.deadline)
		case <-wake.Done():
			again.err = wake.Err()
		}
		close(again.done)
	}()
	return again
}

// retryPause is the pause before a move is tried again.
const retryPause = 250 * time.Millisecond

// goingAway reports whether the session sent GOAWAY, on its control
// stream or on the subscription's request stream.
func (m *move) goingAway() bool {
	select {
	case <-m.from.GoingAway():
		return true
	case <-m.req:
		return true
	default:
		return false
	}
}

// dialed reports whether the dial is done.
func (m *move) dialed() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

// retry dials afresh, to the same URL, a session a move reached that
// failed within the move's time; false once that time is over.
func (m *move) retry(n *narrator, why error) bool {
	if m.retryUntil.IsZero() || !time.Now().Before(m.retryUntil) || m.goingAway() {
		return false
	}
	n.say("the subscription at %s ended (%s): moving there again", m.fromURL, explainEnd(why))
	close(m.again)
	return true
}

// await waits for the dial, which ends by the move's deadline.
func (m *move) await(ctx context.Context) error {
	select {
	case <-m.done:
		return m.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// redial dials url until it answers or deadline passes, pausing between
// tries: the server there may still be starting, or restarting.
func redial(ctx context.Context, f *followOptions, url string, deadline time.Time) (*moqt.Session, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var err error
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		var s *moqt.Session
		if s, err = f.dial(ctx, url); err == nil {
			return s, nil
		}
		var ue *usageError
		if errors.As(err, &ue) {
			return nil, err // a URL that cannot be dialed
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, fmt.Errorf("could not reach %s within %s: %w", url, timeText(f.timeout), err)
		}
	}
}

// resubscribe subscribes on the session m reached to name from resume on:
// the Next Object, and a fill from resume through the Largest Object,
// which §3.4 gives as the recipe for each object once. The relay there
// serves the fill from its cache, or from its upstream.
func resubscribe(ctx context.Context, m *move, name wire.FullTrackName, resume wire.Location, wait time.Duration) (*moqt.Subscription, error) {
	fill := wire.NoLocationFilter() // the whole track (§3.4)
	if resume != (wire.Location{}) {
		fill = wire.StartFilter(resume)
	}
	left := time.Until(m.deadline)
	p := subParams(0, min(wait, left))
	p.FillParameters = &wire.Params{LocationFilter: wire.Some(fill)}
	sctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	sub, err := m.to.Subscribe(sctx, name, p)
	if err != nil {
		if m.to != m.from {
			_ = m.to.Close()
		}
		return nil, fmt.Errorf("subscribing to %s at %s: %w", formatTrack(name), m.target, explainSubscribeError(err, wait))
	}
	return sub, nil
}

// leave cancels the old subscription and closes its session once it has
// ended: the session closes itself with NO_ERROR once no request is open
// after its GOAWAY (§6.6.1), or it is closed after timeout.
func leave(sub *moqt.Subscription, sess *moqt.Session, timeout time.Duration) {
	_ = sub.Close()
	go func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-sess.Context().Done():
		case <-t.C:
		}
		_ = sess.Close()
	}()
}

// explainEnd says how a subscription ended.
func explainEnd(err error) string {
	var done *moqt.DoneError
	if errors.As(err, &done) {
		return explainDone(done)
	}
	return err.Error()
}

// isTrackEnded reports a subscription's end by TRACK_ENDED.
func isTrackEnded(err error) bool {
	var done *moqt.DoneError
	return errors.As(err, &done) && done.Code == wire.DoneTrackEnded
}

// follower is runSub's side of following GOAWAY: the session and
// subscription read now, and what moving did to the copy.
type follower struct {
	f   *followOptions
	n   *narrator
	tk  *taken
	mv  *move // the current session's; nil when GOAWAY is not followed
	ses *moqt.Session
	sub *moqt.Subscription
	// moved: a move happened. Objects may come twice then (tk.has), and a
	// range the new session's fill does not have is missing from the copy.
	moved bool
	// afterFill, once moved with a Largest Object, is the first group the
	// fill did not complete: every group below it came whole once the
	// fill is over.
	afterFill    uint64
	afterFillSet bool
	lost         int // ranges of a fill after a move that did not come
	// held are the short streams of the old subscription after its GOAWAY:
	// the move's fill brings what they lacked, or they count at the end.
	held []moqt.Object
}

func newFollower(ctx context.Context, o *subOptions, n *narrator, sess *moqt.Session, sub *moqt.Subscription, tk *taken) *follower {
	fw := &follower{f: &o.follow, n: n, tk: tk, ses: sess, sub: sub}
	if o.follow.dial != nil {
		fw.mv = watchGoaway(ctx, &o.follow, n, sess, sub, o.follow.url, time.Time{})
	}
	return fw
}

// readCtx is the context to read the subscription with: it ends once a
// move's dial is done, so that the reader moves at once.
func (fw *follower) readCtx(ctx context.Context) context.Context {
	if fw.mv == nil || fw.mv.noticed {
		return ctx
	}
	return fw.mv.wake
}

// due reports whether err, a read's, calls for a move: the dial after
// GOAWAY is done (woke), the subscription ended after GOAWAY other than by
// TRACK_ENDED, or the session a move reached failed within the move's time.
func (fw *follower) due(ctx context.Context, err error) (woke, due bool) {
	if err == nil || fw.mv == nil || ctx.Err() != nil {
		return false, false
	}
	switch {
	case !fw.mv.noticed && fw.mv.wake.Err() != nil && errors.Is(err, context.Canceled):
		return true, true
	case isTrackEnded(err):
		return false, false
	case fw.mv.goingAway():
		return false, true
	}
	return false, fw.mv.retry(fw.n, err)
}

// hold keeps an old subscription's short stream after its GOAWAY, and
// reports whether it did.
func (fw *follower) hold(obj moqt.Object) bool {
	if fw.mv == nil || !fw.mv.goingAway() || obj.Incomplete == nil || errors.Is(obj.Incomplete, moqt.ErrFillFailed) {
		return false
	}
	if len(fw.held) < maxShortNamed*8 {
		fw.held = append(fw.held, obj)
	}
	return true
}

// moveOn moves the subscription to the session the move dialed, from the
// first object the copy lacks (seq's current group on, when ordered). It
// reports false with no error when the dial failed while the old
// subscription still runs: it is read on until it ends.
func (fw *follower) moveOn(ctx context.Context, woke bool, why error, seq *sequencer, ordered bool, name wire.FullTrackName, wait time.Duration) (bool, error) {
	m := fw.mv
	if err := m.await(ctx); err != nil {
		switch {
		case ctx.Err() != nil:
			return false, nil
		case woke:
			m.noticed = true
			fw.n.warn("%v: reading on from %s until it ends", err, m.fromURL)
			return false, nil
		}
		return false, fmt.Errorf("the subscription at %s ended (%v), and moving to %s failed: %w", m.fromURL, explainEnd(why), m.target, err)
	}
	if ordered && seq.started && !seq.lowest {
		fw.tk.below(seq.cur) // groups before it are written, or given up
	}
	resume := fw.tk.resume()
	sub, err := resubscribe(ctx, m, name, resume, wait)
	if err != nil && ctx.Err() == nil && time.Until(m.deadline) > retryPause {
		fw.n.say("%v: trying again", err)
		fw.mv = moveAgain(ctx, fw.f, m)
		return false, nil
	}
	if err != nil {
		if woke {
			return false, fmt.Errorf("moving off %s after its GOAWAY: %w", m.fromURL, err)
		}
		return false, fmt.Errorf("the subscription at %s ended (%v), and moving off it failed: %w", m.fromURL, explainEnd(why), err)
	}
	if m.to == m.from {
		_ = fw.sub.Close() // the session stays: the new subscription is on it
	} else {
		leave(fw.sub, m.from, fw.f.timeout)
	}
	fw.ses, fw.sub, fw.moved, fw.held = m.to, sub, true, nil
	l, has := sub.Largest()
	fw.afterFill, fw.afterFillSet = l.Group, has
	if has && probeEnded(ctx, m.to, name, l) {
		fw.afterFill++
	}
	fw.n.say("moved to %s (%s, %s): subscribed to %s again, from %s on", m.target, transportName(m.to), m.to.Version(), formatTrack(name), loc(resume))
	if !has && fw.tk.any {
		fw.lost++
		fw.n.warn("%s has no objects of %s (no Largest Object): those from %s on that were published meanwhile may be missing", m.target, formatTrack(name), loc(resume))
	}
	fw.mv = watchGoaway(ctx, fw.f, fw.n, m.to, sub, m.target, m.deadline)
	return true, nil
}

// arrived takes an entry of the subscription read after a move, before the
// rest of runSub does: the fill's entries come in order and end the groups
// before them (seq.through), its gaps are objects missing from the copy,
// and an object taken already is dropped. It reports whether the entry is
// done with.
func (fw *follower) arrived(obj moqt.Object, seq *sequencer, ordered bool) (bool, error) {
	if !fw.moved || obj.Incomplete != nil && !errors.Is(obj.Incomplete, moqt.ErrFillFailed) {
		return false, nil
	}
	if errors.Is(obj.Incomplete, moqt.ErrFillFailed) {
		fw.lost++
		fw.n.warn("the fill after the move failed: objects from before the move may be missing (%v)", obj.Incomplete)
		return true, nil
	}
	if ordered && fw.afterFillSet {
		if err := seq.through(min(obj.Location.Group, fw.afterFill), time.Now()); err != nil {
			return true, err
		}
	}
	switch obj.EndOfRange {
	case 0:
		return fw.tk.has(obj.Location), nil
	case wire.EndOfNonExistentRange:
	default:
		fw.lost++
		fw.n.warn("the objects up to %s are missing: after the move, the server %s", loc(obj.Location), gapText(obj.EndOfRange))
	}
	return true, nil
}
