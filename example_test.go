package moqt_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// A publisher serves one track; a subscriber dials it over raw QUIC,
// subscribes, and reads a subgroup.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)

	// The publisher: a LocalTrack answers SUBSCRIBE for its name.
	name := wire.FullTrackName{Namespace: wire.NewNamespace("example"), Name: []byte("clock")}
	track, _ := moqt.NewLocalTrack(name, nil)
	handler := moqt.HandlerFunc(func(r moqt.Request) {
		if sr, ok := r.(*moqt.SubscribeRequest); ok && sr.Track.Equal(name) {
			_, _ = track.Accept(sr, moqt.AcceptOptions{})
			return
		}
		moqt.DefaultHandler.ServeMOQT(r)
	})
	cert, hash, _ := moqt.GenerateCertificate()
	srv, err := moqt.Listen("127.0.0.1:0", &moqt.Config{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler:   handler,
		Logger:    quiet,
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	// The subscriber trusts the self-signed certificate by its hash.
	sess, err := moqt.Dial(ctx, "moqt://"+srv.Addr().String()+"/example",
		&moqt.Config{ServerCertificateHashes: [][32]byte{hash}, Logger: quiet})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sess.Close()
	server, _ := srv.Accept(ctx)
	defer server.Close()

	sub, err := sess.Subscribe(ctx, name, wire.Params{})
	if err != nil {
		fmt.Println(err)
		return
	}
	w := track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
	_ = w.WriteObject(moqt.Object{Location: wire.Location{Group: 0, Object: 0}, Payload: []byte("tick")})
	_ = w.WriteObject(moqt.Object{Location: wire.Location{Group: 0, Object: 1}, Payload: []byte("tock")})
	_ = w.Close()

	r, _ := sub.AcceptSubgroup(ctx)
	for {
		h, err := r.Next()
		if err != nil {
			break // io.EOF: the publisher's FIN ends the subgroup
		}
		payload, _ := io.ReadAll(r)
		fmt.Printf("%v %s\n", h.Location, payload)
	}
	// Output:
	// {0, 0} tick
	// {0, 1} tock
}

// A client pins a self-signed server by the SHA-256 the server printed:
// hex, openssl's colon-separated fingerprint or base64 all parse to the
// same hash.
func ExampleParseCertificateHash() {
	for _, printed := range []string{
		"3f1a6c0e9b2d4f5a8c7e1b0d2f4a6c8e0b1d3f5a7c9e1b2d4f6a8c0e2b4d6f8a",
		"SHA256 Fingerprint=3F:1A:6C:0E:9B:2D:4F:5A:8C:7E:1B:0D:2F:4A:6C:8E:0B:1D:3F:5A:7C:9E:1B:2D:4F:6A:8C:0E:2B:4D:6F:8A",
		"PxpsDpstT1qMfhsNL0psjgsdP1p8nhstT2qMDitNb4o=",
	} {
		hash, err := moqt.ParseCertificateHash(printed)
		if err != nil {
			fmt.Println(err)
			return
		}
		cfg := &moqt.Config{ServerCertificateHashes: [][32]byte{hash}} // for moqt.Dial
		fmt.Printf("%x\n", cfg.ServerCertificateHashes[0][:4])
	}
	_, err := moqt.ParseCertificateHash("3f1a6c0e")
	fmt.Println(err)
	// Output:
	// 3f1a6c0e
	// 3f1a6c0e
	// 3f1a6c0e
	// moqt: certificate hash "3f1a6c0e": 8 hex digits, want 64
}
