package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/moqttest"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// lockedBuffer is a narrator's stderr written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var pipeTrack = wire.FullTrackName{Namespace: wire.NewNamespace("ns"), Name: []byte("t")}

// TestPubFailsWhenDeliveryUnconfirmed: moqt pub ends the track and closes
// its session, which waits for the subscriber to confirm what it read. A
// subscriber that reads confirms, and pub succeeds; one that does not
// within the close timeout leaves pub failing with ErrCloseTimeout, where
// it used to exit 0 having lost what was in flight.
func TestPubFailsWhenDeliveryUnconfirmed(t *testing.T) {
	for _, reads := range []bool{true, false} {
		name := "subscriber reads"
		if !reads {
			name = "subscriber does not confirm"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				p, stderr := pipePublisher(t)
				n := p.n
				// The subscriber leaves its data unread for a minute, stall
				// watchdog off, so that it finishes its request stream
				// only when it reads.
				client, server := moqttest.Pair(t, transport.PipeConfig{},
					&moqt.Config{Handler: moqt.HandlerFunc(p.serve), CloseTimeout: 2 * time.Second},
					&moqt.Config{DoneLinger: time.Minute, ReadStallTimeout: -1})
				p.sess = server
				sub, err := client.Subscribe(ctx, pipeTrack, wire.Params{})
				require.NoError(t, err)
				if reads {
					go func() {
						for {
							if _, err := sub.ReadObject(ctx); err != nil {
								return
							}
						}
					}()
				}
				start := time.Now()
				err = runPub(ctx, n, p, strings.NewReader("hello"), &pubOptions{size: 16, groupInterval: time.Second})
				if reads {
					require.NoError(t, err)
					assert.Contains(t, stderr.String(), "moqt pub: ended")
					return
				}
				require.ErrorIs(t, err, moqt.ErrCloseTimeout)
				assert.Contains(t, err.Error(), "the server did not confirm that it received everything written")
				assert.Equal(t, 2*time.Second, time.Since(start), "pub gave up after the close timeout")
				assert.NotContains(t, stderr.String(), "moqt pub: ended")
			})
		})
	}
}

// pipePublisher is moqt pub's publisher of pipeTrack, before its session
// is set, and its stderr.
func pipePublisher(t *testing.T) (*publisher, *lockedBuffer) {
	t.Helper()
	track, err := moqt.NewLocalTrack(pipeTrack, nil)
	require.NoError(t, err)
	stderr := &lockedBuffer{}
	return &publisher{n: &narrator{w: stderr, prefix: "moqt pub: "}, track: track, watched: make(chan struct{})}, stderr
}

// pipeTrackServed is pipeTrack, served over a Pipe to client, whose
// first SUBSCRIBE it accepts, closing served then.
func pipeTrackServed(t *testing.T) (track *moqt.LocalTrack, client *moqt.Session, served <-chan struct{}) {
	t.Helper()
	track, err := moqt.NewLocalTrack(pipeTrack, nil)
	require.NoError(t, err)
	accepted := make(chan struct{})
	client, _ = moqttest.Pair(t, transport.PipeConfig{}, &moqt.Config{Handler: moqt.HandlerFunc(func(r moqt.Request) {
		if sr, ok := r.(*moqt.SubscribeRequest); ok {
			_, _ = track.Accept(sr, moqt.AcceptOptions{})
			close(accepted)
		}
	})}, nil)
	return track, client, accepted
}

// subOver runs moqt sub on sess for pipeTrack: what it wrote, what it
// said and how it ended.
func subOver(ctx context.Context, sess *moqt.Session) (string, *lockedBuffer, error) {
	var stderr lockedBuffer
	var out bytes.Buffer
	err := runSub(ctx, &narrator{w: &stderr, prefix: "moqt sub: "}, &out, sess, pipeTrack, &subOptions{})
	return out.String(), &stderr, err
}

// subWhilePublishing runs moqt sub over a pipe for pipeTrack, which
// publish writes to once the subscription is served: what sub wrote, what
// it said and how it ended.
func subWhilePublishing(t *testing.T, publish func(*moqt.LocalTrack)) (string, *lockedBuffer, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	track, client, served := pipeTrackServed(t)
	published := make(chan struct{})
	go func() {
		defer close(published)
		<-served
		publish(track)
	}()
	out, stderr, err := subOver(ctx, client)
	<-published
	return out, stderr, err
}

