package transport

import (
	"reflect"
	"unsafe"

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
// field is reached by reflection; TestWebTransportReliableReset holds it
// to the pinned version, and should a newer webtransport-go rename or
// retype it, quicUnder returns nil and the session falls back to that
// wait (ReliableReset reports false).
func quicUnder(s *webtransport.SendStream) reliableMarker {
	if s == nil || !wtStreamField.ok {
		return nil
	}
	f := reflect.ValueOf(s).Elem().Field(wtStreamField.index)
	m, _ := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(reliableMarker)
	return m
}

// wtStreamField locates webtransport.SendStream's QUIC stream: an
// interface-typed field named str whose method set has
// SetReliableBoundary.
var wtStreamField = func() (r struct {
	index int
	ok    bool
}) {
	t := reflect.TypeFor[webtransport.SendStream]()
	f, ok := t.FieldByName("str")
	if !ok || len(f.Index) != 1 || f.Type.Kind() != reflect.Interface ||
		!f.Type.Implements(reflect.TypeFor[reliableMarker]()) {
		return r
	}
	r.index, r.ok = f.Index[0], true
	return r
}()
