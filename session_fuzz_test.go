package moqt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// FuzzSession runs a live Session against a fake peer that follows a
// program read from the fuzz input: SETUP (valid, generated or raw),
// request streams opened with requests and later messages (well-formed
// ones built with the wire encoders from fuzzed fields, and raw bytes),
// FIN, RESET_STREAM and STOP_SENDING on them, subgroup and fetch data
// streams, padding, datagrams, the passing of time, a peer that stops
// reading, and the connection's close or loss; operations may repeat, or
// run in bursts that race the session. The local session serves a
// LocalTrack through a ServeMux (SUBSCRIBE, FETCH from a cache that may
// FETCH what it misses from the peer, TRACK_STATUS, namespace requests,
// PUBLISH intake), publishes on it, and makes requests of its own
// (SUBSCRIBE, FETCH, SUBSCRIBE_NAMESPACE, PUBLISH, …), which it updates,
// closes or drains with Shutdown, for the peer's answers and data to hit.
//
// Each input runs in a testing/synctest bubble over a transport.Pipe, so
// the session's timers run on the bubble's clock and an input takes
// milliseconds. The checks:
//   - nothing panics, in any goroutine (that ends the fuzzing process),
//     nor in the library code a Handler calls (the session would recover
//     that);
//   - the bytes held for streams and datagrams waiting for an alias stay
//     within their Config bounds, and the heap the input makes live stays
//     under fuzzHeapBound, which the configured limits keep it far below
//     while the peer may send three times more;
//   - at the end the session is either up, and then answers a request
//     (probe), or has ended with a *SessionError: the peer's own close, or
//     a close of this end's with a code §12.2 defines other than
//     INTERNAL_ERROR, which it uses only for its own failures;
//   - after the close, the session's goroutines, the Handler calls and
//     every call the application made into the session return without
//     anything else happening, the LocalTrack serves no subscription of
//     the session, and the bubble ends with no goroutine left;
//   - a second session on the same track (fuzzWithBystander) stays up,
//     and its subscription too.
//
// Set MOQT_FUZZ_TRACE=1 to log each operation of the inputs run and what
// the local session sends on its request streams.
func FuzzSession(f *testing.F) {
	for _, seed := range fuzzSessionSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > fuzzMaxInput {
			return
		}
		// A hang is a failure too. The bubble's clock does not move while
		// a goroutine runs, so this timer runs on the wall clock, outside
		// the bubble, and panics with every goroutine's stack.
		hang := time.AfterFunc(fuzzHangAfter, func() {
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("FuzzSession: input still running after %v\n%s", fuzzHangAfter,
				buf[:runtime.Stack(buf, true)]))
		})
		defer hang.Stop()
		synctest.Test(t, func(t *testing.T) { runSessionProgram(t, prog) })
	})
}

// fuzzHangAfter is how long an input may run on the wall clock. Inputs
// take milliseconds; this only turns a hang into a crash report.
const fuzzHangAfter = time.Minute

// fuzzMaxInput bounds the inputs run. Longer ones explore nothing the
// operations' operands cannot (a raw operand is at most fuzzMaxBlob), and
// cost the fuzzer's minimization, which tries removing each byte, minutes.
const fuzzMaxInput = 4 << 10

// fuzzMaxOps bounds the operations one input runs, repeated ones
// included, so that no input slows the fuzzer down for long.
const fuzzMaxOps = 256

// fuzzPeerBudget bounds the bytes the fake peer sends in one input. It is
// well above fuzzHeapBound, so a session that kept what it is sent would
// be caught.
const fuzzPeerBudget = 48 << 20

// fuzzHeapBound bounds the growth of the live heap while an input runs.
// The session holds little beyond its configured limits (fuzzConfig: 64
// KiB of read-ahead, 64 KiB windows, 64 KiB objects, 64 KiB backlogs) and
// a few fixed buffers per stream and subscription; the transport.Pipe,
// which stands for the network, holds at most a connection window each
// way. 16 MiB leaves room for the garbage the check does not wait for,
// while a session holding what the peer sends would pass it.
const fuzzHeapBound = 16 << 20

// fuzzWriteWait bounds each write and stream opening of the fake peer on
// the bubble's clock. A peer that cannot write because the session does
// not read moves on, with its bytes partly written, as a fuzzer should.
const fuzzWriteWait = 50 * time.Millisecond

// fuzzTrace makes runSessionProgram log each operation.
var fuzzTrace = os.Getenv("MOQT_FUZZ_TRACE") != ""

