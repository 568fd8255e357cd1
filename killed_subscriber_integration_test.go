package moqt

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/moqt-go/moqt/wire"
)

// A subscriber in another process is killed with SIGKILL while it
// receives: its connection goes silent, with no CONNECTION_CLOSE, and QUIC
// only notices at the idle timeout. Meanwhile the publisher must go on:
// no write waits on the dead subscriber beyond a bounded grace, and the
// other subscribers keep receiving everything. How long a write waits, to
// the millisecond, is for the tests on the bubble's clock
// (TestSlowLoneSubscriberTooFarBehind, TestStalledSubscriberDoesNotHoldOthers);
// here the QUIC idle timeout is made far longer than the test's bounds, so
// that a publisher freed within them was freed by the library, not by QUIC.

// Environment of the helper process (TestHelperProcess).
const (
	helperEnv      = "MOQT_HELPER_PROCESS" // "subscriber" in the child
	helperURLEnv   = "MOQT_HELPER_URL"
	helperCAEnv    = "MOQT_HELPER_CA" // PEM file of the server's certificate
	helperTrackEnv = "MOQT_HELPER_TRACK"
)

// TestHelperProcess is not a test: re-executed by TestKilledSubscriber
// with MOQT_HELPER_PROCESS=subscriber, it dials the publisher, subscribes
// to a track, says "receiving" on stdout once the first object arrived,
// and reads until it is killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "subscriber" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	pemBytes, err := os.ReadFile(os.Getenv(helperCAEnv))
	if err != nil {
		fail(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemBytes)
	cfg := &Config{
		TLSConfig:      &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"},
		Logger:         slog.New(slog.DiscardHandler),
		MaxIdleTimeout: killedIdleTimeout,
	}
	ctx := context.Background()
	s, err := Dial(ctx, os.Getenv(helperURLEnv), cfg)
	if err != nil {
		fail(err)
	}
	track := wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte(os.Getenv(helperTrackEnv))}
	sub, err := s.Subscribe(ctx, track, wire.Params{})
	if err != nil {
		fail(err)
	}
	said := false
	for {
		r, err := sub.AcceptSubgroup(ctx)
		if err != nil {
			fail(err)
		}
		for {
			if _, err := r.Next(); err != nil {
				break
			}
			if !said {
				fmt.Println("receiving")
				said = true
			}
		}
	}
}

// killedSubscriberBound bounds the test's waits: for the dead subscriber
// to be cut off, for the publisher's writes, for the live subscribers'
// last objects. The library's grace (Config.SubscriberGrace, 2 s) frees
// the publisher in about two graces; the bound leaves a busy machine
// room.
const killedSubscriberBound = 30 * time.Second

// killedIdleTimeout is the QUIC idle timeout of the publisher and of the
// subscriber that is killed: far longer than killedSubscriberBound, so
// that QUIC, which would notice the dead connection then, frees nothing
// within the test's bounds.
const killedIdleTimeout = 5 * time.Minute

// startHelperSubscriber starts a subscriber process for track on srv and
// returns once it receives objects.
func startHelperSubscriber(t *testing.T, scheme string, srv *Server, certDER []byte, track string) *exec.Cmd {
	t.Helper()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), 0o600))
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperEnv+"=subscriber",
		helperURLEnv+"="+scheme+"://"+srv.Addr().String()+"/live",
		helperCAEnv+"="+caFile,
		helperTrackEnv+"="+track,
	)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "receiving" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		require.True(t, ok, "helper subscriber ended: %s", stderr.String())
	case <-time.After(20 * time.Second):
		require.FailNow(t, "helper subscriber never received", stderr.String())
	}
	return cmd
}

// arrivals records the objects that reached one live subscriber.
type arrivals struct {
	mu   sync.Mutex
	got  map[wire.Location]bool
	want wire.Location // set once, by await
	// arrived is closed when want has arrived.
	arrived chan struct{}
}

func newArrivals() *arrivals {
	return &arrivals{got: map[wire.Location]bool{}, want: wire.Location{Group: ^uint64(0)}, arrived: make(chan struct{})}
}

// record reads one stream, noting each object that arrived.
func (a *arrivals) record(r *SubgroupReader) {
	for {
		h, err := r.Next()
		if err != nil {
			return
		}
		p, err := r.readPayload(1 << 20)
		if err != nil {
			return
		}
		a.mu.Lock()
		if strings.HasPrefix(string(p), string(stressPayload(h.Location))) && !a.got[h.Location] {
			a.got[h.Location] = true
			if h.Location == a.want {
				close(a.arrived)
			}
		}
		a.mu.Unlock()
	}
}

// await waits, within killedSubscriberBound, for loc to arrive.
func (a *arrivals) await(t *testing.T, loc wire.Location) {
	t.Helper()
	a.mu.Lock()
	a.want = loc
	if a.got[loc] {
		close(a.arrived)
	}
	a.mu.Unlock()
	select {
	case <-a.arrived:
	case <-time.After(killedSubscriberBound):
		assert.Fail(t, "the last object did not reach a live subscriber", "%v", loc)
	}
}

func (a *arrivals) has(loc wire.Location) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.got[loc]
}

