package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

var subCommand = &command{
	name:  "sub",
	args:  "URL NAMESPACE TRACK",
	short: "subscribe to a track and write its objects to stdout",
	long: `
Subscribes to the track NAMESPACE TRACK at URL and writes each object's
payload to stdout, byte for byte, in track order: what moqt pub read is what
moqt sub writes. With -lines it writes a newline after each object, which
gives back the lines moqt pub -lines read (and text tracks such as moqt
clock's, one object a line). Without it, payloads go out back to back, which
gives back what moqt pub -size read.

It starts at the next object published (the Next Object filter). -fill N
joins with the recent past as well: the last N groups (1: the current group
from its start), from the relay's or the publisher's cache, then the live
objects, each once (FILL_PARAMETERS, §3.5). If nobody publishes the track
yet, a relay holds the subscription up to -wait for a publisher to come.

When the server sends GOAWAY (a relay stopping), moqt sub moves to the URL
the GOAWAY names, or to URL again if it names none, trying for up to
-reconnect, and goes on from the first object it has not written: the new
server fills in what it missed, and nothing is written twice. If the new
server does not have those objects, moqt sub says so and fails at the end;
if it cannot be reached, moqt sub fails then. -sha256 takes the pins of
every server it may be sent to, comma-separated. -follow-goaway=false reads
on until the server closes the session.

It exits 0 when the publisher ends the track (TRACK_ENDED), at Ctrl-C, or
after -count objects; otherwise non-zero, saying why, and also at
TRACK_ENDED when objects are missing: a data stream that never came, a
group whose stream ended short (reset) before its End of Group, or a part
of the fill the server did not get in time. -v tells of
each object on stderr, and of subgroups that ended short.

Groups travel on streams of their own and may arrive interleaved; moqt sub
writes each group whole, in order, before the next. It knows a group is
complete by its End of Group object, which moqt pub and moqt clock write;
for a track whose publisher writes none, a group is taken as complete once
nothing more of it has come for 2s (so its output lags by as much), unless
-unordered writes objects as they arrive.

Example:
  moqt sub -sha256 PIN moqt://127.0.0.1:4443/ files report > report.pdf
  moqt sub -lines -fill 1 -sha256 PIN https://127.0.0.1:4443/ clock time`,
	minArgs: 3,
	maxArgs: 3,
	setup:   subSetup,
}

type subOptions struct {
	client    clientFlags
	lines     bool
	fill      uint64
	wait      time.Duration
	verbose   bool
	count     int
	unordered bool
	follow    followOptions
}

func subSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var o subOptions
	o.client.register(fs)
	fs.BoolVar(&o.lines, "lines", false, "write a newline after each object (for moqt pub -lines and text tracks)")
	fs.Uint64Var(&o.fill, "fill", 0, "join with the last `N` groups too (1: the current group from its start); 0 for none")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "how long a relay may hold the subscription for a publisher to come (RENDEZVOUS_TIMEOUT); 0 fails at once")
	fs.BoolVar(&o.verbose, "v", false, "tell of each object on stderr")
	fs.IntVar(&o.count, "count", 0, "exit after `N` objects; 0 for no limit")
	fs.BoolVar(&o.unordered, "unordered", false, "write objects as they arrive, without putting groups that arrive interleaved back in order")
	fs.BoolVar(&o.follow.on, "follow-goaway", true, "when the server sends GOAWAY, go on at the URL it gives (or the same URL), from the first object not written yet")
	fs.DurationVar(&o.follow.timeout, "reconnect", 10*time.Second, "how long moving after GOAWAY may take before moqt sub gives up")
	return func(ctx context.Context, e *env, args []string) error {
		name, err := parseTrack(args[1], args[2])
		if err != nil {
			return err
		}
		n := &narrator{w: e.stderr, prefix: "moqt sub: ", quiet: o.client.quiet}
		sess, err := o.client.dial(ctx, e, args[0], nil)
		if err != nil {
			return err
		}
		defer sess.Close()
		n.say("connected to %s (%s, %s)", args[0], transportName(sess), sess.Version())
		if o.follow.on {
			o.follow.url = args[0]
			o.follow.dial = func(ctx context.Context, url string) (*moqt.Session, error) {
				return o.client.dial(ctx, e, url, nil)
			}
		}
		return runSub(ctx, n, e.stdout, sess, name, &o)
	}
}