// The flags byte that starts a program.
const (
	fuzzLibClient    = 1 << iota // the local session is the client, the peer the server
	fuzzWebTransport             // the Pipe imitates WebTransport
	fuzzAutoSetup                // the peer sends a valid SETUP before the first operation
	fuzzSharedAlias              // Config.SharedTrackAliases
	fuzzLimits                   // MAX_REQUEST_UPDATES, MAX_FILTER_RANGES, MAX_AUTH_TOKEN_CACHE_SIZE set
	fuzzRefuse                   // the Handler refuses every request (DefaultHandler)
	fuzzReliable                 // RESET_STREAM_AT (raw QUIC only)
	fuzzSmallWindows             // 4 KiB stream and 16 KiB connection windows
)

// The second flags byte.
const (
	fuzzMiss          = 1 << iota // the local track's cache asks the peer for what it misses (CacheLimits.Miss)
	fuzzTrackProps                // the local track has Track Properties (§10)
	fuzzPaused                    // the peer starts with its reading paused
	fuzzWithBystander             // a second session subscribes to the local track (startBystander)
	// fuzzDraftShift picks the session's draft from two bits: 21 (0, the
	// seeds' draft), 20, 19 or 18.
	fuzzDraftShift = 4
)

// fuzzDrafts are the drafts fuzzDraftShift picks from.
var fuzzDrafts = [4]wire.Version{wire.Draft21, wire.Draft20, wire.Draft19, wire.Draft18}

// fuzzRun is one input's run: the local session, the fake peer's state,
// and what the checks need to know.
type fuzzRun struct {
	t     *testing.T
	p     fuzzProgram
	cfg   *Config
	s     *Session
	peer  *transport.PipeConn
	track *LocalTrack

	libClient bool
	refuse    bool
	handshake chan error
	setupOK   bool // the local session's handshake succeeded

	// ctx bounds the application's calls into the session. It ends only
	// after the checks, which require those calls to return once the
	// session has closed, whatever their context.
	ctx    context.Context
	cancel context.CancelFunc

	peerWG sync.WaitGroup // the fake peer's goroutines
	app    sync.WaitGroup // the application's goroutines

	mu      sync.Mutex                // guards the fields below, which the peer's and application's goroutines use
	reqs    []transport.Stream        // request streams: the peer's and those the local session opened
	libUnis []transport.ReceiveStream // unidirectional streams the local session opened
	libReqs []fuzzLibRequest          // requests the local session made
	// reading is closed while the peer reads what the local session
	// sends; while it is open the peer's readers wait, and the session's
	// writes meet flow control.
	reading chan struct{}

	// The rest belongs to the goroutine running the program.
	ctrl      transport.SendStream  // the peer's control stream, once opened
	unis      []*fuzzUni            // data streams the peer opened
	nextID    uint64                // the peer's next Request ID
	libFirst  uint64                // the local session's first Request ID
	budget    int                   // bytes the peer may still send
	peerClose *transport.CloseError // the peer's close, if it closed
	lost      bool                  // the peer lost the connection (no close)
	heapBase  uint64                // the heap's allocated bytes at the start
	ops       int                   // operations run
	// trackEnded is set once the program ended the local track, which
	// ends the bystander's subscription too.
	trackEnded bool
	bystander  *fuzzBystander
}

// fuzzBystander is a second session, between two local endpoints, whose
// client subscribes to the local track and reads it: what the fuzzed
// peer does must not disturb it (§3.3.3: a relay serves many
// subscribers; a session's misbehaviour must not close another).
type fuzzBystander struct {
	pair *pair
	sub  *Subscription
	read sync.WaitGroup
}

// fuzzUni is a unidirectional stream the peer opened, with the state
// needed to write more objects on it.
type fuzzUni struct {
	str     transport.SendStream
	sub     *wire.SubgroupEncoder // a subgroup stream's
	fetch   *wire.FetchEncoder    // a fetch stream's
	started bool                  // an object was written
	next    uint64                // the next Object ID, subgroup streams
	group   uint64                // the last entry's group, fetch streams
}

// fuzzLibRequest is a request the local session made, for the operations
// that update or close it.
type fuzzLibRequest struct {
	close  func() error
	update func(ctx context.Context, p wire.Params) error
}