// rawPublisher plays a publisher byte by byte on conn: it answers one
// SUBSCRIBE, sends one subgroup stream with one object, and ends the
// subscription with PUBLISH_DONE TRACK_ENDED counting count streams.
func rawPublisher(t *testing.T, conn transport.Conn, count uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := conn.AcceptStream(ctx)
	require.NoError(t, err)
	typ, _, err := wire.NewMessageReader(req).ReadFrame()
	require.NoError(t, err)
	require.Equal(t, wire.MsgSubscribe, typ)
	moqttest.AnswerRawSubscribe(t, conn, req, count)
}

// TestSubFailsWhenStreamsMissing: a publisher ends the track with
// TRACK_ENDED counting two data streams, and one arrives. moqt sub writes
// what came, warns once the linger has passed, and fails: it used to say
// the track ended and exit 0 with a copy lacking a whole stream. With the
// count right it ends as before.
func TestSubFailsWhenStreamsMissing(t *testing.T) {
	for _, count := range []uint64{1, 2} {
		name := "whole"
		if count > 1 {
			name = "missing"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				conn, sess := moqttest.RawPeer(t, transport.PipeConfig{}, "/", &moqt.Config{DoneLinger: 2 * time.Second})
				published := make(chan struct{})
				go func() {
					defer close(published)
					rawPublisher(t, conn, count)
				}()
				var stderr lockedBuffer
				var out bytes.Buffer
				n := &narrator{w: &stderr, prefix: "moqt sub: "}
				err := runSub(ctx, n, &out, sess, pipeTrack, &subOptions{})
				<-published
				assert.Equal(t, "hello", out.String(), "what came is written")
				if count == 1 {
					require.NoError(t, err)
					assert.Contains(t, stderr.String(), "the track ended (TRACK_ENDED)")
					return
				}
				require.Error(t, err)
				assert.Contains(t, err.Error(), "1 of the 2 data streams it counted never arrived")
				assert.Contains(t, err.Error(), "TRACK_ENDED")
				assert.Contains(t, stderr.String(), "moqt sub: not every data stream of the subscription arrived")
				assert.NotContains(t, stderr.String(), "the track ended (TRACK_ENDED)")
			})
		})
	}
}

// TestSubFailsWhenWrittenOutOfOrder: objects of a group that arrive after
// later groups were written are written out of order, and moqt sub then
// fails though the track ended: its output is not the track's bytes in
// order. It exited 0 with two objects swapped in a file received over a
// lossy path. The publisher here writes no End of Group, so the
// sequencer gives group 0 up after sequenceStall.
func TestSubFailsWhenWrittenOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		out, _, err := subWhilePublishing(t, func(track *moqt.LocalTrack) {
			write := func(w *moqt.SubgroupWriter, g, o uint64, p string) {
				assert.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: o}, Payload: []byte(p)}))
			}
			g0 := track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
			write(g0, 0, 0, "a")
			g1 := track.OpenSubgroup(1, 0, moqt.SubgroupOptions{})
			write(g1, 1, 0, "c")
			assert.NoError(t, g1.Close())
			time.Sleep(2 * sequenceStall) // group 0 is given up, group 1 written
			write(g0, 0, 1, "b")
			assert.NoError(t, g0.Close())
			time.Sleep(time.Second)
			track.End(wire.DoneTrackEnded, "done")
		})
		assert.Equal(t, "acb", out, "written as it came")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "1 objects arrived after later groups were written, and were written out of order")
		assert.Contains(t, err.Error(), "TRACK_ENDED")
	})
}

