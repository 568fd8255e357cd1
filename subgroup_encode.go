package moqt

import "github.com/moqt-go/moqt/wire"

// encode appends o's header to w.buf, after the SUBGROUP_HEADER on a new
// stream. The caller holds the turn.
//
// The object's header is the same bytes on every stream whose encoder is
// in the same state (the previous Object ID it sent, the header's flags):
// all but those that skipped objects or joined late. With share (the
// object goes to several streams) it is encoded once per object, for the
// first stream, and copied for the others; a lone stream's is not kept.
func (w *SubgroupWriter) encode(out *subgroupOut, o wire.SubgroupObject, share bool) ([]byte, error) {
	b := w.buf[:0]
	if out.fresh {
		var err error
		if b, err = out.enc.Header.Append(b); err != nil {
			return b, err
		}
		out.fresh = false
	}
	if !share {
		return out.enc.AppendObject(b, o)
	}
	key := out.enc
	key.Header.TrackAlias = 0 // the one field that differs by subscription
	if sh := &w.shared; sh.ok && key == sh.before {
		alias := out.enc.Header.TrackAlias
		out.enc = sh.after
		out.enc.Header.TrackAlias = alias
		return append(b, sh.bytes...), nil
	}
	start := len(b)
	b, err := out.enc.AppendObject(b, o)
	if err == nil && !w.shared.ok {
		sh := &w.shared
		sh.before, sh.after, sh.ok = key, out.enc, true
		sh.bytes = append(sh.bytes[:0], b[start:]...)
	}
	return b, err
}

// sharedHeader is the current object's header as encoded for the first
// stream that took it (see encode).
type sharedHeader struct {
	ok     bool
	before wire.SubgroupEncoder // that stream's encoder before, alias zeroed
	after  wire.SubgroupEncoder // and after
	bytes  []byte
}
