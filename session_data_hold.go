package moqt

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// A unidirectional stream's type and header must arrive within
// Config.DataStreamTimeout, or the session is closed with
// DATA_STREAM_TIMEOUT (§12.2). But the peer can send only what flow control
// lets it: while this end leaves data unread (an application that reads
// slowly or not yet, a ReadObject queue at its bound, a fetch stream held
// for its FETCH_OK, a loaded CPU), the connection's window fills and a new
// stream's header waits behind that data, through no fault of the peer's.
// A peer may also send a new stream's header after higher-priority data
// while the connection makes progress (§5.1). So the timeout counts only
// time in which the peer could have sent and did not: time in which every
// open data stream of the session has a Read waiting, so that this end has
// taken all that arrived, and no byte arrived on any of them.
//
// holdWatch keeps what that needs in one word, so that a Read costs two
// atomic additions on it and two on its stream, and no clock read: the
// data streams that are open and have no Read waiting (held: this end may
// be holding the peer back), and a count of events that show the peer
// sending (a Read that returned, a new data stream). A stream's header
// timer looks at the word every quarter of the timeout and times out once
// it has not changed, with nothing held, for four looks in a row: the
// whole timeout. A peer held back, or sending, is timed out a whole
// timeout, and at most a quarter more, after it last was.
//
// A peer that opens streams and sends no header on them while nothing is
// held back and nothing else arrives is closed as before. One that keeps
// other data flowing is not, for as long as it does: its headerless
// streams are bounded by its QUIC stream credit, and each costs a
// goroutine and a read buffer.
type holdWatch struct {
	// word holds the count of held streams in its low 32 bits and the
	// event count, wrapping, in the high 32.
	word atomic.Uint64
}

const (
	holdOne     = 1          // one held stream
	holdRelease = ^uint64(0) // added, one held stream less
	holdEvent   = 1 << 32    // one event
	holdMask    = holdEvent - 1
)

// watch returns str as the session reads it, not yet counted: its type and
// header are read first (see heldStream.startData).
func (h *holdWatch) watch(str transport.ReceiveStream) *heldStream {
	return &heldStream{ReceiveStream: str, h: h}
}

// Stream states for holdWatch: a stream counts as held while it is open
// and idle.
const (
	streamHeader  int32 = iota // its type and header are being read: not counted
	streamIdle                 // open, no Read waiting: held
	streamReading              // a Read waits for the stream
	streamDone                 // read to its end, reset or stopped
)

// heldStream is a data stream of the session: it tells the session's
// holdWatch when this end waits for the stream and when it does not. Read
// is called by one goroutine at a time; CancelRead from any.
type heldStream struct {
	transport.ReceiveStream
	h     *holdWatch
	state atomic.Int32
	// read is when a Read last returned bytes (mono.Now): a subgroup's
	// objects are stamped with it as received (Object.arrived), a clock
	// read per read from the transport rather than one per object.
	read atomic.Int64
}

// startData counts the stream once its header has been read: open and
// held until this end reads it, and an event, since data arrived.
func (s *heldStream) startData() {
	if s.state.CompareAndSwap(streamHeader, streamIdle) {
		s.h.word.Add(holdEvent + holdOne)
	}
}

// Read reads the stream, marking it not held while the Read waits.
func (s *heldStream) Read(b []byte) (int, error) {
	if !s.state.CompareAndSwap(streamIdle, streamReading) {
		n, err := s.ReceiveStream.Read(b) // not counted: in its header, or done
		s.stamp(n)
		if err != nil {
			// Its end came with its header (quic-go returns io.EOF with
			// the last bytes): nothing is left to hold, and startData
			// must not count it.
			s.state.CompareAndSwap(streamHeader, streamDone)
		}
		return n, err
	}
	s.h.word.Add(holdRelease)
	n, err := s.ReceiveStream.Read(b)
	s.stamp(n)
	switch {
	case err == nil:
		if s.state.CompareAndSwap(streamReading, streamIdle) {
			s.h.word.Add(holdEvent + holdOne)
		}
	case s.state.CompareAndSwap(streamReading, streamDone):
		// Its end (a FIN, a reset) arrived: an event; it is held no more.
		s.h.word.Add(holdEvent)
	}
	return n, err
}

// stamp records a Read that returned n bytes.
func (s *heldStream) stamp(n int) {
	if n > 0 {
		s.read.Store(mono.Now())
	}
}

// received is when the bytes read last were taken from the transport: at
// or after the arrival of every byte read so far, and 0 before any.
func (s *heldStream) received() int64 { return s.read.Load() }