// fuzzConfig is the local session's Config for flags: small limits, so
// that the fuzzer reaches them and the heap bound means something.
func fuzzConfig(flags byte, handler Handler) *Config {
	cfg := &Config{
		Logger:                quietLogger,
		Handler:               handler,
		MaxPendingStreams:     8,
		MaxPendingBytes:       64 << 10,
		MaxPendingDatagrams:   32,
		MaxSubscriberBacklog:  64 << 10,
		MaxObjectSize:         64 << 10,
		MaxActiveNamespaces:   64,
		MaxServedFetches:      4,
		MaxIncomingStreams:    16,
		MaxIncomingUniStreams: 16,
		SharedTrackAliases:    flags&fuzzSharedAlias != 0,
	}
	if flags&fuzzLimits != 0 {
		cfg.MaxRequestUpdates = 2
		cfg.MaxFilterRanges = 4
		cfg.MaxAuthTokenCacheSize = 256
	}
	return cfg.withDefaults()
}

// runSessionProgram runs prog in the calling bubble and checks the
// session, as FuzzSession describes.
func runSessionProgram(t *testing.T, prog []byte) {
	r := &fuzzRun{t: t, p: fuzzProgram{prog}, budget: fuzzPeerBudget, handshake: make(chan error, 1),
		reading: make(chan struct{})}
	flags, flags2 := r.p.u8(), r.p.u8()
	r.libClient = flags&fuzzLibClient != 0
	r.refuse = flags&fuzzRefuse != 0
	if flags2&fuzzPaused == 0 {
		close(r.reading)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	defer r.cancel()
	r.heapBase = heapBaseline()

	var props wire.KVList
	if flags2&fuzzTrackProps != 0 {
		props = wire.KVList{{Type: wire.PropObjectDeliveryTimeout, Value: 500},
			{Type: wire.PropMaxCacheDuration, Value: 3000}, {Type: wire.PropDefaultPublisherPriority, Value: 7},
			{Type: wire.PropDefaultPublisherGroupOrder, Value: uint64(wire.GroupOrderDescending)},
			{Type: wire.PropDynamicGroups, Value: 1}}
	}
	var err error
	r.track, err = NewLocalTrack(fuzzLocalTrack, props)
	require.NoError(t, err)
	limits := CacheLimits{Objects: 32, Bytes: 64 << 10}
	if flags2&fuzzMiss != 0 {
		limits.Miss = r.miss
	}
	r.track.SetCache(limits)
	// Something to FETCH and to report as the Largest Object.
	r.publish(0, 0, SubgroupOptions{EndOfGroup: true}, 3, 100, true)

	r.cfg = fuzzConfig(flags, r.handler())
	draft := fuzzDrafts[flags2>>fuzzDraftShift&3]
	r.cfg.Versions = []wire.Version{draft}
	pc := transport.PipeConfig{
		Protocol:         draft.ALPN(),
		StreamWindow:     16 << 10,
		ConnectionWindow: 64 << 10,
		WebTransport:     flags&fuzzWebTransport != 0,
		ReliableReset:    flags&fuzzReliable != 0,
	}
	if flags&fuzzSmallWindows != 0 {
		pc.StreamWindow, pc.ConnectionWindow = 4<<10, 16<<10
	}
	cc, sc := transport.Pipe(pipeConfig(pc, r.cfg))
	libConn := sc
	r.peer = cc
	// Request IDs: the client's are even, the server's odd (§6.4.2.1).
	r.nextID, r.libFirst = 1, 0
	if !r.libClient {
		libConn, r.peer = cc, sc
		r.nextID, r.libFirst = 0, 1
	}
	r.s = pipeSession(t, libConn, r.libClient, r.cfg)
	setup := r.s.ownSetup()
	if r.libClient {
		setup = r.s.pipeClientSetup()
	}
	r.goApp(func() { r.handshake <- r.s.handshake(context.Background(), setup) })
	r.startPeer()
	if flags2&fuzzWithBystander != 0 {
		r.startBystander()
	}
	if flags&fuzzAutoSetup != 0 {
		r.sendSetup(r.validSetup())
	}
	r.settle()

	for r.p.more() && r.ops < fuzzMaxOps {
		r.step()
	}
	r.finish()
}

// startBystander connects the bystander and subscribes it to the local
// track; it reads every object until its subscription ends.
func (r *fuzzRun) startBystander() {
	serve := HandlerFunc(func(req Request) {
		if sr, ok := req.(*SubscribeRequest); ok {
			_, _ = r.track.Accept(sr, AcceptOptions{})
			return
		}
		DefaultHandler.ServeMOQT(req)
	})
	b := &fuzzBystander{pair: newPipePair(r.t, transport.PipeConfig{}, &Config{Handler: serve}, nil)}
	sub, err := b.pair.client.Subscribe(r.ctx, fuzzLocalTrack, wire.Params{})
	require.NoError(r.t, err)
	b.sub = sub
	b.read.Go(func() {
		for {
			if _, err := sub.ReadObject(r.ctx); err != nil {
				return
			}
		}
	})
	r.bystander = b
}

// checkBystander checks that the bystander's sessions are up and, unless
// the local track ended, its subscription too; then closes them.
func (r *fuzzRun) checkBystander() {
	b := r.bystander
	if b == nil {
		return
	}
	require.NoError(r.t, context.Cause(b.pair.server.Context()), "the bystander's server session")
	require.NoError(r.t, context.Cause(b.pair.client.Context()), "the bystander's client session")
	if err := b.sub.Err(); !r.trackEnded && err != nil {
		// The bystander's objects come only from the fuzzed application's
		// writes, which may contradict themselves (a subgroup reopened
		// past its FIN): the subscriber then rightly ends the subscription
		// as a Malformed Track (§10.7). Any other end is harm the peer did.
		_, malformed := errors.AsType[*MalformedTrackError](err)
		require.True(r.t, malformed, "the bystander's subscription: %v", err)
	}
	require.NoError(r.t, b.pair.client.Close())
	require.NoError(r.t, b.pair.server.Close())
	r.waitEnded("the bystander's reader", b.read.Wait)
}

// step runs the next operation and waits for the session to settle.
func (r *fuzzRun) step() {
	r.ops++
	op := fuzzOps[r.p.pick(len(fuzzOps))]
	r.logf("op %d: %s", r.ops, op.name)
	op.run(r)
	r.settle()
}

// opRepeat runs the next operation, operands and all, 2 to 32 times, so
// that a short program can send much more than it is long. A repeat of a
// repeat is not run: it would multiply.
func (r *fuzzRun) opRepeat() {
	n := 2 + r.p.pick(31)
	at := r.p.b
	if len(at) == 0 || fuzzOps[int(at[0])%len(fuzzOps)].name == "repeat" || fuzzOps[int(at[0])%len(fuzzOps)].name == "burst" {
		return
	}
	for range n {
		if r.ops >= fuzzMaxOps {
			return
		}
		r.p.b = at
		r.step()
	}
}

// opBurst runs the next 2 to 5 operations back to back, without waiting
// for the session to settle between them, so that the peer's actions race
// the session's handling of those before. A repeat or burst among them is
// skipped.
func (r *fuzzRun) opBurst() {
	for range 2 + r.p.pick(4) {
		if !r.p.more() || r.ops >= fuzzMaxOps {
			return
		}
		r.ops++
		op := fuzzOps[r.p.pick(len(fuzzOps))]
		if op.name == "repeat" || op.name == "burst" {
			continue
		}
		r.logf("op %d: %s (burst)", r.ops, op.name)
		op.run(r)
	}
}

// fuzzOp is an operation of a program.
type fuzzOp struct {
	name string
	run  func(r *fuzzRun)
}

// fuzzOps are the operations a program is made of, selected by the
// opcode byte modulo their number. They are set in init: opRepeat runs
// them.
var fuzzOps []fuzzOp

func init() {
	fuzzOps = []fuzzOp{
		{"setup", (*fuzzRun).opSetup},
		{"control", (*fuzzRun).opControl},
		{"request", (*fuzzRun).opRequest},
		{"request-raw", (*fuzzRun).opRequestRaw},
		{"send", (*fuzzRun).opSend},
		{"send-raw", (*fuzzRun).opSendRaw},
		{"stream-end", (*fuzzRun).opStreamEnd},
		{"subgroup", (*fuzzRun).opSubgroup},
		{"fetch-stream", (*fuzzRun).opFetchStream},
		{"uni-raw", (*fuzzRun).opUniRaw},
		{"uni-more", (*fuzzRun).opUniMore},
		{"datagram", (*fuzzRun).opDatagram},
		{"local-request", (*fuzzRun).opLocalRequest},
		{"local-track", (*fuzzRun).opLocalTrack},
		{"sleep", (*fuzzRun).opSleep},
		{"close", (*fuzzRun).opClose},
		{"stop-local-stream", (*fuzzRun).opStopLocalStream},
		{"peer-reading", (*fuzzRun).opPeerReading},
		{"repeat", (*fuzzRun).opRepeat},
		{"burst", (*fuzzRun).opBurst},
	}
}

func (r *fuzzRun) logf(format string, args ...any) {
	if fuzzTrace {
		r.t.Logf(format, args...)
	}
}

// ---- the checks ----

// settle waits until every goroutine of the bubble waits, takes the
// handshake's result, and checks the bounds.
func (r *fuzzRun) settle() {
	synctest.Wait()
	if !r.setupOK {
		select {
		case err := <-r.handshake:
			r.setupOK = err == nil
			r.logf("  handshake: %v", err)
		default:
		}
	}
	r.checkBounds()
}

// fuzzHeapSlack is the garbage heapBaseline lets pass without a
// collection.
const fuzzHeapSlack = 4 << 20

// heapBaseline is the heap's allocated bytes when an input starts. It
// collects the garbage of earlier inputs once that is more than
// fuzzHeapSlack: garbage in the baseline hides as much growth from
// checkBounds, and a collection before every input would halve the
// fuzzer's pace.
func heapBaseline() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Uint64() > s[1].Value.Uint64()+fuzzHeapSlack {
		runtime.GC()
		return heapObjectBytes()
	}
	return s[0].Value.Uint64()
}

