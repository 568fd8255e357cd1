package moqt

import (
	"bufio"
	"fmt"
	"sync"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Routing of FETCH_HEADER streams (§11.4.1). A fetch data stream names the
// request it answers by Request ID: a FETCH this end sent, or, for a fill
// fetch stream, the SUBSCRIBE or REQUEST_UPDATE that carried
// FILL_PARAMETERS (§3.4). Each such request is registered here before it is
// written, so its stream can never arrive first; what the table does not
// know is an ID this endpoint never allocated, which is a
// PROTOCOL_VIOLATION, or the ID of a request that has ended (or that asked
// for no data stream), whose stream is stopped with CANCELLED.
//
// Every request takes at most one stream: a second stream naming the same
// Request ID is stopped with CANCELLED. A stream that arrives before its
// request can take it (before FETCH_OK, or before SUBSCRIBE_OK for a fill)
// is held unread, so QUIC flow control pushes back on the publisher, and
// it counts against Config.MaxPendingStreams, as an early subgroup stream
// does; beyond that it is stopped with EXCESSIVE_LOAD, and the request
// learns so. A held stream costs no goroutine and at most the 4 KiB its
// header was read with; it waits as long as its request does for its
// answer, which the caller's context bounds.

// fetchRoutes maps this end's Request IDs to the receivers of their fetch
// data streams.
type fetchRoutes struct {
	mu   sync.Mutex // guards byID; a leaf
	byID map[uint64]fetchSink
}

// fetchSink takes the data stream of one request.
type fetchSink interface {
	// takeFetchStream takes r, or reports false when the request has one
	// already or has ended: the stream is then stopped.
	takeFetchStream(r *fetchStream) bool
}

// add registers the receiver of id's data stream.
func (fr *fetchRoutes) add(id uint64, sink fetchSink) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.byID == nil {
		fr.byID = map[uint64]fetchSink{}
	}
	fr.byID[id] = sink
}

// remove forgets id: its request has ended.
func (fr *fetchRoutes) remove(id uint64) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	delete(fr.byID, id)
}

// fetchesOf returns the FETCHes this end sent for track that still await
// or read their data: a Malformed Track cancels them (§12.1).
func (fr *fetchRoutes) fetchesOf(track wire.FullTrackName) []*Fetch {
	key := track.Key()
	fr.mu.Lock()
	defer fr.mu.Unlock()
	var out []*Fetch
	for _, sink := range fr.byID {
		if f, ok := sink.(*Fetch); ok && f.req != nil && f.req.track.Key() == key {
			out = append(out, f)
		}
	}
	return out
}

func (fr *fetchRoutes) lookup(id uint64) fetchSink {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return fr.byID[id]
}

// ownID reports whether id is a Request ID this endpoint has allocated.
func (r *requestIDSpace) ownID(id uint64) bool {
	next := r.next.Load()
	return id%2 == next%2 && id < next
}

// receiveFetch routes a fetch data stream whose FETCH_HEADER has been read.
func receiveFetch(s *Session, str transport.ReceiveStream, br *bufio.Reader, h wire.FetchHeader) error {
	r := &fetchStream{sess: s, str: str, br: br, id: h.RequestID}
	r.dec.Version = s.version // 0x20C is an End of Range from draft 20 on
	if sink := s.fetches.lookup(h.RequestID); sink != nil {
		if !sink.takeFetchStream(r) {
			str.CancelRead(uint64(wire.ResetCancelled))
		}
		return nil
	}
	if !s.ids.ownID(h.RequestID) {
		return protocolViolation("FETCH_HEADER names Request ID %d, which this endpoint never used", h.RequestID)
	}
	// A request that ended, or that asked for no data: late data is
	// discarded.
	str.CancelRead(uint64(wire.ResetCancelled))
	return nil
}

// holdSlot is the reservation of a stream held before its request can take
// it (Config.MaxPendingStreams).
type holdSlot struct {
	s    *Session
	once sync.Once
}

// reserveHold claims one of s's held-stream slots; nil when none is free.
func reserveHold(s *Session) *holdSlot {
	if !s.routes.reservePendingStream() {
		return nil
	}
	return &holdSlot{s: s}
}

// release gives the slot back; nil-safe and idempotent.
func (h *holdSlot) release() {
	if h != nil {
		h.once.Do(h.s.routes.releasePendingStream)
	}
}

// errHeldStreams is why a data stream that arrived early was refused.
var errHeldStreams = fmt.Errorf("moqt: fetch data stream arrived early with Config.MaxPendingStreams held: stopped with %s", wire.ResetExcessiveLoad)