// subParams are the SUBSCRIBE's parameters: the Next Object, a fill of the
// last fill groups if fill > 0, a rendezvous of wait.
func subParams(fill uint64, wait time.Duration) wire.Params {
	p := wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())}
	if fill > 0 {
		p.FillParameters = &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(fill))}
	}
	if wait > 0 {
		p.RendezvousTimeout = wire.Some(uint64(wait / time.Millisecond))
	}
	return p
}

// runSub subscribes and writes the objects to out until the track ends.
func runSub(ctx context.Context, n *narrator, out io.Writer, sess *moqt.Session, name wire.FullTrackName, o *subOptions) error {
	// A track no one publishes yet is wanted from its first object: the
	// subscription waits for a publisher (RENDEZVOUS_TIMEOUT), and what
	// was published before its SUBSCRIBE_OK is fetched.
	early := false
	if o.wait > 0 {
		st, err := sess.TrackStatus(ctx, name, wire.Params{})
		var re *moqt.RequestError
		switch {
		case err == nil:
			early = !st.Largest.Set
		case errors.As(err, &re) && (re.Code == wire.ReqDoesNotExist || re.Code == wire.ReqTimeout):
			// TIMEOUT: a relay's announcers did not answer in time (one
			// that never answers, or none Established yet): no publisher
			// yet, as far as this end can tell.
			early = true
			n.say("no one publishes %s yet: waiting up to %s for a publisher, to get the track from its start", formatTrack(name), o.wait)
		case ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("asking about %s (TRACK_STATUS): %w", formatTrack(name), explainRequestError(err))
		}
	}
	fill := o.fill
	if early {
		fill = 0 // the fetch gets the start
	}
	sub, err := sess.Subscribe(ctx, name, subParams(fill, o.wait))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("subscribing to %s: %w", formatTrack(name), explainSubscribeError(err, o.wait))
	}
	largest, hasLargest := sub.Largest()
	switch {
	case !hasLargest:
		n.say("subscribed to %s: nothing published yet, objects from the first on", formatTrack(name))
	case early:
		n.say("subscribed to %s at %s: the objects up to there first (FETCH), then live ones", formatTrack(name), loc(largest))
	case fill > 0:
		n.say("subscribed to %s at %s: the last %d group(s) first, then live ones", formatTrack(name), loc(largest), fill)
	default:
		n.say("subscribed to %s at %s: objects after it", formatTrack(name), loc(largest))
	}

	w := &objectWriter{w: bufio.NewWriter(out), lines: o.lines, limit: o.count}
	seq := newSequencer(w.write)
	// Groups in flight at once may arrive in any order, so the sequencer is
	// told where to start: the track's first group when nothing was
	// published yet (see firstGroup; when it cannot tell, the lowest group
	// to arrive), else the Largest Object's group, or
	// the next one if the Largest was its End of Group. A fill's entries
	// come first, in order: the first of them starts.
	// from is the first object wanted, where a move after GOAWAY resumes
	// if nothing came yet.
	findFirst := !hasLargest
	var from wire.Location
	switch {
	case !hasLargest:
	case early:
	case fill > 0:
		from.Group = largest.Group + 1 - min(fill, largest.Group+1)
		if probeEnded(ctx, sess, name, largest) {
			seq.endedWith(largest.Group)
		}
	case probeEnded(ctx, sess, name, largest):
		seq.begin(largest.Group+1, time.Now())
		from.Group = largest.Group + 1
	default:
		seq.begin(largest.Group, time.Now())
		from = wire.Location{Group: largest.Group, Object: largest.Object + 1}
	}
	tk := newTaken(from)
	fw := newFollower(ctx, o, n, sess, sub, tk)
	defer func() { _ = fw.sub.Close() }()
	short := newShortGroups()
	lateObjects := 0
	// notCome counts the ranges of a fetch or fill that the server did not
	// get in time (END_OF_TIMED_OUT_RANGE: an upstream publisher that did
	// not answer within the fill timeout): objects that exist, missing from
	// the copy.
	notCome := 0
	seq.late = func(obj moqt.Object) {
		if lateObjects++; lateObjects <= 10 || o.verbose {
			n.warn("object %s arrived after later groups were written: written out of order", loc(obj.Location))
		}
	}
	seq.skip = func(g uint64) {
		if o.verbose {
			n.warn("group %d did not end (no End of Group, no more objects for %s): going on with the next group", g, sequenceStall)
		}
	}
	add := seq.add
	if o.unordered {
		add = func(obj moqt.Object, _ time.Time) error { return seq.out(obj) }
	}
	finish := func() error {
		if err := seq.flush(); err != nil && !errors.Is(err, errFull) {
			return err
		}
		if lateObjects > 10 && !o.verbose {
			n.warn("%d objects in all were written out of order", lateObjects)
		}
		return w.w.Flush()
	}

	next := sub.ReadObject
	if early && hasLargest {
		// The live objects wait in memory while the start is fetched, so
		// that the subscription is read on.
		live := readAhead(ctx, sub)
		next = live.next
		last, timedOut, err := fetchStart(ctx, n, sess, name, largest, w, tk.take, o.verbose)
		notCome += timedOut
		switch {
		case err != nil && !errors.Is(err, errFull) && fw.mv != nil && fw.mv.goingAway():
			// The move's fill brings the rest.
			n.warn("fetching the objects through %s was cut after GOAWAY (%v): the next session brings the rest", loc(largest), err)
			seq.begin(tk.resume().Group, time.Now())
		case err != nil && !errors.Is(err, errFull):
			return err
		case last == largest:
			seq.begin(largest.Group, time.Now())
		default: // the Largest Object was its group's End of Group
			seq.begin(largest.Group+1, time.Now())
		}
	}
	for !w.full() {
		obj, err := readObject(fw.readCtx(ctx), next, seq)
		if errors.Is(err, errWake) {
			if err := seq.tick(time.Now()); err != nil {
				return err
			}
			continue
		}
		if woke, due := fw.due(ctx, err); due {
			moved, merr := fw.moveOn(ctx, woke, err, seq, !o.unordered, name, o.wait)
			if merr != nil {
				if ferr := finish(); ferr != nil {
					return ferr
				}
				return fmt.Errorf("after %d objects, %d bytes: %w", w.objects, w.bytes, merr)
			}
			if moved {
				sess, next = fw.ses, fw.sub.ReadObject
				l, _ := fw.sub.Largest()
				short.rejoin(l.Group)
			}
			continue
		}
		if err != nil {
			for _, h := range fw.held {
				if !errors.Is(h.Incomplete, moqt.ErrStreamsMissing) { // PUBLISH_DONE's count tells
					short.incomplete(h.Location.Group, h.Incomplete)
				}
			}
			if ferr := finish(); ferr != nil {
				return ferr
			}
			summary := fmt.Sprintf("%d objects, %d bytes", w.objects, w.bytes)
			var done *moqt.DoneError
			switch {
			case lateObjects > 0 && ctx.Err() == nil:
				// The output is not the track's bytes in order, whatever
				// the end said.
				return fmt.Errorf("after %s (%v): %d objects arrived after later groups were written, and were written out of order", summary, err, lateObjects)
			case ctx.Err() != nil:
				n.say("interrupted: %s", summary)
				return nil
			case errors.As(err, &done) && done.Missing > 0:
				// TRACK_ENDED included: the copy lacks what they carried.
				return fmt.Errorf("the publisher ended the subscription after %s: %s, but %d of the %d data streams it counted never arrived: objects are missing", summary, explainDone(done), done.Missing, done.StreamCount)
			case errors.As(err, &done) && done.Code == wire.DoneTrackEnded && fw.lost > 0:
				return fmt.Errorf("the track ended (TRACK_ENDED) after %s, but %d ranges of the track were not to be had after moving off a server that went away (GOAWAY): objects are missing", summary, fw.lost)
			case errors.As(err, &done) && done.Code == wire.DoneTrackEnded && notCome > 0:
				return fmt.Errorf("the track ended (TRACK_ENDED) after %s, but the server did not get %d ranges of the fill or of the start in time: objects are missing", summary, notCome)
			case errors.As(err, &done) && done.Code == wire.DoneTrackEnded && short.missing() != "":
				return fmt.Errorf("the track ended (TRACK_ENDED) after %s, but the streams of %s ended short, before their End of Group: objects are missing", summary, short.missing())
			case errors.As(err, &done) && done.Code == wire.DoneTrackEnded:
				n.say("the track ended (TRACK_ENDED): %s", summary)
				return nil
			case errors.As(err, &done):
				return fmt.Errorf("the publisher ended the subscription after %s: %s", summary, explainDone(done))
			case sess.Context().Err() != nil:
				return fmt.Errorf("after %s: %w", summary, sessionEnded(sess))
			}
			return fmt.Errorf("the subscription ended after %s: %w", summary, err)
		}
		if done, err := fw.arrived(obj, seq, !o.unordered); done || err != nil {
			if err != nil && !errors.Is(err, errFull) {
				return err
			}
			continue
		}
		if fw.hold(obj) {
			if o.verbose {
				n.warn("group %d (subgroup %d) ended short after GOAWAY: the next session brings the rest (%v)", obj.Location.Group, obj.SubgroupID, obj.Incomplete)
			}
			continue
		}
		switch {
		case errors.Is(obj.Incomplete, moqt.ErrFillFailed):
			n.warn("the fill failed: some of the objects it was to bring may be missing (%v)", obj.Incomplete)
			continue
		case errors.Is(obj.Incomplete, moqt.ErrStreamsMissing):
			// Said now, and failed on at the end that follows.
			n.warn("not every data stream of the subscription arrived: whole groups may be missing (%v)", obj.Incomplete)
			continue
		case obj.Incomplete != nil:
			short.incomplete(obj.Location.Group, obj.Incomplete)
			if o.verbose {
				n.warn("group %d (subgroup %d) ended short: objects may be missing there (%v)", obj.Location.Group, obj.SubgroupID, obj.Incomplete)
			}
			if err := seq.incomplete(obj.Location.Group, time.Now()); err != nil {
				return err
			}
			continue
		case obj.EndOfRange == wire.EndOfTimedOutRange:
			notCome++
			n.warn("the fill's objects up to %s are missing: the server %s", loc(obj.Location), gapText(obj.EndOfRange))
			continue
		case obj.EndOfRange != 0:
			if o.verbose {
				n.say("the fill has no objects up to %s (%s)", loc(obj.Location), obj.EndOfRange)
			}
			continue
		}
		short.object(obj)
		if o.verbose {
			describeObject(n, obj, hasLargest && fill > 0 && !largest.Less(obj.Location))
		}
		if findFirst {
			findFirst = false
			if first, known := firstGroup(ctx, fw.ses, name, obj.Location.Group); known {
				seq.begin(first, time.Now())
			} else {
				if o.verbose {
					n.warn("whether groups before %d exist is not known yet: waiting up to %s for the earliest", obj.Location.Group, sequenceStall)
				}
				seq.beginAtLowest(time.Now())
			}
		}
		tk.take(obj)
		if err := add(obj, time.Now()); err != nil && !errors.Is(err, errFull) {
			return err
		}
	}
	if err := finish(); err != nil {
		return err
	}
	if fw.lost > 0 {
		return fmt.Errorf("%d objects, %d bytes, but %d ranges of the track were not to be had after moving off a server that went away (GOAWAY): objects are missing", w.objects, w.bytes, fw.lost)
	}
	n.say("%d objects, %d bytes: done", w.objects, w.bytes)
	return nil
}

