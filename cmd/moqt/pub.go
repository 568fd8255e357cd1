package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/moqt-go/moqt/wire"
)

var pubCommand = &command{
	name:  "pub",
	args:  "URL NAMESPACE TRACK",
	short: "publish stdin (or a file) as a track, cut into objects",
	long: `
Publishes its input, stdin or -file, as the track NAMESPACE TRACK, through
the relay (or other server) at URL.

The input is cut into objects of -size bytes, or with -lines into one object
per line (the newline itself is not sent: moqt sub -lines puts it back, so a
last line without a newline gains one). Objects are gathered in groups: one
per -group-interval (a second by default), or of -group-objects objects,
whichever ends first. A group is the unit late joiners start from (moqt sub
-fill 1 gets the current group from its start); each travels on a stream of
its own, so a file read in a burst is best sent in few groups. Group IDs count
from -first-group. Each group ends with an End of Group object, which tells
subscribers it is complete.

By default it announces NAMESPACE (PUBLISH_NAMESPACE) and the relay
subscribes when someone wants the track; -publish offers the track with
PUBLISH instead. Either way it waits for a first subscriber before it reads
its input, so that nothing is published to no one: start moqt pub or moqt sub
first, as you like (-wait=false reads at once; what no one receives then
stays only in the cache). The most recent -cache MiB of objects are kept, so
that late joiners (moqt sub -fill) and moqt fetch can get them.

When the server sends GOAWAY (a relay stopping), moqt pub connects to the
URL the GOAWAY names, or to URL again if it names none, trying for up to
-reconnect, announces or offers the track there as it did at first, and
writes on: the next objects, groups numbered on, and what it wrote
meanwhile is in its cache for the new server to fetch. The old session keeps
receiving objects until its subscriptions end, or for -reconnect, and is then
closed once it has delivered them. If it cannot move, moqt pub ends the track
with GOING_AWAY and fails, saying why. -sha256 takes the pins of every server
it may be sent to, comma-separated. -follow-goaway=false ends the track at the
GOAWAY instead.

At the end of its input, or at Ctrl-C, it ends the track (subscribers are
told TRACK_ENDED), delivers what it wrote, and exits. Ctrl-C in the middle
of a group reads on to the group's end (within a second), so that another
publisher of the track, fed the same input, agrees with it on where the
group ends. It narrates on stderr:
connected, announced, subscribers coming and going, ended.

Example:
  moqt pub -sha256 PIN moqt://127.0.0.1:4443/ files report < report.pdf
  tail -f app.log | moqt pub -lines -group-interval 1s -sha256 PIN moqt://127.0.0.1:4443/ logs app`,
	minArgs: 3,
	maxArgs: 3,
	setup:   pubSetup,
}

func pubSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var o pubOptions
	o.flags.register(fs, 64)
	fs.StringVar(&o.file, "file", "", "publish this `file` instead of stdin")
	fs.IntVar(&o.size, "size", 16<<10, "bytes per object (the last one may be shorter)")
	fs.BoolVar(&o.lines, "lines", false, "one object per line, without its newline")
	fs.IntVar(&o.groupObjects, "group-objects", 0, "objects per group; 0 for no limit")
	fs.DurationVar(&o.groupInterval, "group-interval", time.Second, "start a new group this often; 0 for never")
	fs.Uint64Var(&o.firstGroup, "first-group", 0, "the first group's ID (a publisher that takes over a track goes on from its last)")
	fs.BoolVar(&o.wait, "wait", true, "wait for a first subscriber before reading the input")
	return func(ctx context.Context, e *env, args []string) error {
		if o.size <= 0 {
			return usagef("-size must be positive")
		}
		if o.groupObjects < 0 {
			return usagef("-group-objects must not be negative")
		}
		if o.groupObjects == 0 && o.groupInterval <= 0 {
			return usagef("-group-objects 0 needs a -group-interval")
		}
		name, err := parseTrack(args[1], args[2])
		if err != nil {
			return err
		}
		in := e.stdin
		if o.file != "" {
			f, err := os.Open(o.file)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		n := &narrator{w: e.stderr, prefix: "moqt pub: ", quiet: o.flags.client.quiet}
		p, err := startPublisher(ctx, e, n, &o.flags, args[0], name, o.wait)
		if err != nil {
			return err
		}
		return runPub(ctx, n, p, in, &o)
	}
}

type pubOptions struct {
	flags         publishFlags
	file          string
	size          int
	lines         bool
	groupObjects  int
	groupInterval time.Duration
	firstGroup    uint64
	wait          bool
}

// subscribeSettle is how long moqt pub waits, once a subscriber came,
// before it reads its input.
const subscribeSettle = 250 * time.Millisecond

// chunk is one object's payload read from the input, or the input's end.
type chunk struct {
	payload []byte
	err     error // io.EOF at the end
}