// TestKilledSubscriber: a publisher writes two tracks from one loop, as a
// live source does. A subscriber process takes one of them alone and is
// killed with SIGKILL; two in-process subscribers in their own sessions
// take the other. The dead subscriber is cut off as too far behind, the
// publisher's writes keep returning, and the live subscribers get every
// object of every group.
func TestKilledSubscriber(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in the helper process")
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t) })
			solo, err := NewLocalTrack(wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("solo")}, nil)
			require.NoError(t, err)
			shared, err := NewLocalTrack(wire.FullTrackName{Namespace: testTrack.Namespace, Name: []byte("shared")}, nil)
			require.NoError(t, err)
			soloServed := make(chan *ServedSubscription, 1)
			handler := HandlerFunc(func(r Request) {
				if sr, ok := r.(*SubscribeRequest); ok {
					for _, track := range []*LocalTrack{solo, shared} {
						if sr.Track.Equal(track.Name()) {
							ss, err := track.Accept(sr, AcceptOptions{})
							if err == nil && track == solo {
								soloServed <- ss
							}
							return
						}
					}
				}
				DefaultHandler.ServeMOQT(r)
			})

			base, certDER := listenLoopback(t, &Config{Handler: handler, Logger: slog.New(slog.DiscardHandler),
				MaxIdleTimeout: killedIdleTimeout})
			srv := base.srv

			ctx, cancel := context.WithTimeout(context.Background(), 4*killedSubscriberBound)
			defer cancel()
			var live [2]*Subscription
			for i := range live {
				p := base.connect(t, tr.scheme, nil)
				live[i], err = p.client.Subscribe(ctx, shared.Name(), wire.Params{})
				require.NoError(t, err)
			}
			// Both are served before the first object, so that the join
			// race (see TestStressJoinLeave) plays no part here.
			require.Eventually(t, func() bool { return len(shared.snapshot()) == len(live) }, killedSubscriberBound, time.Millisecond)
			// The helper's session is accepted too, as a server would.
			childSession := make(chan *Session, 1)
			go func() {
				s, err := srv.Accept(ctx)
				if err == nil {
					childSession <- s
				}
				close(childSession)
			}()
			t.Cleanup(func() {
				if s, ok := <-childSession; ok {
					s.Close()
					<-s.Context().Done()
				}
			})

			// The publisher's loop: a group to each track in turn.
			const payloadSize = 16 << 10
			pad := make([]byte, payloadSize)
			var (
				slowest      time.Duration
				writeErr     error
				sharedGroups uint64 // groups of shared written whole
			)
			stop := make(chan struct{})
			stopped := make(chan struct{})
			started := make(chan struct{})
			go func() {
				defer close(stopped)
				timed := func(f func() error) bool {
					start := time.Now()
					err := f()
					slowest = max(slowest, time.Since(start))
					if err != nil && writeErr == nil {
						writeErr = err
					}
					return err == nil
				}
				for g := uint64(0); ; g++ {
					if g == 1 {
						close(started)
					}
					for _, track := range []*LocalTrack{solo, shared} {
						w := track.OpenSubgroup(g, 0, SubgroupOptions{EndOfGroup: true})
						for o := uint64(0); o < stressObjects; o++ {
							loc := wire.Location{Group: g, Object: o}
							payload := append(stressPayload(loc), pad[16:]...)
							if !timed(func() error { return writeObject(w, o, nil, payload) }) {
								return
							}
						}
						if !timed(w.Close) {
							return
						}
						if track == shared {
							sharedGroups++
						}
					}
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}()
			<-started

			var readers sync.WaitGroup
			readCtx, stopReading := context.WithCancel(ctx)
			defer stopReading()
			got := [2]*arrivals{}
			for i, sub := range live {
				got[i] = newArrivals()
				readers.Add(1)
				go readEveryStream(readCtx, sub, &readers, got[i].record)
			}

			child := startHelperSubscriber(t, tr.scheme, srv, certDER, "solo")
			ss := recvOrFail(t, soloServed)
			time.Sleep(200 * time.Millisecond) // mid-stream
			require.NoError(t, child.Process.Kill())
			_ = child.Wait()

			// The dead subscriber is cut off by the publisher, not by
			// QUIC's idle timeout: its subscription ends TOO_FAR_BEHIND.
			select {
			case <-ss.Context().Done():
			case <-time.After(killedSubscriberBound):
				stopReading()
				require.FailNow(t, "the killed subscriber was not cut off")
			}
			var de *DoneError
			require.ErrorAs(t, ss.Err(), &de)
			assert.Equal(t, wire.DoneTooFarBehind, de.Code)
			close(stop)
			select {
			case <-stopped:
			case <-time.After(killedSubscriberBound):
				stopReading()
				require.FailNow(t, "the publisher's write is still blocked on the killed subscriber")
			}
			require.NoError(t, writeErr)
			assert.Less(t, slowest, killedSubscriberBound, "the slowest write")

			// Every group written reaches both live subscribers.
			require.NotZero(t, sharedGroups)
			last := wire.Location{Group: sharedGroups - 1, Object: stressObjects - 1}
			for i := range got {
				got[i].await(t, last)
			}
			stopReading()
			readers.Wait()
			for i := range got {
				var missing []string
				for g := range sharedGroups {
					for o := uint64(0); o < stressObjects; o++ {
						if loc := (wire.Location{Group: g, Object: o}); !got[i].has(loc) {
							missing = append(missing, loc.String())
						}
					}
				}
				assert.Empty(t, missing, "objects live subscriber %d never got (of %d groups)", i, sharedGroups)
			}
		})
	}
}
