// Command tour walks through a MoQT session end to end on 127.0.0.1: a
// server and a client in one process, over raw QUIC and then WebTransport.
// It shows the SETUP exchange, a SUBSCRIBE refused with REQUEST_ERROR, one
// accepted with SUBSCRIBE_OK, objects published through a LocalTrack and
// read back, a FETCH of past objects from the track's cache, a
// REQUEST_UPDATE, TRACK_STATUS, a publisher-initiated PUBLISH and the
// PUBLISH_DONE that ends a subscription.
//
//	go run ./examples/tour
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

var clock = wire.FullTrackName{Namespace: wire.NewNamespace("demo"), Name: []byte("clock")}

// clockTrack is the server's published track; it is made fresh per visit.
var clockTrack *moqt.LocalTrack

// served hands the server's end of each accepted subscription to the tour.
var served = make(chan *moqt.ServedSubscription, 1)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tour failed:", err)
		os.Exit(1)
	}
}

func run() error {
	cert, sum, err := moqt.GenerateCertificate()
	if err != nil {
		return err
	}
	fmt.Printf("certificate SHA-256 %x (valid < 14 days)\n", sum)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := moqt.Listen("127.0.0.1:0", &moqt.Config{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler:   moqt.HandlerFunc(serve),
		Logger:    quiet,
	}, nil)
	if err != nil {
		return err
	}
	defer srv.Close()

	for _, scheme := range []string{"moqt", "https"} {
		url := scheme + "://" + srv.Addr().String() + "/tour"
		fmt.Printf("\n== %s\n", url)
		if err := visit(srv, url, &moqt.Config{
			// The client trusts the self-signed certificate by its hash,
			// as a browser does with serverCertificateHashes.
			ServerCertificateHashes: [][32]byte{sum},
			Logger:                  quiet,
			Handler:                 moqt.HandlerFunc(acceptPublish),
		}); err != nil {
			return err
		}
	}
	return nil
}

// serve is the server's Handler: it publishes demo/clock and nothing else.
func serve(r moqt.Request) {
	switch r := r.(type) {
	case *moqt.SubscribeRequest:
		if !r.Track.Equal(clock) {
			_ = r.Reject(wire.ReqDoesNotExist, "no such track")
			return
		}
		ss, err := clockTrack.Accept(r, moqt.AcceptOptions{})
		if err == nil {
			served <- ss
		}
	case *moqt.TrackStatusRequest:
		_ = clockTrack.Status(r)
	case *moqt.FetchRequest:
		_ = clockTrack.Fetch(r) // from the track's cache
	default:
		moqt.DefaultHandler.ServeMOQT(r)
	}
}

// acceptPublish is the client's Handler: it takes any PUBLISH.
func acceptPublish(r moqt.Request) {
	if p, ok := r.(*moqt.PublishRequest); ok {
		if _, err := p.Accept(wire.Params{}); err == nil {
			fmt.Printf("client: accepted PUBLISH of %s (alias %d); now Established\n", p.Track, p.TrackAlias)
		}
		return
	}
	moqt.DefaultHandler.ServeMOQT(r)
}

func visit(srv *moqt.Server, url string, cfg *moqt.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	clockTrack, err = moqt.NewLocalTrack(clock, wire.KVList{{Type: wire.PropDefaultPublisherPriority, Value: 64}})
	if err != nil {
		return err
	}
	// The track keeps its last 100 objects for FETCH and fill.
	clockTrack.SetCache(moqt.CacheLimits{Objects: 100})
	// One group published before anyone subscribes: it moves the track's
	// Largest Object and stays in the cache.
	w := clockTrack.OpenSubgroup(41, 0, moqt.SubgroupOptions{})
	for id := uint64(0); id <= 7; id++ {
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: 41, Object: id}, Payload: []byte("tick")}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	client, err := moqt.Dial(ctx, url, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	server, err := srv.Accept(ctx)
	if err != nil {
		return err
	}
	defer server.Close()
	fmt.Printf("SETUP exchanged: %s, webtransport=%v, server sees path %q\n", client.Version(), client.WebTransport(), server.Path())

	_, err = client.Subscribe(ctx, wire.FullTrackName{Namespace: wire.NewNamespace("demo"), Name: []byte("nope")}, wire.Params{})
	var re *moqt.RequestError
	if !errors.As(err, &re) {
		return fmt.Errorf("expected REQUEST_ERROR, got %v", err)
	}
	fmt.Printf("SUBSCRIBE demo--nope -> REQUEST_ERROR %s (%q)\n", re.Code, re.Reason)

	st, err := client.TrackStatus(ctx, clock, wire.Params{})
	if err != nil {
		return err
	}
	fmt.Printf("TRACK_STATUS %s -> largest %v, properties %v\n", clock, st.Largest.Value, st.Properties)

	past := wire.RangeFilterToObject(wire.Location{Group: 41, Object: 2}, wire.Location{Group: 41, Object: 4})
	f, err := client.Fetch(ctx, clock, wire.Params{LocationFilter: wire.Some(past)})
	if err != nil {
		return err
	}
	fmt.Printf("FETCH %s {41, 2}..{41, 4} -> FETCH_OK end %v\n", clock, f.End)
	for {
		obj, err := f.ReadObject(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		fmt.Printf("fetched object %v: %q\n", obj.Location, obj.Payload)
	}
	fmt.Println("fetch stream ended with FIN: the range is complete")

	sub, err := client.Subscribe(ctx, clock, wire.Params{SubscriberPriority: wire.Some[uint8](10)})
	if err != nil {
		return err
	}
	largest, _ := sub.Largest()
	fmt.Printf("SUBSCRIBE %s -> SUBSCRIBE_OK alias %d, largest %v: Established\n", clock, sub.TrackAlias(), largest)
	ss := <-served

	w = clockTrack.OpenSubgroup(42, 0, moqt.SubgroupOptions{EndOfGroup: true})
	for id := uint64(0); id < 3; id++ {
		now := time.Now().UTC().Format("15:04:05.000")
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Group: 42, Object: id}, Payload: []byte(now)}); err != nil {
			return err
		}
	}
	if err := w.Close(); err != nil {
		return err
	}
	r, err := sub.AcceptSubgroup(ctx)
	if err != nil {
		return err
	}
	for {
		obj, err := r.ReadObject(nil)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		fmt.Printf("object %v priority %d: %q\n", obj.Location, obj.Priority.Value, obj.Payload)
	}
	fmt.Println("subgroup stream ended with FIN: group 42 is complete")

	if err := sub.Update(ctx, wire.Params{Forward: wire.Some(false)}); err != nil {
		return err
	}
	fmt.Printf("REQUEST_UPDATE forward=0 -> REQUEST_OK; the publisher now sees forward=%v\n", ss.Forward())
	if err := ss.End(wire.DoneTrackEnded, "the clock stopped"); err != nil {
		return err
	}
	select {
	case <-sub.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	var done *moqt.DoneError
	if errors.As(sub.Err(), &done) {
		fmt.Printf("PUBLISH_DONE %s (%q), stream count %d: Terminated\n", done.Code, done.Reason, done.StreamCount)
	}

	chat, err := moqt.NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace("demo"), Name: []byte("chat")}, nil)
	if err != nil {
		return err
	}
	pub, err := chat.Publish(ctx, server, wire.Params{}, moqt.AcceptOptions{})
	if err != nil {
		return err
	}
	fmt.Printf("server: PUBLISH -> PUBLISH_OK: Established\n")
	return pub.End(wire.DoneTrackEnded, "")
}
