package main

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/moqt-go/moqt/wire"
)

var clockCommand = &command{
	name:  "clock",
	args:  "URL [NAMESPACE TRACK]",
	short: "publish a clock: a group each second, an object each tick, the time as text",
	long: `
Publishes a clock as the track NAMESPACE TRACK (default: clock time): a group
each second, whose ID is the Unix time in seconds, and an object each tick
(-ticks a second, numbered from 0 in each group), whose payload is the time
as text, such as 2026-01-02T15:04:05.3Z. It starts at the next whole second.

Because group IDs are the time, a clock that restarts goes on where the last
one stopped: a relay's subscribers keep receiving from the new one. Recent
objects are cached, so late joiners can start from the current group
(moqt sub -fill 1).

When the server sends GOAWAY, it moves to the URL the GOAWAY names (or URL
again) and ticks on there, as moqt pub does (-follow-goaway, -reconnect).

It runs until Ctrl-C (or for -duration), then ends the track at the end of
the second's group: subscribers are told TRACK_ENDED.

Example:
  moqt clock -sha256 PIN moqt://127.0.0.1:4443/
  moqt sub -lines -sha256 PIN moqt://127.0.0.1:4443/ clock time`,
	minArgs: 1,
	maxArgs: 3,
	setup:   clockSetup,
}

type clockOptions struct {
	flags    publishFlags
	ticks    int
	duration time.Duration
	verbose  bool
}

func clockSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var o clockOptions
	o.flags.register(fs, 8)
	fs.IntVar(&o.ticks, "ticks", 10, "objects a second (1 to 1000)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long; 0 runs until Ctrl-C")
	fs.BoolVar(&o.verbose, "v", false, "tell of each group on stderr")
	return func(ctx context.Context, e *env, args []string) error {
		if len(args) == 2 {
			return usagef("name both NAMESPACE and TRACK, or neither")
		}
		if o.ticks < 1 || o.ticks > 1000 {
			return usagef("-ticks must be from 1 to 1000")
		}
		ns, track := "clock", "time"
		if len(args) == 3 {
			ns, track = args[1], args[2]
		}
		name, err := parseTrack(ns, track)
		if err != nil {
			return err
		}
		n := &narrator{w: e.stderr, prefix: "moqt clock: ", quiet: o.flags.client.quiet}
		if o.duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.duration)
			defer cancel()
		}
		p, err := startPublisher(ctx, e, n, &o.flags, args[0], name, false)
		if err != nil {
			return err
		}
		n.say("publishing %s: a group each second (its ID the Unix time), %d objects a group, each the time as text", formatTrack(name), o.ticks)
		var onGroup func(uint64)
		if o.verbose {
			onGroup = func(g uint64) { n.say("group %d", g) }
		}
		err = runClock(ctx, p, o.ticks, clockHooks{group: onGroup})
		if err != nil {
			return err
		}
		n.say("stopped: the track ended")
		return nil
	}
}

// clockHooks let the demo watch a clock.
type clockHooks struct {
	group  func(id uint64)       // a group begins
	object func(l wire.Location) // an object was written
	ending func()                // the clock stops: the track is about to end
}

// runClock writes the clock's objects until ctx ends, then ends the track
// and closes the session. Errors are the session's.
func runClock(ctx context.Context, p *publisher, ticks int, h clockHooks) error {
	tick := time.Second / time.Duration(ticks)
	layout := "2006-01-02T15:04:05.0Z07:00"
	switch {
	case ticks > 100:
		layout = "2006-01-02T15:04:05.000Z07:00"
	case ticks > 10:
		layout = "2006-01-02T15:04:05.00Z07:00"
	}
	g := &groupWriter{track: p.track}
	// The first tick is the next whole second: a group from its start,
	// and never one a clock before this one wrote.
	next := time.Now().Truncate(time.Second).Add(time.Second)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	stop := func(code wire.PublishDoneCode, reason string) error {
		if h.ending != nil {
			h.ending()
		}
		_ = g.endGroup()
		return p.end(code, reason)
	}
	// An interrupt ends the track at the end of the second's group, not
	// where it stands (see runPub's interrupt): within a second.
	interrupt := ctx.Done()
	stopping := false
	for {
		select {
		case <-interrupt:
			if !g.inGroup() {
				return stop(wire.DoneTrackEnded, "clock stopped")
			}
			interrupt, stopping = nil, true
			continue
		case <-p.goaway():
			_ = stop(wire.DoneGoingAway, "server going away")
			return errors.New("the server is shutting down (GOAWAY)")
		case <-p.moved():
			if err := p.moveOn(ctx); err != nil {
				_ = stop(wire.DoneGoingAway, "server going away")
				return err
			}
			continue
		case <-p.sessionDone():
			if !p.moving() {
				return sessionEnded(p.sess)
			}
			continue
		case <-timer.C:
		}
		now := next
		group, object := uint64(now.Unix()), uint64(now.Nanosecond())/uint64(tick)
		if !g.inGroup() || g.group != group {
			if stopping {
				return stop(wire.DoneTrackEnded, "clock stopped")
			}
			if err := g.endGroup(); err != nil {
				return err
			}
			g.open(group, object)
			if h.group != nil {
				h.group(group)
			}
		}
		g.next = object
		if err := g.write([]byte(now.UTC().Format(layout))); err != nil {
			return err
		}
		if h.object != nil {
			h.object(wire.Location{Group: group, Object: object})
		}
		// The next tick; ticks missed (a stalled machine) are skipped.
		next = next.Add(tick)
		if late := time.Now(); next.Before(late) {
			next = late.Truncate(tick).Add(tick)
		}
		timer.Reset(time.Until(next))
	}
}
