package bench

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"

	"github.com/quic-go/quic-go"
)

// RunForwarderChild, when this process was started by CompareForwarders
// as a chain's forwarder, serves as that forwarder until its parent closes
// its standard input, then exits; otherwise it returns at once. A program
// that calls CompareForwarders calls it first thing in main, and a test
// binary in TestMain: the forwarder process is the same executable.
func RunForwarderChild() {
	kind := os.Getenv(forwarderEnv)
	if kind == "" {
		return
	}
	if err := serveForwarder(kind); err != nil {
		fmt.Fprintf(os.Stderr, "bench: forwarder process %s: %v\n", kind, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveForwarder is the forwarder process of kind, set up from its
// environment (see forwarder_proc.go).
func serveForwarder(kind string) error {
	QuietQUIC()
	up := os.Getenv(forwarderUpEnv)
	der, err := base64.StdEncoding.DecodeString(os.Getenv(forwarderCertEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", forwarderCertEnv, err)
	}
	subscribers, err := strconv.Atoi(os.Getenv(forwarderSubsEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", forwarderSubsEnv, err)
	}
	if file := os.Getenv(forwarderProfileEnv); file != "" {
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
		defer func() { // and where its bytes were allocated, at the end
			if hf, err := os.Create(file + ".allocs"); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(hf, 0)
				hf.Close()
			}
		}()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out parentWriter
	go answerParent(&out, cancel)
	switch kind {
	case "bare-quic":
		return serveBare(ctx, &out, up, der, subscribers)
	case "relay":
		return serveRelay(ctx, &out, up, der, subscribers)
	}
	return errors.New("unknown kind")
}

// parentWriter writes lines to the parent, one at a time.
type parentWriter struct{ mu sync.Mutex }

func (w *parentWriter) line(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = os.Stdout.WriteString(s)
}

// answerParent answers each CPU time request on standard input, until
// it ends; then it calls stop.
func answerParent(out *parentWriter, stop context.CancelFunc) {
	defer stop()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if strings.TrimSpace(in.Text()) == forwarderCPURequest {
			out.line(strconv.FormatInt(int64(CPUTime()), 10) + "\n")
		}
	}
}

// serveBare listens for subscribers subscribers, then dials the
// publisher at up, whose certificate is der, and forwards its groups to
// them as bareForwarder does, until ctx ends.
func serveBare(ctx context.Context, out *parentWriter, up string, der []byte, subscribers int) error {
	stls, _, err := tlsConfigs(rawALPN)
	if err != nil {
		return err
	}
	ln, err := listenRaw(stls)
	if err != nil {
		return err
	}
	defer ln.Close()
	out.line(listeningLine(ln.Addr().String(), leafDER(stls)))
	var conns []*quic.Conn
	defer func() {
		for _, c := range conns {
			_ = c.CloseWithError(0, "")
		}
	}()
	for range subscribers {
		c, err := ln.Accept(ctx)
		if err != nil {
			return ignoreStop(ctx, err)
		}
		conns = append(conns, c)
	}
	upTLS, err := trusting(der, rawALPN)
	if err != nil {
		return err
	}
	upConn, err := quic.DialAddr(ctx, up, upTLS, &quic.Config{EnableDatagrams: true})
	if err != nil {
		return ignoreStop(ctx, err)
	}
	f := startBareRelay(upConn, conns)
	conns = append(conns, upConn)
	<-ctx.Done()
	f.cancel()
	for _, c := range conns {
		_ = c.CloseWithError(0, "")
	}
	f.stop()
	return nil
}

// serveRelay starts the relay package's Relay, as newRelayNode does,
// with the publisher at up, whose certificate is der, as its upstream, and
// serves its subscribers until ctx ends.
func serveRelay(ctx context.Context, out *parentWriter, up string, der []byte, subscribers int) error {
	upTLS, err := trusting(der)
	if err != nil {
		return err
	}
	r, err := newRelayServer("moqt://"+up+"/bench", upTLS, subscribers, fanoutConfig)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- r.srv.Serve(ctx) }()
	out.line(listeningLine(r.srv.Addr().String(), r.der))
	<-ctx.Done()
	err = r.close()
	<-served
	return err
}

// ignoreStop is err, or nil if it is only that ctx ended: the parent
// stopped the process during its setup.
func ignoreStop(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