// heapObjectBytes is the heap's allocated bytes, garbage included, read
// without stopping the world.
func heapObjectBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// checkBounds checks the session's read-ahead accounting against its
// Config, and the heap's growth against fuzzHeapBound (collecting the
// garbage before it fails).
func (r *fuzzRun) checkBounds() {
	routes := &r.s.routes
	routes.mu.Lock()
	bytes, streams, datagrams := routes.pendingBytes, routes.pendingStreams, len(routes.pendingDatagrams)
	routes.mu.Unlock()
	require.LessOrEqual(r.t, bytes, r.cfg.MaxPendingBytes, "bytes read ahead for streams waiting for their alias")
	require.LessOrEqual(r.t, streams, r.cfg.MaxPendingStreams, "streams waiting for their alias")
	require.LessOrEqual(r.t, datagrams, r.cfg.MaxPendingDatagrams, "datagrams waiting for their alias")

	if heapObjectBytes() <= r.heapBase+fuzzHeapBound {
		return
	}
	runtime.GC()
	grown := int64(heapObjectBytes()) - int64(r.heapBase)
	require.LessOrEqual(r.t, grown, int64(fuzzHeapBound), "live heap grown by %d bytes after %d operations, "+
		"the peer having sent %d bytes", grown, r.ops, fuzzPeerBudget-r.budget)
}

