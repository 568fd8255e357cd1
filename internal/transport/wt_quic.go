package transport

import (
	"reflect"
	"sync"
	"unsafe"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"
)

// reliableMarker is the QUIC send stream's RESET_STREAM_AT method.
type reliableMarker interface{ SetReliableBoundary() }

// quicUnder returns the QUIC stream a WebTransport send stream writes to,
// or nil. webtransport-go (v0.13) keeps it in an unexported field and
// exposes no reliable size, yet MoQT needs one: a subgroup stream cut
// short must still deliver the objects it carried before its reset
// (§11.3.2), and without RESET_STREAM_AT the reset can only wait and hope
// they were read, which a loaded peer does not always do in time. The
// field is reached by reflection; TestReliableReset holds it to the pinned
// version, and should a newer webtransport-go rename or retype it,
// quicUnder returns nil and the session falls back to that wait
// (ReliableReset reports false).
func quicUnder(s *webtransport.SendStream) quicWriter {
	if s == nil || !wtFields.ok {
		return nil
	}
	f := reflect.ValueOf(s).Elem().Field(wtFields.str)
	m, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(quicWriter)
	return m
}

// sessionQUIC returns the QUIC connection under a WebTransport session the
// application brought (WrapWebTransport), or nil: webtransport-go (v0.13)
// keeps it in an unexported field, conn, and Conn.Path needs its counts.
func sessionQUIC(s *webtransport.Session) *quic.Conn {
	if s == nil || !wtFields.connOK {
		return nil
	}
	f := reflect.ValueOf(s).Elem().Field(wtFields.conn)
	return *(**quic.Conn)(unsafe.Pointer(f.UnsafeAddr()))
}

// bidiSend returns a WebTransport bidirectional stream's sending half, or
// nil: webtransport-go (v0.13) keeps it in an unexported field, sendStr.
func bidiSend(s *webtransport.Stream) *webtransport.SendStream {
	if s == nil || !wtFields.bidiOK {
		return nil
	}
	f := reflect.ValueOf(s).Elem().Field(wtFields.send)
	return *(**webtransport.SendStream)(unsafe.Pointer(f.UnsafeAddr()))
}

// wtUrgency places a stream's urgency on raw QUIC (transport.Urgency*)
// among the QUIC streams of an HTTP/3 connection, which stay at quic-go's
// default, 3: the HTTP/3 control stream and a session's CONNECT stream,
// whose capsules (WT_CLOSE_SESSION among them) must not wait behind
// objects. The control and request streams keep theirs, ahead of them;
// data streams take 4 to 7, their six levels folded into four.
func wtUrgency(u int8) int8 {
	if u < UrgencyDataMin {
		return u
	}
	return 4 + (min(u, UrgencyDataMax)-UrgencyDataMin)*3/(UrgencyDataMax-UrgencyDataMin)
}

// setWTPriority sets the urgency of the QUIC stream under s (wtUrgency).
func setWTPriority(s *webtransport.SendStream, urgency int8, incremental bool) {
	if q := quicUnder(s); q != nil {
		q.SetPriority(wtUrgency(urgency), incremental)
	}
}

// wtHeader is a WebTransport send stream's pending stream header, which
// webtransport-go writes before the first bytes of the first Write (or
// in CancelWrite and Close), under mu, setting a reliable boundary over
// it: over a connection whose window is full that boundary is the
// FLOW_CONTROL_ERROR WriteMarked avoids (reliable.go), for any stream this
// end opens, a FETCH's or a request's too. So sendHeader writes it as the
// stream opens, without the boundary.
type wtHeader struct {
	mu       *sync.Mutex
	hdr      *[]byte
	writeErr *error // set when Close or CancelWrite took the header
}

func headerOf(s *webtransport.SendStream) wtHeader {
	v := reflect.ValueOf(s).Elem()
	at := func(i int) unsafe.Pointer { return unsafe.Pointer(v.Field(i).UnsafeAddr()) }
	return wtHeader{
		mu:       (*sync.Mutex)(at(wtFields.mu)),
		hdr:      (*[]byte)(at(wtFields.hdr)),
		writeErr: (*error)(at(wtFields.writeErr)),
	}
}

// sendHeader writes s's stream header to the QUIC stream under it, where
// webtransport-go has not yet: reserved against flow control where it can
// be at once, else buffered, never marked reliable. It reports whether the
// header is sent, and whether reserved.
func sendHeader(s *webtransport.SendStream) (sent, reserved bool) {
	u := quicUnder(s)
	if u == nil {
		return false, false
	}
	h := headerOf(s)
	h.mu.Lock()
	defer h.mu.Unlock()
	if *h.writeErr != nil || len(*h.hdr) == 0 {
		return len(*h.hdr) == 0 && *h.writeErr == nil, false
	}
	if u.TryWriteAll(*h.hdr) == nil {
		*h.hdr = nil
		return true, true
	}
	if _, err := u.Write(*h.hdr); err == nil { // a new stream's first bytes: taken at once
		*h.hdr = nil
		return true, false
	}
	return false, false
}

// wtFields locates webtransport.SendStream's unexported fields: str, an
// interface-typed QUIC stream with SetReliableBoundary (quicUnder checks
// the rest of quicWriter on the stream itself), and the stream header's
// streamHdrMu, streamHdr and writeErr; and webtransport.Stream's sendStr.
var wtFields = func() (r struct {
	str, mu, hdr, writeErr, send, conn int
	ok, bidiOK, connOK                 bool
}) {
	if f, ok := reflect.TypeFor[webtransport.Session]().FieldByName("conn"); ok && len(f.Index) == 1 &&
		f.Type == reflect.TypeFor[*quic.Conn]() {
		r.conn, r.connOK = f.Index[0], true
	}
	if f, ok := reflect.TypeFor[webtransport.Stream]().FieldByName("sendStr"); ok && len(f.Index) == 1 &&
		f.Type == reflect.TypeFor[*webtransport.SendStream]() {
		r.send, r.bidiOK = f.Index[0], true
	}
	t := reflect.TypeFor[webtransport.SendStream]()
	field := func(name string, typ reflect.Type) (int, bool) {
		f, ok := t.FieldByName(name)
		if !ok || len(f.Index) != 1 || typ != nil && f.Type != typ {
			return 0, false
		}
		return f.Index[0], true
	}
	f, ok := t.FieldByName("str")
	if !ok || len(f.Index) != 1 || f.Type.Kind() != reflect.Interface ||
		!f.Type.Implements(reflect.TypeFor[reliableMarker]()) {
		return r
	}
	r.str = f.Index[0]
	var ok1, ok2, ok3 bool
	r.mu, ok1 = field("streamHdrMu", reflect.TypeFor[sync.Mutex]())
	r.hdr, ok2 = field("streamHdr", reflect.TypeFor[[]byte]())
	r.writeErr, ok3 = field("writeErr", reflect.TypeFor[error]())
	r.ok = ok1 && ok2 && ok3
	return r
}()
