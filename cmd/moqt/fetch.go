package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

var fetchCommand = &command{
	name:  "fetch",
	args:  "URL NAMESPACE TRACK",
	short: "get a past range of a track (FETCH) and write it to stdout",
	long: `
Asks for a past range of the track NAMESPACE TRACK (FETCH) and writes its
objects' payloads to stdout, in order, as moqt sub does (-lines: a newline
after each). The range is -from G:O through -to G:O, both included (GROUP:
OBJECT; -to G is the whole of group G); without -to, up to the track's
Largest Object, as TRACK_STATUS reports it. What the server does not have
(the objects do not exist, or they are no longer cached) is told on stderr.
Objects the server did not get in time (a relay whose publisher did not
answer within its fill timeout) are told too, and make it exit non-zero:
the copy lacks objects that exist.

Example:
  moqt fetch -sha256 PIN moqt://127.0.0.1:4443/ files report -from 0:0 -to 2 > start.bin`,
	minArgs: 3,
	maxArgs: 3,
	setup:   fetchSetup,
}

func fetchSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var client clientFlags
	client.register(fs)
	from := fs.String("from", "0:0", "the first object of the range, `GROUP:OBJECT`")
	to := fs.String("to", "", "the last object of the range, `GROUP:OBJECT`, or GROUP for the whole group; default the Largest Object")
	lines := fs.Bool("lines", false, "write a newline after each object")
	verbose := fs.Bool("v", false, "tell of each object on stderr")
	return func(ctx context.Context, e *env, args []string) error {
		name, err := parseTrack(args[1], args[2])
		if err != nil {
			return err
		}
		start, err := parseLocation(*from)
		if err != nil {
			return usagef("-from: %v", err)
		}
		var filter wire.LocationFilter
		switch {
		case *to == "":
		case strings.Contains(*to, ":"):
			end, err := parseLocation(*to)
			if err != nil {
				return usagef("-to: %v", err)
			}
			filter = wire.RangeFilterToObject(start, end)
		default:
			end, err := parseLocation(*to)
			if err != nil {
				return usagef("-to: %v", err)
			}
			filter = wire.RangeFilterTo(start, end.Group)
		}
		n := &narrator{w: e.stderr, prefix: "moqt fetch: ", quiet: client.quiet}
		sess, err := client.dial(ctx, e, args[0], nil)
		if err != nil {
			return err
		}
		defer sess.Close()
		if *to == "" {
			st, err := sess.TrackStatus(ctx, name, wire.Params{})
			if err != nil {
				return fmt.Errorf("asking for the track's Largest Object (TRACK_STATUS): %w", explainRequestError(err))
			}
			if !st.Largest.Set {
				return errors.New("the track has no objects yet")
			}
			filter = wire.RangeFilterToObject(start, st.Largest.Value)
		}
		end := wire.Location{Group: filter.EndGroup, Object: filter.EndObject}
		if filter.Fields == 3 {
			n.say("fetching %s from %s through group %d", formatTrack(name), loc(start), end.Group)
		} else {
			n.say("fetching %s from %s through %s", formatTrack(name), loc(start), loc(end))
		}
		return runFetch(ctx, n, e.stdout, sess, name, filter, *lines, *verbose)
	}
}

func runFetch(ctx context.Context, n *narrator, out io.Writer, sess *moqt.Session, name wire.FullTrackName, filter wire.LocationFilter, lines, verbose bool) error {
	f, err := sess.Fetch(ctx, name, wire.Params{LocationFilter: wire.Some(filter)})
	if err != nil {
		var re *moqt.RequestError
		if errors.As(err, &re) && re.Code == wire.ReqInvalidRange {
			return fmt.Errorf("the server has no such range (INVALID_RANGE: %s)", re.Reason)
		}
		return fmt.Errorf("FETCH: %w", explainRequestError(err))
	}
	defer f.Close()
	w := bufio.NewWriter(out)
	defer w.Flush()
	// timedOut counts the ranges the server did not get in time
	// (END_OF_TIMED_OUT_RANGE): objects that exist, missing from the copy.
	var objects, gaps, timedOut int
	var bytes int64
	prev := wire.Location{Group: filter.StartGroup, Object: filter.StartObject}
	first := true
	for {
		obj, err := f.ReadObject(ctx)
		if errors.Is(err, io.EOF) {
			end := ""
			if f.EndOfTrack {
				end = "; the track ends there"
			}
			n.say("%d objects, %d bytes, %d gaps%s", objects, bytes, gaps, end)
			if err := w.Flush(); err != nil {
				return err
			}
			if timedOut > 0 {
				return fmt.Errorf("%d ranges did not come in time: objects are missing (ask again)", timedOut)
			}
			return nil
		}
		if err != nil {
			_ = w.Flush()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("after %d objects: %w", objects, err)
		}
		if obj.EndOfRange != 0 {
			gaps++
			if obj.EndOfRange == wire.EndOfTimedOutRange {
				timedOut++
			}
			what := map[wire.EndOfRange]string{
				wire.EndOfNonExistentRange: "do not exist",
				wire.EndOfUnknownRange:     "are unknown to the server (not kept, or never seen)",
				wire.EndOfTimedOutRange:    "did not come in time",
			}[obj.EndOfRange]
			if what == "" {
				what = obj.EndOfRange.String()
			}
			fromText := "from " + loc(prev)
			if !first {
				fromText = "after " + loc(prev)
			}
			if obj.EndOfRange != wire.EndOfNonExistentRange || verbose {
				n.warn("gap: the objects %s through %s %s", fromText, rangeEnd(obj.Location), what)
			}
			prev, first = obj.Location, false
			continue
		}
		prev, first = obj.Location, false
		if verbose {
			n.warn("object %s: %d bytes", loc(obj.Location), len(obj.Payload))
		}
		if obj.Status != wire.ObjectNormal {
			continue
		}
		objects++
		bytes += int64(len(obj.Payload))
		w.Write(obj.Payload)
		if lines {
			w.WriteByte('\n')
		}
	}
}