// objectWriter writes payloads out, each followed by a newline if lines,
// up to limit objects if set.
type objectWriter struct {
	w       *bufio.Writer
	lines   bool
	limit   int
	objects int
	bytes   int64
}

// errFull is objectWriter's once it wrote its limit.
var errFull = errors.New("enough objects")

func (ow *objectWriter) full() bool { return ow.limit > 0 && ow.objects >= ow.limit }

func (ow *objectWriter) write(obj moqt.Object) error {
	if ow.full() {
		return errFull
	}
	ow.w.Write(obj.Payload)
	if ow.lines {
		ow.w.WriteByte('\n')
	}
	ow.objects++
	ow.bytes += int64(len(obj.Payload))
	return ow.w.Flush()
}

// liveQueue holds a subscription's objects, read on in the background.
type liveQueue struct {
	ch chan liveItem
}

type liveItem struct {
	obj moqt.Object
	err error
}

// readAhead reads sub's objects into a queue until the subscription ends;
// next returns them. Payloads are copied.
func readAhead(ctx context.Context, sub *moqt.Subscription) *liveQueue {
	q := &liveQueue{ch: make(chan liveItem, 1<<14)}
	go func() {
		for {
			obj, err := sub.ReadObject(ctx)
			obj.Payload = slices.Clone(obj.Payload)
			obj.Properties = slices.Clone(obj.Properties)
			select {
			case q.ch <- liveItem{obj, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return q
}

func (q *liveQueue) next(ctx context.Context) (moqt.Object, error) {
	select {
	case it := <-q.ch:
		if it.err != nil {
			q.ch <- it // every later call gets it too
		}
		return it.obj, it.err
	case <-ctx.Done():
		return moqt.Object{}, ctx.Err()
	}
}

// errWake is readObject's: time to tick the sequencer.
var errWake = errors.New("wake")

// readObject is next, returning errWake once the sequencer needs a tick.
func readObject(ctx context.Context, next func(context.Context) (moqt.Object, error), seq *sequencer) (moqt.Object, error) {
	d := seq.wake(time.Now())
	if d == 0 {
		return next(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	obj, err := next(rctx)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		return obj, errWake
	}
	return obj, err
}

// describeObject tells of one object on stderr.
func describeObject(n *narrator, obj moqt.Object, fill bool) {
	from := ""
	if fill {
		from = " (fill)"
	}
	switch obj.Status {
	case wire.ObjectNormal:
		n.warn("object %s%s: %d bytes", loc(obj.Location), from, len(obj.Payload))
	case wire.ObjectEndOfGroup:
		n.warn("group %d ends%s", obj.Location.Group, from)
	default:
		n.warn("object %s%s: %s", loc(obj.Location), from, obj.Status)
	}
}

// explainSubscribeError says what a refused SUBSCRIBE means.
func explainSubscribeError(err error, wait time.Duration) error {
	var re *moqt.RequestError
	if errors.As(err, &re) {
		switch re.Code {
		case wire.ReqDoesNotExist:
			if wait > 0 {
				return fmt.Errorf("no one publishes it there (DOES_NOT_EXIST: %s)", re.Reason)
			}
			return fmt.Errorf("no one publishes it there yet: start the publisher first, or wait for one with -wait 30s (DOES_NOT_EXIST: %s)", re.Reason)
		case wire.ReqTimeout:
			return fmt.Errorf("no publisher came within -wait %s (TIMEOUT: %s)", wait, re.Reason)
		}
	}
	return explainRequestError(err)
}

// explainDone says what a PUBLISH_DONE means.
func explainDone(d *moqt.DoneError) string {
	why := map[wire.PublishDoneCode]string{
		wire.DoneGoingAway:     "the server or publisher is going away",
		wire.DoneTooFarBehind:  "this subscriber fell too far behind",
		wire.DoneInternalError: "the publisher is gone or failed",
		wire.DoneExpired:       "the subscription expired",
	}[d.Code]
	s := d.Code.String()
	if d.Reason != "" {
		s += ": " + d.Reason
	}
	if why != "" {
		return why + " (" + s + ")"
	}
	return s
}