// TestSubFailsWhenGroupEndedShort: group 0's stream is reset after two of
// its objects, before its End of Group, and the track then ends with
// TRACK_ENDED. moqt sub writes what came and fails: it used to exit 0, as
// behind a relay that cut it off (TOO_FAR_BEHIND) while the publisher
// ended the track, with two of a file's three objects. Whole, the groups
// end as before.
func TestSubFailsWhenGroupEndedShort(t *testing.T) {
	for _, reset := range []bool{false, true} {
		name := "whole"
		if reset {
			name = "reset"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				out, stderr, err := subWhilePublishing(t, func(track *moqt.LocalTrack) {
					g := &groupWriter{track: track}
					for _, p := range []string{"a", "b"} {
						assert.NoError(t, g.write([]byte(p)))
					}
					if reset {
						time.Sleep(time.Second) // read before the reset, which discards what was not
						g.w.Reset(wire.ResetTooFarBehind)
						g.w, g.group = nil, 1
					} else {
						assert.NoError(t, g.endGroup())
					}
					assert.NoError(t, g.write([]byte("c")))
					assert.NoError(t, g.endGroup())
					time.Sleep(time.Second)
					track.End(wire.DoneTrackEnded, "done")
				})
				assert.Equal(t, "abc", out, "what came is written")
				if !reset {
					require.NoError(t, err)
					assert.Contains(t, stderr.String(), "the track ended (TRACK_ENDED)")
					return
				}
				require.Error(t, err)
				assert.Contains(t, err.Error(), "the streams of 1 groups (0) ended short, before their End of Group: objects are missing")
				assert.Contains(t, err.Error(), "TRACK_ENDED")
			})
		})
	}
}

// serveTrack answers SUBSCRIBE and FETCH from track, and refuses the rest.
func serveTrack(track *moqt.LocalTrack) moqt.HandlerFunc {
	return func(r moqt.Request) {
		switch r := r.(type) {
		case *moqt.SubscribeRequest:
			_, _ = track.Accept(r, moqt.AcceptOptions{})
		case *moqt.FetchRequest:
			_ = track.Fetch(r)
		default:
			moqt.DefaultHandler.ServeMOQT(r)
		}
	}
}

// halfWrittenTrack serves pipeTrack over a Pipe to client: group 0 whole
// ("a" and its End of Group), then group 1's first object begun and half
// written, its Largest Object. A fill or FETCH that reaches 1:0 waits for
// it up to the server's fill timeout (2s), then reports it timed out, as a
// relay does when its publisher does not answer in time (one frozen,
// SIGSTOP). finish completes the object and its group.
func halfWrittenTrack(t *testing.T) (track *moqt.LocalTrack, client *moqt.Session, finish func()) {
	t.Helper()
	track, err := moqt.NewLocalTrack(pipeTrack, nil)
	require.NoError(t, err)
	track.SetCache(moqt.CacheLimits{Objects: 100})
	g := &groupWriter{track: track}
	require.NoError(t, g.write([]byte("a")))
	require.NoError(t, g.endGroup())
	w := track.OpenSubgroup(1, 0, moqt.SubgroupOptions{EndOfGroup: true})
	ow, err := w.BeginObject(0, 10, nil)
	require.NoError(t, err)
	_, err = ow.Write([]byte("hello"))
	require.NoError(t, err)
	client, _ = moqttest.Pair(t, transport.PipeConfig{}, &moqt.Config{FillTimeout: 2 * time.Second, Handler: serveTrack(track)}, nil)
	return track, client, func() {
		_, err := ow.Write([]byte("12345"))
		assert.NoError(t, err)
		assert.NoError(t, ow.Close())
		assert.NoError(t, w.Close())
	}
}

// TestTimedOutRangeFails: moqt sub -fill 2 joins at 1:0, an object still
// being written, and moqt fetch asks for 0:0 through 1:0. Written whole
// within the fill timeout, the object comes and each succeeds; not, the
// server reports it timed out (END_OF_TIMED_OUT_RANGE) and each fails, sub
// at TRACK_ENDED. They used to exit 0 without it (sub saying so only under
// -v): joining through a relay whose publisher was frozen (SIGSTOP) for 3 s,
// the fill's first 5 groups timed out; the FETCH gave "0 objects, 1 gaps".
func TestTimedOutRangeFails(t *testing.T) {
	runs := map[string]func(ctx context.Context, n *narrator, out io.Writer, client *moqt.Session) error{
		"sub": func(ctx context.Context, n *narrator, out io.Writer, client *moqt.Session) error {
			return runSub(ctx, n, out, client, pipeTrack, &subOptions{fill: 2})
		},
		"fetch": func(ctx context.Context, n *narrator, out io.Writer, client *moqt.Session) error {
			return runFetch(ctx, n, out, client, pipeTrack, wire.RangeFilterToObject(wire.Location{}, wire.Location{Group: 1}), false, false)
		},
	}
	failures := map[string][]string{
		"sub":   {"but the server did not get 1 ranges of the fill or of the start in time: objects are missing", "TRACK_ENDED"},
		"fetch": {"1 ranges did not come in time: objects are missing"},
	}
	for _, command := range []string{"sub", "fetch"} {
		for _, late := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/late=%v", command, late), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					track, client, finish := halfWrittenTrack(t)
					published := make(chan struct{})
					go func() {
						defer close(published)
						time.Sleep(time.Second)
						if late {
							time.Sleep(4 * time.Second) // past the fill timeout
						}
						finish()
						time.Sleep(time.Second)
						track.End(wire.DoneTrackEnded, "done")
					}()
					var stderr lockedBuffer
					var out bytes.Buffer
					err := runs[command](ctx, &narrator{w: &stderr, prefix: "moqt " + command + ": "}, &out, client)
					<-published
					if !late {
						require.NoError(t, err)
						assert.Equal(t, "ahello12345", out.String())
						return
					}
					assert.Equal(t, "a", out.String(), "what came is written")
					require.Error(t, err)
					for _, want := range failures[command] {
						assert.Contains(t, err.Error(), want)
					}
					assert.Contains(t, stderr.String(), "in time", "the gap is told")
				})
			})
		}
	}
}

