package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// publishFlags are the flags pub and clock share.
type publishFlags struct {
	client  clientFlags
	publish bool
	cacheMB int
	follow  followOptions // -follow-goaway, -reconnect; its dial and url are set by startPublisher
}

func (f *publishFlags) register(fs *flag.FlagSet, cacheMB int) {
	f.client.register(fs)
	fs.BoolVar(&f.publish, "publish", false, "offer the track with PUBLISH instead of announcing its namespace (PUBLISH_NAMESPACE)")
	fs.IntVar(&f.cacheMB, "cache", cacheMB, "MiB of recent objects to keep for late joiners (sub -fill) and FETCH; 0 keeps none")
	fs.BoolVar(&f.follow.on, "follow-goaway", true, "when the server sends GOAWAY, publish the track at the URL it gives (or the same URL) and go on there")
	fs.DurationVar(&f.follow.timeout, "reconnect", 10*time.Second, "how long moving after GOAWAY may take before giving up; the old session is kept as long for its subscribers")
}

// publisher is one track published to a relay (or any server): it
// announces the track's namespace and serves SUBSCRIBE, FETCH and
// TRACK_STATUS from a LocalTrack, or offers the track with PUBLISH, and
// narrates its subscribers as they come and go.
type publisher struct {
	n     *narrator
	track *moqt.LocalTrack
	sess  *moqt.Session

	// watched is closed once a subscription asks for objects (Forward 1):
	// someone receives what is written from then on.
	watched     chan struct{}
	watchedOnce sync.Once
	subs        atomic.Int64 // subscriptions served now
	// cut counts the subscriptions this end cut off for falling too far
	// behind (TOO_FAR_BEHIND, EXCESSIVE_LOAD): they lack objects. live
	// holds those not yet narrated as gone, which cutOff checks too.
	mu   sync.Mutex
	cut  int
	live map[*moqt.ServedSubscription]*moqt.Session // with the session each is served on
	// left, once servedOn made it, is closed when a subscription ends;
	// guarded by mu.
	left chan struct{}

	mover // following GOAWAY (pub_follow.go)
}

// startPublisher dials url, makes the track, and announces or offers it.
// With waitForReceiver, a PUBLISH asks for Forward 0: the server's
// REQUEST_UPDATE to Forward 1 tells that someone receives.
func startPublisher(ctx context.Context, e *env, n *narrator, f *publishFlags, url string, name wire.FullTrackName, waitForReceiver bool) (*publisher, error) {
	track, err := moqt.NewLocalTrack(name, nil)
	if err != nil {
		return nil, err
	}
	if f.cacheMB > 0 {
		track.SetCache(moqt.CacheLimits{Bytes: int64(f.cacheMB) << 20})
	}
	p := &publisher{n: n, track: track, watched: make(chan struct{}),
		mover: mover{publish: f.publish, waitForReceiver: waitForReceiver, ending: make(chan struct{})}}
	// Before it exits, the publisher waits for what it wrote to be
	// delivered (Session.Close): a file over a lossy path takes far longer
	// than the library's default 2 s, and a QUIC close would drop the rest.
	// A peer gone ends the wait at once.
	f.client.closeTimeout = publisherCloseTimeout
	sess, err := f.client.dial(ctx, e, url, moqt.HandlerFunc(p.serve))
	if err != nil {
		return nil, err
	}
	p.sess = sess
	n.say("connected to %s (%s, %s)", url, transportName(sess), sess.Version())
	if err := p.offer(ctx, sess); err != nil {
		_ = sess.Close()
		return nil, err
	}
	if f.follow.on {
		p.followGoaway(ctx, e, f, url)
	}
	return p, nil
}

// offer announces the track's namespace on sess, or offers the track
// with PUBLISH.
func (p *publisher) offer(ctx context.Context, sess *moqt.Session) error {
	name := p.track.Name()
	if p.publish {
		var params wire.Params
		if p.waitForReceiver && !p.isWatched() {
			params.Forward = wire.Some(false)
		}
		ss, err := p.track.Publish(ctx, sess, params, moqt.AcceptOptions{OnUpdate: p.onUpdate})
		if err != nil {
			return fmt.Errorf("offering %s with PUBLISH: %w", formatTrack(name), explainRequestError(err))
		}
		p.n.say("offered track %s with PUBLISH: accepted", formatTrack(name))
		p.joined(ss, sess, "the server took the track")
		return nil
	}
	if _, err := sess.PublishNamespace(ctx, name.Namespace, wire.Params{}); err != nil {
		return fmt.Errorf("announcing namespace %s: %w", formatNamespace(name.Namespace), explainRequestError(err))
	}
	p.n.say("announced namespace %s (PUBLISH_NAMESPACE); serving track %s", formatNamespace(name.Namespace), formatTrack(name))
	return nil
}

