package bench

// Forwarders in processes of their own (CompareForwarders): the chains'
// publisher and subscribers stay in this process, as in CompareChains, and
// the forwarder runs in a child, this program started again with
// forwarderEnv set (RunForwarderChild, forwarder_child.go), so that its
// CPU time is its own: the publisher's and subscribers' per-object work is
// not counted against it.
//
// The child is told the publisher's address and certificate, and how many
// subscribers will dial it, in its environment. It answers with one line
// on its standard output, its own address and certificate, then answers
// each line "cpu" on its standard input with its CPU time so far
// (getrusage: user and system time of all its threads, in nanoseconds). It
// ends when its standard input is closed.

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
)

// ForwarderProfile, when set, makes each forwarder process that
// CompareForwarders starts write a CPU profile of its whole life to
// ForwarderProfile-<kind>-<subscribers>.pprof.
var ForwarderProfile string

// The environment of a forwarder process.
const (
	forwarderEnv         = "MOQT_BENCH_FORWARDER"             // its kind: bare-quic or relay
	forwarderUpEnv       = "MOQT_BENCH_FORWARDER_UPSTREAM"    // the publisher's host:port
	forwarderCertEnv     = "MOQT_BENCH_FORWARDER_CERT"        // the publisher's certificate, DER in base64
	forwarderSubsEnv     = "MOQT_BENCH_FORWARDER_SUBSCRIBERS" // how many subscribers will dial it
	forwarderProfileEnv  = "MOQT_BENCH_FORWARDER_CPUPROFILE"  // a file for its CPU profile, if any
	forwarderCPURequest  = "cpu"
	forwarderStopTimeout = 30 * time.Second
)

// forwarderProc is a chain's forwarder running in a process of its own.
type forwarderProc struct {
	cmd  *exec.Cmd
	in   *os.File      // its standard input
	out  *bufio.Reader // its standard output
	outF *os.File
	addr string // where its subscribers dial it
	der  []byte // the certificate it presents to them
	done chan struct{}
	err  error // the process's exit, once done is closed
}

// startForwarder starts a forwarder of kind whose publisher listens at
// upstream with the certificate upDER, for subscribers subscribers, and
// waits for it to listen.
func startForwarder(ctx context.Context, kind, upstream string, upDER []byte, subscribers int) (_ *forwarderProc, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), forwarderEnv+"="+kind, forwarderUpEnv+"="+upstream,
		forwarderCertEnv+"="+base64.StdEncoding.EncodeToString(upDER), forwarderSubsEnv+"="+strconv.Itoa(subscribers))
	if ForwarderProfile != "" {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s-%s-%d.pprof", forwarderProfileEnv, ForwarderProfile, kind, subscribers))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	f := &forwarderProc{cmd: cmd, in: inW, out: bufio.NewReader(outR), outF: outR, done: make(chan struct{})}
	go func() {
		f.err = cmd.Wait()
		close(f.done)
	}()
	defer func() {
		if err != nil {
			_ = f.stop()
		}
	}()
	line := make(chan error, 1)
	go func() {
		s, err := f.out.ReadString('\n')
		if err == nil {
			f.addr, f.der, err = parseListening(s)
		}
		line <- err
	}()
	select {
	case err = <-line:
	case <-ctx.Done():
		err = ctx.Err()
		_ = cmd.Process.Kill()
		<-line
	}
	if err != nil {
		return nil, fmt.Errorf("bench: forwarder %s: %w", kind, err)
	}
	return f, nil
}

// listeningLine is the line a forwarder process writes once it listens.
func listeningLine(addr string, der []byte) string {
	return addr + " " + base64.StdEncoding.EncodeToString(der) + "\n"
}

// parseListening reads a listeningLine.
func parseListening(s string) (addr string, der []byte, err error) {
	addr, cert, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok {
		return "", nil, fmt.Errorf("unexpected first line %q", s)
	}
	der, err = base64.StdEncoding.DecodeString(cert)
	return addr, der, err
}