// TestPubFailsWhenItCutASubscriber: a subscriber (a relay, say) that falls
// too far behind a file being published is cut off, and lacks objects:
// moqt pub says so and fails, where it said "a subscriber left" and exited
// 0, as if what it wrote had been delivered (a 6 MiB file through moqt
// relay over a 10 % lossy link: the relay cut off, both subscribers behind
// it with nothing).
func TestPubFailsWhenItCutASubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, stderr := pipePublisher(t)
		n := p.n
		client, server := moqttest.Pair(t, transport.PipeConfig{StreamWindow: 16 << 10},
			&moqt.Config{Handler: moqt.HandlerFunc(p.serve), MaxSubscriberBacklog: 64 << 10},
			&moqt.Config{ReadStallTimeout: -1})
		p.sess = server
		_, err := client.Subscribe(ctx, pipeTrack, wire.Params{})
		require.NoError(t, err)
		// It never reads.
		err = runPub(ctx, n, p, bytes.NewReader(make([]byte, 1<<20)), &pubOptions{size: 16 << 10})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "1 subscriber(s) fell too far behind and were cut off")
		assert.Contains(t, stderr.String(), "a subscriber fell too far behind and was cut off, lacking objects (TOO_FAR_BEHIND")
		assert.NotContains(t, stderr.String(), "moqt pub: ended")
	})
}

// TestSubTrackStatusTimeoutWaits: a relay whose only announcer of the
// track never answers gives TRACK_STATUS TIMEOUT; moqt sub then holds its
// SUBSCRIBE for a publisher (-wait), as after DOES_NOT_EXIST, and gets the
// track from its start when one comes. It used to fail at once ("no
// publisher came in time").
func TestSubTrackStatusTimeoutWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		track, err := moqt.NewLocalTrack(pipeTrack, nil)
		require.NoError(t, err)
		track.SetCache(moqt.CacheLimits{Objects: 100})
		serve := serveTrack(track)
		client, _ := moqttest.Pair(t, transport.PipeConfig{}, &moqt.Config{Handler: moqt.HandlerFunc(func(r moqt.Request) {
			if st, ok := r.(*moqt.TrackStatusRequest); ok {
				_ = st.Reject(wire.ReqTimeout, "upstream did not answer")
				return
			}
			serve(r)
		})}, nil)
		published := make(chan struct{})
		defer func() { <-published }()
		go func() {
			defer close(published)
			time.Sleep(time.Second)
			g := &groupWriter{track: track}
			assert.NoError(t, g.write([]byte("a")))
			assert.NoError(t, g.write([]byte("b")))
			assert.NoError(t, g.endGroup())
			track.End(wire.DoneTrackEnded, "done")
		}()
		var stderr lockedBuffer
		var out bytes.Buffer
		err = runSub(ctx, &narrator{w: &stderr, prefix: "moqt sub: "}, &out, client, pipeTrack, &subOptions{lines: true, wait: 30 * time.Second})
		require.NoError(t, err, "stderr: %s", stderr.String())
		assert.Equal(t, "a\nb\n", out.String())
		assert.Contains(t, stderr.String(), "waiting up to 30s for a publisher")
	})
}

