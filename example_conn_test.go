package moqt_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// An application that makes its own QUIC connections, here with quic-go
// on both ends, runs MoQT sessions over them. Offering wire.ALPNs() lets
// the connection negotiate the version.
func ExampleNewClientSession() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := &moqt.Config{Logger: slog.New(slog.DiscardHandler)}
	cert, _, _ := moqt.GenerateCertificate() // for 127.0.0.1
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	roots := x509.NewCertPool()
	roots.AddCert(leaf)

	// The server's own QUIC listener.
	udp, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer udp.Close()
	tr := &quic.Transport{Conn: udp}
	defer tr.Close()
	ln, _ := tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: wire.ALPNs()},
		&quic.Config{EnableDatagrams: true})
	defer ln.Close()
	servers := make(chan *moqt.Session, 1)
	go func() {
		conn, err := ln.Accept(ctx)
		if err != nil {
			close(servers)
			return
		}
		s, err := moqt.NewServerSession(ctx, conn, quiet)
		if err != nil {
			fmt.Println(err)
		}
		servers <- s
	}()

	// The client's own QUIC connection.
	conn, err := quic.DialAddr(ctx, udp.LocalAddr().String(),
		&tls.Config{RootCAs: roots, NextProtos: wire.ALPNs()}, &quic.Config{EnableDatagrams: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := moqt.NewClientSession(ctx, conn, "moqt://media.example:443/live", quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	server := <-servers
	if server == nil {
		return
	}
	defer server.Close()
	fmt.Println(client.Version(), server.Authority(), server.Path())
	// Output:
	// moqt-21 media.example:443 /live
}

// An application that runs its own HTTP/3 server upgrades WebTransport
// requests in its own handler and runs a MoQT session over each; the
// session's version is the WT-Protocol its webtransport.Server picked
// from ApplicationProtocols.
func ExampleNewWebTransportServerSession() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	quiet := &moqt.Config{Logger: slog.New(slog.DiscardHandler)}
	cert, _, _ := moqt.GenerateCertificate() // for 127.0.0.1
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	roots := x509.NewCertPool()
	roots.AddCert(leaf)

	servers := make(chan *moqt.Session, 1)
	wt := &webtransport.Server{ApplicationProtocols: wire.ALPNs()}
	mux := http.NewServeMux()
	mux.HandleFunc("/moq", func(w http.ResponseWriter, r *http.Request) {
		sess, err := wt.Upgrade(w, r)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s, err := moqt.NewWebTransportServerSession(ctx, sess, r, quiet)
		if err != nil {
			fmt.Println(err)
			return
		}
		servers <- s
	})
	wt.H3 = &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		Handler:   mux,
	}
	udp, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wt.Serve(udp)
	}()
	defer func() {
		_ = wt.Close()
		_ = udp.Close()
		<-done
	}()

	// moqt.Dial would do; a client with its own webtransport.Transport
	// runs the session with NewWebTransportClientSession.
	d := &webtransport.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ApplicationProtocols: wire.ALPNs()}
	defer d.Close()
	_, sess, err := d.Dial(ctx, "https://"+udp.LocalAddr().String()+"/moq", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := moqt.NewWebTransportClientSession(ctx, sess, quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	server := <-servers
	defer server.Close()
	fmt.Println(client.Version(), server.WebTransport(), server.Path())
	// Output:
	// moqt-21 true /moq
}