// serve answers the server's requests for the track.
func (p *publisher) serve(r moqt.Request) {
	switch r := r.(type) {
	case *moqt.SubscribeRequest:
		if !r.Track.Equal(p.track.Name()) {
			_ = r.Reject(wire.ReqDoesNotExist, "no such track")
			return
		}
		ss, err := p.track.Accept(r, moqt.AcceptOptions{OnUpdate: p.onUpdate})
		if err != nil {
			p.n.warn("refused a subscription: %v", err)
			return
		}
		p.joined(ss, r.Session(), "a subscriber joined")
	case *moqt.FetchRequest:
		if !r.Track.Equal(p.track.Name()) {
			_ = r.Reject(wire.ReqDoesNotExist, "no such track")
			return
		}
		if err := p.track.Fetch(r); err != nil {
			p.n.warn("a FETCH failed: %v", err)
			return
		}
		p.n.say("served a FETCH from the cache")
	case *moqt.TrackStatusRequest:
		if !r.Track.Equal(p.track.Name()) {
			_ = r.Reject(wire.ReqDoesNotExist, "no such track")
			return
		}
		_ = p.track.Status(r)
	default:
		moqt.DefaultHandler.ServeMOQT(r)
	}
}

// joined narrates a subscription, served on sess, from its start to its end.
func (p *publisher) joined(ss *moqt.ServedSubscription, sess *moqt.Session, what string) {
	n := p.subs.Add(1)
	if ss.Forward() {
		p.n.say("%s (%d now)", what, n)
		p.markWatched()
	} else {
		p.n.say("%s, paused: no one receives it yet (%d now)", what, n)
	}
	p.mu.Lock()
	if p.live == nil {
		p.live = map[*moqt.ServedSubscription]*moqt.Session{}
	}
	p.live[ss] = sess
	p.mu.Unlock()
	context.AfterFunc(ss.Context(), func() {
		left := p.subs.Add(-1)
		p.mu.Lock()
		delete(p.live, ss)
		done, cut := cutOffBy(ss)
		if cut {
			p.cut++
		}
		if p.left != nil {
			close(p.left)
			p.left = nil // made again by servedOn
		}
		p.mu.Unlock()
		if cut {
			p.n.warn("a subscriber fell too far behind and was cut off, lacking objects (%s: %s) (%d now)", done.Code, done.Reason, left)
			return
		}
		p.n.say("a subscriber left (%d now)", left)
	})
}

// cutOffBy reports whether this end cut ss off for falling too far behind,
// and how it told it.
func cutOffBy(ss *moqt.ServedSubscription) (*moqt.DoneError, bool) {
	var done *moqt.DoneError
	if errors.As(ss.Err(), &done) && (done.Code == wire.DoneTooFarBehind || done.Code == wire.DoneExcessiveLoad) {
		return done, true
	}
	return nil, false
}

// cutOff fails when subscriptions were cut off for falling too far behind:
// what was written did not reach them all. Those whose end is not
// narrated yet are looked at too.
func (p *publisher) cutOff() error {
	p.mu.Lock()
	k := p.cut
	for ss := range p.live {
		if _, cut := cutOffBy(ss); cut {
			k++
		}
	}
	p.mu.Unlock()
	if k > 0 {
		return fmt.Errorf("%d subscriber(s) fell too far behind and were cut off: they lack objects (through a relay, so do its subscribers)", k)
	}
	return nil
}

// onUpdate narrates the Forward state a relay sets as its own subscribers
// come and go.
func (p *publisher) onUpdate(_ *moqt.ServedSubscription, u *wire.Params) error {
	if u.Forward.Set {
		if u.Forward.Value {
			p.n.say("a subscriber is receiving")
			p.markWatched()
		} else {
			p.n.say("paused: no subscriber receives now")
		}
	}
	return nil
}

func (p *publisher) markWatched() { p.watchedOnce.Do(func() { close(p.watched) }) }

// isWatched reports whether a subscription has asked for objects.
func (p *publisher) isWatched() bool {
	select {
	case <-p.watched:
		return true
	default:
		return false
	}
}