// TestPubInterruptEndsAtGroupBoundary: an interrupted moqt pub reads on to
// the open group's end (-group-objects here) before it ends the track, and
// puts End of Group there; input that stops first leaves the group ended
// where it stands, finishWait later. It used to end the group at once: a
// second publisher of the track fed the same input went on, and the relay
// dropped its objects past that End of Group (§2.1), lines missing at
// every subscriber.
func TestPubInterruptEndsAtGroupBoundary(t *testing.T) {
	for _, more := range []bool{true, false} {
		t.Run(fmt.Sprintf("more input=%v", more), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				p, read := readPublished(t, ctx)
				in, feed := io.Pipe()
				defer feed.Close()
				pubCtx, interrupt := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					done <- runPub(pubCtx, p.n, p, in, &pubOptions{lines: true, groupObjects: 4})
				}()
				fmt.Fprintln(feed, "a")
				fmt.Fprintln(feed, "b")
				synctest.Wait()
				start := time.Now()
				interrupt()
				synctest.Wait()
				want := []string{"{0, 0} NORMAL a", "{0, 1} NORMAL b"}
				if more {
					fmt.Fprintln(feed, "c")
					fmt.Fprintln(feed, "d")
					fmt.Fprintln(feed, "e") // the next group's: not published
					want = append(want, "{0, 2} NORMAL c", "{0, 3} NORMAL d", "{0, 4} END_OF_GROUP ")
				} else {
					want = append(want, "{0, 2} END_OF_GROUP ")
				}
				require.NoError(t, <-done)
				if !more {
					assert.Equal(t, finishWait, time.Since(start), "ended where it stood after finishWait")
				}
				r := <-read
				var de *moqt.DoneError
				require.ErrorAs(t, r.err, &de)
				assert.Equal(t, wire.DoneTrackEnded, de.Code)
				var got []string
				for _, o := range r.objs {
					got = append(got, fmt.Sprintf("%v %s %s", o.Location, o.Status, o.Payload))
				}
				assert.Equal(t, want, got)
			})
		})
	}
}

// TestClockInterruptEndsAtGroupBoundary: an interrupted moqt clock ticks
// on to the end of the second, its group, and puts End of Group there, as
// another clock of the track does (see TestPubInterruptEndsAtGroupBoundary).
func TestClockInterruptEndsAtGroupBoundary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, read := readPublished(t, ctx)
		clockCtx, interrupt := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- runClock(clockCtx, p, 10, clockHooks{}) }()
		time.Sleep(1350 * time.Millisecond) // 0.35 s into the clock's first group
		interrupt()
		require.NoError(t, <-done)
		r := <-read
		var de *moqt.DoneError
		require.ErrorAs(t, r.err, &de)
		require.Len(t, r.objs, 11, "the group's ten ticks and its End of Group")
		g := r.objs[0].Location.Group
		for i, o := range r.objs[:10] {
			assert.Equal(t, wire.Location{Group: g, Object: uint64(i)}, o.Location)
		}
		assert.Equal(t, wire.Location{Group: g, Object: 10}, r.objs[10].Location)
		assert.Equal(t, wire.ObjectEndOfGroup, r.objs[10].Status)
	})
}

// published is what a subscriber read of a track: every object, and the
// error that ended the subscription.
type published struct {
	objs []moqt.Object
	err  error
}

// readPublished is moqt pub's publisher of pipeTrack over a Pipe, with a
// subscriber reading the track to its end.
func readPublished(t *testing.T, ctx context.Context) (*publisher, <-chan published) {
	t.Helper()
	p, _ := pipePublisher(t)
	client, server := moqttest.Pair(t, transport.PipeConfig{}, &moqt.Config{Handler: moqt.HandlerFunc(p.serve)}, nil)
	p.sess = server
	sub, err := client.Subscribe(ctx, pipeTrack, wire.Params{})
	require.NoError(t, err)
	read := make(chan published, 1)
	go func() {
		var r published
		for {
			o, err := sub.ReadObject(context.Background())
			if err != nil {
				r.err = err
				read <- r
				return
			}
			o.Payload = bytes.Clone(o.Payload)
			o.Properties = nil
			r.objs = append(r.objs, o)
		}
	}()
	return p, read
}
