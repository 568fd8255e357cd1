package moqt_test

import (
	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// A relay routes by namespace: its own tracks under (live), one upstream
// for everything under (vod), and the spec's default answer for the rest.
func ExampleServeMux() {
	live, err := moqt.NewLocalTrack(wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam1"), Name: []byte("video")}, nil)
	if err != nil {
		panic(err)
	}
	var upstream moqt.Handler = moqt.DefaultHandler // a handler that forwards to the origin

	mux := moqt.NewServeMux()
	mux.HandleFunc(wire.NewNamespace("live"), func(r moqt.Request) {
		switch r := r.(type) {
		case *moqt.SubscribeRequest:
			if r.Track.Equal(live.Name()) {
				_, _ = live.Accept(r, moqt.AcceptOptions{})
				return
			}
		case *moqt.TrackStatusRequest:
			if r.Track.Equal(live.Name()) {
				_ = live.Status(r)
				return
			}
		}
		moqt.DefaultHandler.ServeMOQT(r)
	})
	mux.Handle(wire.NewNamespace("vod"), upstream)
	_ = &moqt.Config{Handler: mux}
}