// waiting reports whether a Read waits for the stream's data: the
// reader has taken all that arrived.
func (s *heldStream) waiting() bool { return s.state.Load() == streamReading }

// CancelRead stops the stream: it is held no more.
func (s *heldStream) CancelRead(code uint64) {
	if s.state.Swap(streamDone) == streamIdle {
		s.h.word.Add(holdRelease)
	}
	s.ReceiveStream.CancelRead(code)
}

// headerLooks is how many looks of a header timer, a quarter of the
// timeout apart, must find the peer free to send and silent.
const headerLooks = 4

// headerTimer times one stream's type and header (see holdWatch).
type headerTimer struct {
	s      *Session
	period time.Duration
	state  atomic.Int32 // 0 waiting, 1 timed out, 2 arrived
	// timer is the pending look. Each look arms the next with a timer of
	// its own, so no look reads a timer its starter is still storing.
	timer atomic.Pointer[time.Timer]
	mark  atomic.Uint64 // the holdWatch word at the last look that changed
	looks atomic.Int32  // looks since then that found it unchanged, nothing held
}

// timeHeader starts the timer of a stream whose type and header are read
// next.
func (s *Session) timeHeader() *headerTimer {
	t := &headerTimer{s: s, period: max(s.cfg.DataStreamTimeout/headerLooks, time.Nanosecond)}
	t.mark.Store(s.hold.word.Load())
	t.arm()
	return t
}

func (t *headerTimer) arm() { t.timer.Store(time.AfterFunc(t.period, t.look)) }

// look closes the session once the peer has been free to send the header,
// and has sent nothing, for the whole timeout; else it looks again later.
func (t *headerTimer) look() {
	if t.state.Load() != 0 {
		return
	}
	now := t.s.hold.word.Load()
	if now == t.mark.Load() && now&holdMask == 0 {
		if t.looks.Add(1) >= headerLooks {
			if t.state.CompareAndSwap(0, 1) {
				t.s.fail(&SessionError{Code: wire.DataStreamTimeout,
					Reason: "a unidirectional stream's type or header did not arrive in time"})
			}
			return
		}
	} else {
		t.mark.Store(now)
		t.looks.Store(0)
	}
	t.arm()
	if t.state.Load() != 0 {
		// Arrived meanwhile: its Stop may have found the previous timer.
		t.timer.Load().Stop()
	}
}

// arrived stops the timer; it reports false when the stream timed out
// first, and the session is closing for it.
func (t *headerTimer) arrived() bool {
	if !t.state.CompareAndSwap(0, 2) {
		return false
	}
	t.timer.Load().Stop()
	return true
}

// uniSlots bounds the peer's unidirectional streams that this end holds
// to Config.MaxIncomingUniStreams, the credit it grants them. QUIC gives a
// stream's credit back once its bytes and FIN have been read from the
// transport, and a read buffer takes a small stream whole with its header:
// a stream the application has yet to take, or to read, would otherwise
// stop counting, and a peer could make this end hold any number of them,
// each a goroutine, a read buffer and, on a relay, a forwarder. So the
// session accepts a stream only with a slot free, and a subgroup stream
// keeps its slot until it is read to its end or stopped: while none is
// free, the peer's new streams wait in QUIC, unread, holding its credit.
type uniSlots struct {
	free chan struct{} // a token per slot in use
}

func newUniSlots(n int64) uniSlots {
	if n <= 0 {
		n = 100 // Config's default, for sessions made without withDefaults
	}
	return uniSlots{free: make(chan struct{}, n)}
}

// acquire waits for a free slot; it reports false once ctx is done.
func (u uniSlots) acquire(ctx context.Context) (*uniSlot, bool) {
	select {
	case u.free <- struct{}{}:
		return &uniSlot{free: u.free}, true
	case <-ctx.Done():
		return nil, false
	}
}

// uniSlot is one stream's slot. The goroutine serving the stream releases
// it when it returns, unless it handed it over to the stream's
// SubgroupReader, which releases it at the stream's end.
type uniSlot struct {
	free     chan struct{}
	released atomic.Bool
	handed   atomic.Bool
}

// release frees the slot; later calls do nothing. A nil slot (a reader
// made without one) is ignored.
func (s *uniSlot) release() {
	if s != nil && s.released.CompareAndSwap(false, true) {
		<-s.free
	}
}

func (s *uniSlot) handOver()        { s.handed.Store(true) }
func (s *uniSlot) handedOver() bool { return s.handed.Load() }
