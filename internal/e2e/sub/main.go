// Command sub is the subscriber a newcomer writes: it dials a relay,
// subscribes to a track (optionally found by SUBSCRIBE_NAMESPACE first,
// optionally joining with a fill of past groups) or FETCHes a past range,
// and reads until the end.
//
// It prints one line per event on stdout, for the end-to-end test:
//
//	namespace NS                       discovery found the namespace
//	ok GROUP OBJECT | ok none          SUBSCRIBE_OK or FETCH_OK, with the Largest Object (FETCH_OK: its End)
//	obj GROUP SUBGROUP OBJECT PAYLOAD  an object
//	status GROUP OBJECT STATUS         a status object
//	gap KIND GROUP OBJECT              a fetch's end of a range it does not carry
//	incomplete GROUP SUBGROUP ERROR    a subgroup that ended before its FIN
//	end CODE                           the subscription's end (PUBLISH_DONE's status), or "end fetch"
//	error ERROR                        anything else that ended it
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

type options struct {
	url, pin, ns, name string
	filter             string // "next", "none" or a number of groups back (relative)
	fill               int    // groups back to fill, -1 for none
	fetch              string // "G1:O1-G2:O2": FETCH that range instead of subscribing
	discover           bool   // find the namespace with SUBSCRIBE_NAMESPACE first
	timeout            time.Duration
	draft              uint // the only MoQT draft to speak; 0 offers every one
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "relay URL (moqt:// or https://)")
	flag.StringVar(&o.pin, "sha256", "", "SHA-256 (hex or base64) of the relay's certificate")
	flag.StringVar(&o.ns, "ns", "e2e", "track namespace")
	flag.StringVar(&o.name, "track", "clock", "track name")
	flag.StringVar(&o.filter, "filter", "next", `Location filter: "next" (the Next Object), "none", or N (N groups back)`)
	flag.IntVar(&o.fill, "fill", -1, "join with a fill of the last N groups (1: the current group from its start)")
	flag.StringVar(&o.fetch, "fetch", "", "FETCH the range G1:O1-G2:O2 instead of subscribing")
	flag.BoolVar(&o.discover, "discover", false, "wait for the namespace with SUBSCRIBE_NAMESPACE before subscribing")
	flag.DurationVar(&o.timeout, "timeout", time.Minute, "give up after this long")
	flag.UintVar(&o.draft, "draft", 0, "speak only this MoQT draft (18 to 21); 0 offers every one")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Printf("error %v\n", oneLine(err))
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	sum, err := moqt.ParseCertificateHash(o.pin)
	if err != nil {
		return fmt.Errorf("-sha256: %w", err)
	}
	sess, err := moqt.Dial(ctx, o.url, &moqt.Config{
		ServerCertificateHashes: [][32]byte{sum},
		Logger:                  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Versions:                versionsOf(o.draft),
	})
	if err != nil {
		return err
	}
	defer sess.Close()
	fmt.Printf("session %s\n", sess.Version())
	track := wire.FullTrackName{Namespace: wire.NewNamespace(o.ns), Name: []byte(o.name)}
	if o.discover {
		if err := discover(ctx, sess, track.Namespace); err != nil {
			return err
		}
	}
	if o.fetch != "" {
		return fetch(ctx, sess, track, o.fetch)
	}
	return subscribe(ctx, sess, track, o)
}

// discover waits until the relay reports the namespace as published.
func discover(ctx context.Context, sess *moqt.Session, ns wire.Namespace) error {
	nsub, err := sess.SubscribeNamespace(ctx, ns, wire.Params{})
	if err != nil {
		return fmt.Errorf("SUBSCRIBE_NAMESPACE: %w", err)
	}
	defer nsub.Close()
	for {
		ev, err := nsub.Next(ctx)
		if err != nil {
			return err
		}
		if !ev.Done && ev.Namespace.Equal(ns) {
			fmt.Printf("namespace %s\n", ev.Namespace)
			return nil
		}
	}
}

func subscribe(ctx context.Context, sess *moqt.Session, track wire.FullTrackName, o options) error {
	var p wire.Params
	switch o.filter {
	case "next":
		p.LocationFilter = wire.Some(wire.NextObjectFilter())
	case "none":
	default:
		n, err := strconv.ParseUint(o.filter, 10, 64)
		if err != nil {
			return fmt.Errorf("-filter: %w", err)
		}
		p.LocationFilter = wire.Some(wire.RelativeFilter(n))
	}
	if o.fill >= 0 {
		p.FillParameters = &wire.Params{LocationFilter: wire.Some(wire.RelativeFilter(uint64(o.fill)))}
	}
	sub, err := sess.Subscribe(ctx, track, p)
	if err != nil {
		return fmt.Errorf("SUBSCRIBE: %w", err)
	}
	if l, ok := sub.Largest(); ok {
		fmt.Printf("ok %d %d\n", l.Group, l.Object)
	} else {
		fmt.Println("ok none")
	}
	for {
		obj, err := sub.ReadObject(ctx)
		if err != nil {
			var done *moqt.DoneError
			if errors.As(err, &done) {
				fmt.Printf("end %s\n", done.Code)
				return nil
			}
			return err
		}
		printObject(obj)
	}
}

func fetch(ctx context.Context, sess *moqt.Session, track wire.FullTrackName, rng string) error {
	from, to, err := parseRange(rng)
	if err != nil {
		return err
	}
	f, err := sess.Fetch(ctx, track, wire.Params{LocationFilter: wire.Some(wire.RangeFilterToObject(from, to))})
	if err != nil {
		return fmt.Errorf("FETCH: %w", err)
	}
	fmt.Printf("ok %d %d\n", f.End.Group, f.End.Object)
	for {
		obj, err := f.ReadObject(ctx)
		if errors.Is(err, io.EOF) {
			fmt.Println("end fetch")
			return nil
		}
		if err != nil {
			return err
		}
		printObject(obj)
	}
}

func printObject(obj moqt.Object) {
	switch {
	case obj.Incomplete != nil:
		fmt.Printf("incomplete %d %d %s\n", obj.Location.Group, obj.SubgroupID, oneLine(obj.Incomplete))
	case obj.EndOfRange != 0:
		fmt.Printf("gap %s %d %d\n", obj.EndOfRange, obj.Location.Group, obj.Location.Object)
	case obj.Status != wire.ObjectNormal:
		fmt.Printf("status %d %d %s\n", obj.Location.Group, obj.Location.Object, obj.Status)
	default:
		fmt.Printf("obj %d %d %d %s\n", obj.Location.Group, obj.SubgroupID, obj.Location.Object, obj.Payload)
	}
}

// parseRange reads "G1:O1-G2:O2".
func parseRange(s string) (from, to wire.Location, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return from, to, fmt.Errorf("-fetch %q: want G1:O1-G2:O2", s)
	}
	if from, err = parseLocation(a); err == nil {
		to, err = parseLocation(b)
	}
	return from, to, err
}

func parseLocation(s string) (wire.Location, error) {
	g, o, ok := strings.Cut(s, ":")
	if !ok {
		return wire.Location{}, fmt.Errorf("location %q: want G:O", s)
	}
	gi, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return wire.Location{}, err
	}
	oi, err := strconv.ParseUint(o, 10, 64)
	return wire.Location{Group: gi, Object: oi}, err
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// versionsOf is Config.Versions for -draft: that draft alone, or every one.
func versionsOf(draft uint) []wire.Version {
	if draft == 0 {
		return nil
	}
	return []wire.Version{wire.Version(draft)}
}