// runPub publishes what in holds and ends the track.
func runPub(ctx context.Context, n *narrator, p *publisher, in io.Reader, o *pubOptions) error {
	source := "stdin"
	if o.file != "" {
		source = o.file
	}
	if o.wait {
		n.say("waiting for a subscriber before reading %s", source)
		err := p.waitWatched(ctx)
		if err == nil {
			// A relay asks for objects (Forward 1) just before it answers
			// the SUBSCRIBE that made it ask; what is written meanwhile
			// reaches that subscriber only by FETCH. A moment's wait lets
			// the answer go first, so that everything reaches it live.
			err = p.settle(ctx, subscribeSettle)
		}
		if err != nil {
			if ctx.Err() != nil {
				n.say("interrupted: ending the track")
				return p.end(wire.DoneTrackEnded, "publisher stopped")
			}
			_ = p.sess.Close()
			return err
		}
	}
	n.say("reading %s", source)
	chunks := make(chan chunk)
	// The input is read on after an interrupt, to the open group's end.
	readCtx, stopReading := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReading()
	go readChunks(readCtx, in, o.size, o.lines, chunks)

	g := &groupWriter{track: p.track, group: o.firstGroup}
	var tick <-chan time.Time
	if o.groupInterval > 0 {
		t := time.NewTicker(o.groupInterval)
		defer t.Stop()
		tick = t.C
	}
	var lastLineBare bool
	// An interrupt ends the track at the open group's end, within
	// finishWait (stopping): see interrupted.
	interrupt := ctx.Done()
	var stopping <-chan time.Time
	interrupted := func() error {
		n.say("interrupted: %s; ending the track", g.summary())
		_ = g.endGroup()
		if err := p.end(wire.DoneTrackEnded, "publisher stopped"); err != nil {
			return err
		}
		n.say("ended")
		return nil
	}
	for {
		if stopping != nil && !g.inGroup() {
			return interrupted()
		}
		select {
		case c := <-chunks:
			if c.err != nil {
				if !errors.Is(c.err, io.EOF) {
					_ = g.endGroup()
					_ = p.end(wire.DoneInternalError, "publisher failed")
					return fmt.Errorf("reading %s: %w", source, c.err)
				}
				if err := g.endGroup(); err != nil {
					return err
				}
				if o.lines && lastLineBare {
					n.say("the last line had no newline: moqt sub -lines will write one")
				}
				n.say("end of %s: %s; ending the track", source, g.summary())
				endErr := p.end(wire.DoneTrackEnded, "end of input")
				if err := p.cutOff(); err != nil {
					return errors.Join(err, endErr)
				}
				if endErr != nil {
					return endErr
				}
				n.say("ended")
				return nil
			}
			lastLineBare = len(c.payload) > 0 && c.payload[len(c.payload)-1] != '\n'
			if o.lines {
				c.payload = bytes.TrimSuffix(c.payload, []byte{'\n'})
			}
			if err := g.write(c.payload); err != nil {
				_ = p.end(wire.DoneInternalError, "publisher failed")
				return fmt.Errorf("writing object %d:%d: %w", g.group, g.next, err)
			}
			if o.groupObjects > 0 && int(g.next) >= o.groupObjects {
				if err := g.endGroup(); err != nil {
					return err
				}
			}
		case <-tick:
			if g.inGroup() {
				if err := g.endGroup(); err != nil {
					return err
				}
			}
		case <-p.goaway():
			n.say("the server is shutting down (GOAWAY): ending the track")
			_ = g.endGroup()
			_ = p.end(wire.DoneGoingAway, "server going away")
			return errors.New("the server went away before the end of the input")
		case <-p.moved():
			if err := p.moveOn(ctx); err != nil {
				_ = g.endGroup()
				_ = p.end(wire.DoneGoingAway, "server going away")
				return err
			}
		case <-p.sessionDone():
			if !p.moving() {
				return sessionEnded(p.sess)
			}
		case <-interrupt:
			// Ending the open group where it stands would say it ends
			// there (End of Group): another publisher of the track, fed
			// the same input, goes on, and a relay then drops its
			// objects past that end (§2.1). So it ends at its own end
			// (§11.3.2: streams SHOULD end on group boundaries), or
			// where it stands after finishWait.
			interrupt = nil
			stopping = time.After(finishWait)
		case <-stopping:
			return interrupted()
		}
	}
}

// finishWait bounds how long an interrupted moqt pub or moqt clock goes on
// to the end of the open group.
const finishWait = time.Second

// summary says what was written.
func (g *groupWriter) summary() string {
	return fmt.Sprintf("%d objects (%d bytes) in %d groups", g.objects, g.bytes, g.groups)
}

// readChunks sends in's objects to out, then its end: chunks of size
// bytes, or lines (with their newline, if any).
func readChunks(ctx context.Context, in io.Reader, size int, lines bool, out chan<- chunk) {
	br := bufio.NewReaderSize(in, max(size, 64<<10))
	for {
		var c chunk
		if lines {
			c.payload, c.err = br.ReadBytes('\n')
			if errors.Is(c.err, io.EOF) && len(c.payload) > 0 {
				c.err = nil // the last line, without a newline
			}
		} else {
			buf := make([]byte, size)
			k, err := io.ReadFull(br, buf)
			c.payload = buf[:k]
			switch {
			case errors.Is(err, io.ErrUnexpectedEOF):
			case err != nil:
				c.err = err
			}
		}
		select {
		case out <- c:
		case <-ctx.Done():
			return
		}
		if c.err != nil {
			return
		}
	}
}
