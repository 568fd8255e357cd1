package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// mover is how moqt pub and moqt clock follow GOAWAY (§6.6.1, §7.5.1):
// on the control stream's GOAWAY they dial the New Session URI, or the URL
// they used when the GOAWAY carries none (§9.2), offer the track there as
// they did at first, and go on writing: the LocalTrack serves the
// subscriptions of both sessions, so the old one goes on receiving
// objects until its subscriptions end (its subscribers moved, or the
// server closed it), or for -reconnect, and is then closed, delivering
// what it was sent. The dial, its retries and its deadline are moqt sub's
// (sub_follow.go).
type mover struct {
	publish, waitForReceiver bool // how offer offers the track

	follow *followOptions // nil: GOAWAY is not followed
	ctx    context.Context
	stop   context.CancelFunc // ends ctx: no GOAWAY is followed after letGo
	mv     *move              // the current session's; nil when not following
	// ending is closed by letGo: the sessions kept after their GOAWAY
	// close now.
	ending   chan struct{}
	retiring sync.WaitGroup // the goroutines that close those sessions
}

// followGoaway watches the session dialed at url for GOAWAY, to move the
// track as f.follow says.
func (p *publisher) followGoaway(ctx context.Context, e *env, f *publishFlags, url string) {
	fo := f.follow
	fo.url = url
	fo.dial = func(ctx context.Context, url string) (*moqt.Session, error) {
		return f.client.dial(ctx, e, url, moqt.HandlerFunc(p.serve))
	}
	p.follow = &fo
	p.ctx, p.stop = context.WithCancel(ctx)
	p.mv = watchGoaway(p.ctx, p.follow, p.n, p.sess, nil, url, time.Time{})
}

// goaway is the session's GOAWAY when it is not followed, else nil.
func (p *publisher) goaway() <-chan struct{} {
	if p.follow != nil {
		return nil
	}
	return p.sess.GoingAway()
}

// moved is closed once a move's dial is done; nil when not following.
func (p *publisher) moved() <-chan struct{} {
	if p.mv == nil {
		return nil
	}
	return p.mv.done
}

// moving reports whether the session sent GOAWAY and a move is under way.
func (p *publisher) moving() bool { return p.mv != nil && p.mv.goingAway() }

// sessionDone is the session's end, unless a move is under way: the
// session a GOAWAY came on may close before the dial is done, and the
// track goes on (into the cache) meanwhile.
func (p *publisher) sessionDone() <-chan struct{} {
	if p.moving() {
		return nil
	}
	return p.sess.Context().Done()
}

// moveOn moves the track to the session the move dialed: it offers the
// track there, within the move's deadline, and keeps the old session for
// its subscriptions (retire).
// When the offer fails (a server itself draining refuses it, GOING_AWAY),
// the move is tried again, to the URI of that server's GOAWAY if it sent
// one, until its deadline. It fails once the move cannot be done.
func (p *publisher) moveOn(ctx context.Context) error {
	m := p.mv
	if ctx.Err() != nil {
		p.mv = nil // interrupted: the caller sees ctx
		return nil
	}
	if m.err != nil {
		return fmt.Errorf("the server at %s went away (GOAWAY), and moving to %s failed: %w", m.fromURL, m.target, m.err)
	}
	octx, cancel := context.WithDeadline(ctx, m.deadline)
	err := p.offer(octx, m.to)
	cancel()
	if err != nil {
		_ = m.to.CloseWithError(wire.NoError, "") // nothing was written there
		again := *m
		if uri := m.to.GoawayURI(); uri != "" {
			again.target = uri
		}
		if ctx.Err() == nil && time.Until(m.deadline) > retryPause {
			p.n.say("%v at %s: trying %s again", err, m.target, again.target)
			p.mv = moveAgain(p.ctx, p.follow, &again)
			return nil
		}
		return fmt.Errorf("the server at %s went away (GOAWAY), and publishing at %s failed: %w", m.fromURL, m.target, err)
	}
	p.retire(m.from)
	p.sess = m.to
	p.n.say("moved to %s (%s, %s): publishing %s there, going on from where it was", m.target, transportName(m.to), m.to.Version(), formatTrack(p.track.Name()))
	p.mv = watchGoaway(p.ctx, p.follow, p.n, m.to, nil, m.target, time.Time{})
	return nil
}

// retire keeps old, a session that sent GOAWAY, until the subscriptions
// served on it end (§7.5.1: the publisher stops publishing there once
// they moved), it ends, -reconnect passes, or the publisher ends; then
// closes it, which delivers what it was sent.
func (p *publisher) retire(old *moqt.Session) {
	p.retiring.Go(func() {
		t := time.NewTimer(p.follow.timeout)
		defer t.Stop()
	wait:
		for {
			on, left := p.servedOn(old)
			if !on {
				break
			}
			select {
			case <-left:
			case <-old.Context().Done():
				break wait
			case <-p.ending:
				break wait
			case <-t.C:
				p.n.say("the old session's subscribers did not leave within %s: closing it", timeText(p.follow.timeout))
				break wait
			}
		}
		_ = old.Close()
	})
}

// servedOn reports whether a subscription served on sess is open, and
// returns a channel closed when one ends.
func (p *publisher) servedOn(sess *moqt.Session) (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.left == nil {
		p.left = make(chan struct{})
	}
	for _, s := range p.live {
		if s == sess {
			return true, p.left
		}
	}
	return false, p.left
}

// letGo stops following GOAWAY and has the sessions kept after theirs
// close now.
func (p *publisher) letGo() {
	if p.stop != nil {
		p.stop()
	}
	if p.ending == nil {
		return // a publisher made without startPublisher keeps no session
	}
	select {
	case <-p.ending:
	default:
		close(p.ending)
	}
}