// waitWatched waits for a subscriber that receives.
func (p *publisher) waitWatched(ctx context.Context) error {
	return p.await(ctx, p.watched, nil)
}

// settle waits d, unless ctx or the session ends first.
func (p *publisher) settle(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	return p.await(ctx, nil, t.C)
}

// await waits for ready or timer, following GOAWAY meanwhile, unless ctx
// or the session ends first.
func (p *publisher) await(ctx context.Context, ready <-chan struct{}, timer <-chan time.Time) error {
	for {
		select {
		case <-ready:
			return nil
		case <-timer:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-p.moved():
			if err := p.moveOn(ctx); err != nil {
				return err
			}
		case <-p.sessionDone():
			if !p.moving() {
				return sessionEnded(p.sess)
			}
		}
	}
}

// publisherCloseTimeout bounds how long a publisher waits, as it exits, for
// the relay to confirm what it sent.
const publisherCloseTimeout = time.Minute

// end ends the track with code, TRACK_ENDED only when the publisher chose
// to end it (the end of its input, or Ctrl-C): a subscriber told GOING_AWAY
// or INTERNAL_ERROR knows its copy may be short. It then closes the
// session, which first delivers what was written; when the server did not
// confirm that in time (or the connection was lost meanwhile), what was
// still in flight is lost, and end fails so that the command does.
func (p *publisher) end(code wire.PublishDoneCode, reason string) error {
	p.track.End(code, reason)
	p.letGo() // sessions left after a GOAWAY deliver what they were sent, and close
	defer p.retiring.Wait()
	if err := p.sess.Close(); err != nil {
		return fmt.Errorf("the server did not confirm that it received everything written, so subscribers may lack the end of the track: %w", err)
	}
	return nil
}

// sessionEnded explains why a session ended under a command.
func sessionEnded(s *moqt.Session) error {
	cause := context.Cause(s.Context())
	var se *moqt.SessionError
	if errors.As(cause, &se) && se.Transport != nil {
		return fmt.Errorf("the connection was lost: %w", cause)
	}
	if errors.As(cause, &se) && se.Remote {
		return fmt.Errorf("the server closed the session: %w", cause)
	}
	return fmt.Errorf("the session ended: %w", cause)
}

// explainRequestError says what a refused request means.
func explainRequestError(err error) error {
	var re *moqt.RequestError
	if !errors.As(err, &re) {
		return err
	}
	switch re.Code {
	case wire.ReqDoesNotExist:
		return fmt.Errorf("no such track there (DOES_NOT_EXIST: %s)", re.Reason)
	case wire.ReqUnauthorized:
		return fmt.Errorf("not allowed (UNAUTHORIZED: %s)", re.Reason)
	case wire.ReqTimeout:
		return fmt.Errorf("no publisher came in time (TIMEOUT: %s)", re.Reason)
	}
	return err
}

// groupWriter writes a track's objects group by group: one subgroup per
// group, objects numbered from the group's first, and an End of Group
// status object at its end (§11.1.1.1), so a subscriber knows it is
// complete and can put groups that arrive interleaved back in order.
type groupWriter struct {
	track *moqt.LocalTrack
	w     *moqt.SubgroupWriter // the open group; nil between groups
	group uint64               // the open group's ID, or the next one's
	next  uint64               // the next Object ID in the open group

	objects, groups int // written so far
	bytes           int64
}

// open opens group id, its first object first.
func (g *groupWriter) open(id, first uint64) {
	g.group, g.next = id, first
	g.w = g.track.OpenSubgroup(id, 0, moqt.SubgroupOptions{EndOfGroup: true})
	g.groups++
}

// write writes an object to the open group, opening group g.group if none
// is.
func (g *groupWriter) write(payload []byte) error {
	if g.w == nil {
		g.open(g.group, 0)
	}
	err := g.w.WriteObject(moqt.Object{Location: wire.Location{Group: g.group, Object: g.next}, Payload: payload})
	if err != nil {
		return err
	}
	g.next++
	g.objects++
	g.bytes += int64(len(payload))
	return nil
}

// inGroup reports whether a group is open.
func (g *groupWriter) inGroup() bool { return g.w != nil }

// endGroup ends the open group with End of Group and makes the next group
// the one after it.
func (g *groupWriter) endGroup() error {
	if g.w == nil {
		return nil
	}
	w := g.w
	g.w = nil
	err := w.WriteObject(moqt.Object{Location: wire.Location{Group: g.group, Object: g.next}, Status: wire.ObjectEndOfGroup})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	g.group++
	return err
}