// probe checks that a session still up still serves requests: a
// TRACK_STATUS from the peer is answered, or its stream reset, or the
// session closes (the program may have left it in a state where this
// request breaks a rule), within a minute. A session that lets it go
// unanswered is wedged. The probe needs a stream: a peer that holds all
// its stream credit gets none and skips it.
func (r *fuzzRun) probe() {
	if !r.setupOK || r.s.Context().Err() != nil {
		return
	}
	r.mu.Lock()
	select {
	case <-r.reading:
	default:
		close(r.reading) // the answer may need the connection's window
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	str, err := r.peer.OpenStreamSync(ctx)
	if err != nil {
		return
	}
	// Past the IDs the program's raw bytes most likely used: a gap in
	// Request IDs is no error.
	b, err := wire.AppendMessage(r.s.version, nil, &wire.TrackStatus{RequestID: r.nextID + 128,
		TrackNamespace: fuzzLocalTrack.Namespace, TrackName: fuzzLocalTrack.Name})
	require.NoError(r.t, err)
	_ = str.SetWriteDeadline(time.Now().Add(time.Minute))
	if _, err := str.Write(b); err != nil {
		return // the session stopped it, or closed
	}
	_ = str.Close()
	type answer struct {
		m   wire.Message
		err error
	}
	got := make(chan answer, 1)
	r.goPeer(func() {
		m, err := wire.NewMessageReader(str).ReadMessage(r.s.version)
		got <- answer{m, err}
	})
	select {
	case a := <-got:
		var se *transport.StreamError
		if a.err != nil && !errors.As(a.err, &se) && r.s.Context().Err() == nil {
			synctest.Wait() // a close that ended the stream may still be on its way
			require.Error(r.t, r.s.Context().Err(), "the probe's TRACK_STATUS stream ended unanswered: %v", a.err)
		}
		r.logf("probe: %v %v", a.m, a.err)
	case <-r.s.Context().Done():
	case <-time.After(time.Minute):
		require.Fail(r.t, "the session is up but left a TRACK_STATUS unanswered for a minute")
	}
}

// finish closes the session if it is up, checks how it ended, and that
// everything it started ends.
func (r *fuzzRun) finish() {
	t := r.t
	r.probe()
	ended := r.s.Context().Err() != nil
	closeErr := r.s.Close()
	cause := context.Cause(r.s.Context())
	switch {
	case closeErr == nil:
	case ended:
		require.NoError(t, closeErr, "Close of a session already over")
	case errors.Is(closeErr, ErrCloseTimeout):
		// The peer left streams this end finished unfinished.
	default:
		// The session ended as Close waited, other than with NO_ERROR.
		require.ErrorIs(t, closeErr, cause, "Close reports the session's end")
		require.NotEqual(t, wire.NoError, sessionErrorFrom(cause).Code, "a NO_ERROR end is no failure of Close")
	}
	se, ok := errors.AsType[*SessionError](cause)
	require.True(t, ok, "the session ended with %T %v, not a *SessionError", cause, cause)
	r.logf("ended by itself: %v, %v (remote %v)", ended, se, se.Remote)
	switch {
	case !ended && se.Code == wire.GoawayTimeout && r.s.away.sent.Load():
		// The application's Shutdown timed out while Close lingered to
		// deliver what was sent: its close came first, rightly.
		require.False(t, se.Remote, "Shutdown's close is a local close")
	case !ended:
		require.Equal(t, wire.NoError, se.Code, "Close's code")
		require.False(t, se.Remote, "Close is a local close")
	case se.Transport != nil:
		require.True(t, r.lost, "a transport error ended the session, but the connection was not lost: %v", se)
	case se.Remote:
		require.NotNil(t, r.peerClose, "a remote close that the peer did not send: %v", se)
		require.Equal(t, r.peerClose.Code, uint64(se.Code), "the peer's close code")
	default:
		require.True(t, se.Code.Known(), "closed with a code §12.2 does not define: %v", se)
		// INTERNAL_ERROR is this end's own failure. The one the peer can
		// cause is a local limit it crossed: an Object Properties block
		// over wire.DefaultMaxPropertiesLen (wire/object.go), which the
		// codec refuses before reading it.
		if se.Code == wire.InternalError {
			require.Contains(t, se.Reason, "exceed the local limit",
				"closed with INTERNAL_ERROR, which this end sends only for its own failures: %v", se)
		}
	}
	if !se.Remote && se.Transport == nil && r.peerClose == nil && !r.lost {
		// What the session reports is what it sent the peer. When the
		// peer closed too, the two closes may have crossed (in a burst),
		// and neither end hears the other's: the session's own close is
		// then its cause, rightly. TestCloseAfterConnectionEndedReportsIt
		// covers a close that comes after the peer's.
		ce, ok := errors.AsType[*transport.CloseError](context.Cause(r.peer.Context()))
		require.True(t, ok, "the peer saw %v, not a close", context.Cause(r.peer.Context()))
		require.True(t, ce.Remote, "the peer closed first (%v), yet the session reports its own close %v", ce, se)
		require.Equal(t, r.carried(uint64(se.Code)), ce.Code, "the code the peer received, for %v", se)
	}

	r.checkBystander()

	// Everything started for the session must end now, on its own: the
	// application's context is still live.
	r.waitEnded("the session's goroutines", r.s.goroutines.Wait)
	r.waitEnded("the Handler calls", r.s.handlers.Wait)
	r.waitEnded("the application's calls into the session", r.app.Wait)
	r.waitEnded("the peer's readers", r.peerWG.Wait)
	// The local track serves no subscription of the ended session: one
	// left would keep it, and its session, in memory.
	select {
	case <-r.track.Idle():
	case <-time.After(time.Minute):
		require.Fail(t, "the local track still serves a subscription of the ended session")
	}
	r.cancel()
}

// carried is code as the transport carries it: WebTransport's codes are
// 32 bits.
func (r *fuzzRun) carried(code uint64) uint64 {
	if r.s.conn.WebTransport() {
		return min(code, transport.MaxWebTransportCode)
	}
	return min(code, transport.MaxQUICCode)
}

// waitEnded fails unless wait returns within a minute of the bubble's
// clock, which passes at once when everything left is blocked for good.
func (r *fuzzRun) waitEnded(what string, wait func()) {
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		buf := make([]byte, 1<<20)
		r.t.Fatalf("%s still running after the session ended\n%s", what, buf[:runtime.Stack(buf, true)])
	}
}