// cpu asks the process for its CPU time so far.
func (f *forwarderProc) cpu() (time.Duration, error) {
	if _, err := f.in.WriteString(forwarderCPURequest + "\n"); err != nil {
		return 0, fmt.Errorf("bench: forwarder process: %w", err)
	}
	s, err := f.out.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("bench: forwarder process: %w", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return time.Duration(ns), err
}

// within returns a context that also ends when the process does, for the
// waits of a chain's setup.
func (f *forwarderProc) within(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-f.done:
			cancel(errors.New("bench: the forwarder process ended"))
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// stop closes the process's standard input, which ends it, and waits for
// it; it kills it if it takes longer than forwarderStopTimeout. It may
// be called more than once.
func (f *forwarderProc) stop() error {
	_ = f.in.Close()
	select {
	case <-f.done:
	case <-time.After(forwarderStopTimeout):
		_ = f.cmd.Process.Kill()
		<-f.done
	}
	_ = f.outF.Close()
	if f.err != nil {
		return fmt.Errorf("bench: forwarder process: %w", f.err)
	}
	return nil
}

// bareProcessChain is the bare chain (bareForwarder) with its forwarder
// in a process of its own: the publisher listens, the forwarder dials it
// once every subscriber has dialed the forwarder.
type bareProcessChain struct {
	ln      *quic.Listener // the publisher's
	pub     *quic.Conn     // the publisher's connection to the forwarder
	clients []*quic.Conn   // the subscribers'
	proc    *forwarderProc
	frame   []byte // the publisher's framing buffer
	closing closers
}

// newBareForwarderProcess connects a publisher to a bare quic-go
// forwarder in a process of its own and subscribers subscribers to it.
func newBareForwarderProcess(ctx context.Context, subscribers int) (_ *Chain, err error) {
	stls, _, err := tlsConfigs(rawALPN)
	if err != nil {
		return nil, err
	}
	ln, err := listenRaw(stls)
	if err != nil {
		return nil, err
	}
	p := &bareProcessChain{ln: ln}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if p.proc, err = startForwarder(ctx, "bare-quic", ln.Addr().String(), leafDER(stls), subscribers); err != nil {
		return nil, err
	}
	ctx, cancel := p.proc.within(ctx)
	defer cancel()
	ctls, err := trusting(p.proc.der, rawALPN)
	if err != nil {
		return nil, err
	}
	for range subscribers {
		c, err := quic.DialAddr(ctx, p.proc.addr, ctls, &quic.Config{EnableDatagrams: true})
		if err != nil {
			return nil, err
		}
		p.clients = append(p.clients, c)
	}
	if p.pub, err = ln.Accept(ctx); err != nil {
		return nil, err
	}
	c := newChain(p, subscribers)
	c.forwarder = p.proc.cpu
	return c, nil
}

func (p *bareProcessChain) publish(ctx context.Context, g uint64) (groupWriter, error) {
	return publishBare(ctx, p.pub, g, &p.frame)
}

func (p *bareProcessChain) accept(ctx context.Context, i int) (groupReader, error) {
	return acceptBare(ctx, p.clients[i])
}

func (p *bareProcessChain) close() error {
	return p.closing.close(
		func() error {
			conns := p.clients
			if p.pub != nil {
				conns = append(conns, p.pub)
			}
			for _, c := range conns {
				_ = c.CloseWithError(0, "")
			}
			for _, c := range conns {
				<-c.Context().Done()
			}
			return nil
		},
		func() error {
			if p.proc == nil {
				return nil
			}
			return p.proc.stop()
		},
		p.ln.Close,
	)
}

// newRelayProcess connects a moqt publisher to the relay package's Relay
// in a process of its own, set up as NewRelayChain sets it up, and
// subscribers subscriber sessions to the relay.
func newRelayProcess(ctx context.Context, subscribers int) (_ *Chain, err error) {
	pub, err := newUpstreamPublisher(fanoutConfig)
	if err != nil {
		return nil, err
	}
	var proc *forwarderProc
	p := &relayChain{track: pub.track, closeNode: func() error {
		var err error
		if proc != nil {
			err = proc.stop()
		}
		if e := pub.close(); err == nil {
			err = e
		}
		return err
	}}
	defer func() {
		if err != nil {
			_ = p.close()
		}
	}()
	if proc, err = startForwarder(ctx, "relay", pub.pub.Addr().String(), pub.pubDER, subscribers); err != nil {
		return nil, err
	}
	ctx, cancel := proc.within(ctx)
	defer cancel()
	ctls, err := trusting(proc.der)
	if err != nil {
		return nil, err
	}
	if err := p.down.dialTo(ctx, proc.addr, ctls, subscribers); err != nil {
		return nil, err
	}
	if p.subs, err = p.down.subscribe(ctx, 16); err != nil {
		return nil, err
	}
	c := newChain(p, subscribers)
	c.forwarder = proc.cpu
	return c, nil
}
