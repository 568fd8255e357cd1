// Command pub is the publisher a newcomer writes: it dials a relay,
// announces its namespace (PUBLISH_NAMESPACE) or offers its track (PUBLISH),
// and writes groups of objects at a steady pace, each group one subgroup
// that ends with a FIN. After -groups groups, at the end of its stdin
// (after the group being written), or at SIGINT/SIGTERM, it ends the
// track with TRACK_ENDED, closes the session and exits at once.
//
// It prints one line per event on stdout, for the end-to-end test:
//
//	ready
//	pub GROUP OBJECT
//	ended
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

func main() {
	url := flag.String("url", "", "relay URL (moqt:// or https://)")
	pin := flag.String("sha256", "", "SHA-256 (hex or base64) of the relay's certificate")
	ns := flag.String("ns", "e2e", "track namespace")
	name := flag.String("track", "clock", "track name")
	first := flag.Uint64("first", 0, "the first group's ID")
	groups := flag.Int("groups", 10, "groups to publish; 0 for as many as come before stdin's end")
	objects := flag.Int("objects", 10, "objects per group")
	interval := flag.Duration("interval", 100*time.Millisecond, "time between objects")
	publish := flag.Bool("publish", false, "offer the track with PUBLISH instead of announcing its namespace")
	draft := flag.Uint("draft", 0, "speak only this MoQT draft (18 to 21); 0 offers every one")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The end of stdin ends the track too, after the group being written.
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	if err := run(ctx, eof, *url, *pin, *ns, *name, *first, *groups, *objects, *interval, *publish, versionsOf(*draft)); err != nil {
		fmt.Fprintln(os.Stderr, "pub:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, eof <-chan struct{}, url, pin, ns, name string, first uint64, groups, objects int, interval time.Duration, publish bool, versions []wire.Version) error {
	sum, err := moqt.ParseCertificateHash(pin)
	if err != nil {
		return fmt.Errorf("-sha256: %w", err)
	}
	track, err := moqt.NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace(ns), Name: []byte(name)}, nil)
	if err != nil {
		return err
	}
	// Late joiners and FETCH are served from what the track keeps.
	track.SetCache(moqt.CacheLimits{Objects: 10_000})
	cfg := &moqt.Config{
		ServerCertificateHashes: [][32]byte{sum},
		Logger:                  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Handler:                 serve(track),
		Versions:                versions,
	}
	sess, err := moqt.Dial(ctx, url, cfg)
	if err != nil {
		return err
	}
	defer sess.Close()
	if publish {
		if _, err := track.Publish(ctx, sess, wire.Params{}, moqt.AcceptOptions{}); err != nil {
			return fmt.Errorf("PUBLISH: %w", err)
		}
	} else if _, err := sess.PublishNamespace(ctx, track.Name().Namespace, wire.Params{}); err != nil {
		return fmt.Errorf("PUBLISH_NAMESPACE: %w", err)
	}
	fmt.Println("ready")

	tick := time.NewTicker(interval)
	defer tick.Stop()
	for g := first; groups == 0 || g < first+uint64(groups); g++ {
		select {
		case <-eof:
			return end(track, sess)
		default:
		}
		w := track.OpenSubgroup(g, 0, moqt.SubgroupOptions{EndOfGroup: true})
		for o := range uint64(objects) {
			select {
			case <-ctx.Done():
				_ = w.Close()
				return end(track, sess)
			case <-tick.C:
			}
			err := w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: payload(g, o)})
			if err != nil {
				return err
			}
			fmt.Printf("pub %d %d\n", g, o)
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	return end(track, sess)
}

// end is the natural shutdown: TRACK_ENDED to every subscriber, then the
// session's close, after which the program exits at once.
func end(track *moqt.LocalTrack, sess *moqt.Session) error {
	track.End(wire.DoneTrackEnded, "publisher done")
	err := sess.Close()
	fmt.Println("ended")
	return err
}

// payload is what object {g, o} carries, so a reader can check it.
func payload(g, o uint64) []byte { return fmt.Appendf(nil, "object %d/%d", g, o) }

// serve answers the relay's requests for the track: SUBSCRIBE, FETCH
// and TRACK_STATUS from the LocalTrack, anything else refused.
func serve(track *moqt.LocalTrack) moqt.Handler {
	return moqt.HandlerFunc(func(r moqt.Request) {
		switch r := r.(type) {
		case *moqt.SubscribeRequest:
			if !r.Track.Equal(track.Name()) {
				_ = r.Reject(wire.ReqDoesNotExist, "no such track")
				return
			}
			_, _ = track.Accept(r, moqt.AcceptOptions{})
		case *moqt.FetchRequest:
			_ = track.Fetch(r)
		case *moqt.TrackStatusRequest:
			_ = track.Status(r)
		default:
			moqt.DefaultHandler.ServeMOQT(r)
		}
	})
}

// versionsOf is Config.Versions for -draft: that draft alone, or every one.
func versionsOf(draft uint) []wire.Version {
	if draft == 0 {
		return nil
	}
	return []wire.Version{wire.Version(draft)}
}
