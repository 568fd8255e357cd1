package moqt

import (
	"encoding/binary"
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// FuzzSession's input is a program: a flags byte, then operations, each an
// opcode byte and its operands (session_fuzz_test.go lists them). This file
// reads it: fuzzProgram hands out bytes, numbers and blobs, and the gen*
// functions turn them into wire values built with the codec's encoders, so
// that most programs reach the session as well-formed messages whose
// fields, not framing, are what the fuzzer varies. Raw-byte operations
// cover the rest. A program that runs out reads zeros: every operand has a
// meaning at zero (usually the simplest choice), so any prefix of a
// program is a program.

// fuzzProgram reads a FuzzSession program.
type fuzzProgram struct{ b []byte }

func (p *fuzzProgram) more() bool { return len(p.b) > 0 }

func (p *fuzzProgram) u8() byte {
	if len(p.b) == 0 {
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

// pick returns a number below n.
func (p *fuzzProgram) pick(n int) int { return int(p.u8()) % n }

func (p *fuzzProgram) flag() bool { return p.u8()&1 == 1 }

// num reads a number biased towards small values, which is what IDs,
// aliases and counts mostly are: one byte below 0xE0 is itself, 0xE0–0xEF
// start a 12-bit number, 0xF0–0xFE a 32-bit one and 0xFF a 62-bit one, the
// largest a varint carries.
func (p *fuzzProgram) num() uint64 {
	c := p.u8()
	switch {
	case c < 0xE0:
		return uint64(c)
	case c < 0xF0:
		return uint64(c&0x0F)<<8 | uint64(p.u8())
	case c < 0xFF:
		return uint64(binary.BigEndian.Uint32(p.fixed(4)))
	default:
		return binary.BigEndian.Uint64(p.fixed(8)) & (1<<62 - 1)
	}
}

// fixed returns the next n bytes, zero-padded when the program ends.
func (p *fuzzProgram) fixed(n int) []byte {
	out := make([]byte, n)
	copy(out, p.take(n))
	return out
}

// take returns up to n bytes of the program, a copy, as the session may
// keep what it is given.
func (p *fuzzProgram) take(n int) []byte {
	n = min(n, len(p.b))
	out := slices.Clone(p.b[:n])
	p.b = p.b[n:]
	return out
}

// fuzzMaxBlob bounds a raw byte operand. A control message's Length can
// claim up to 64 KiB whatever follows it, so longer operands would only
// slow the fuzzer down.
const fuzzMaxBlob = 3 << 10

// blob reads a length and that many raw bytes.
func (p *fuzzProgram) blob() []byte { return p.take(int(min(p.num(), fuzzMaxBlob))) }

// text reads a short string.
func (p *fuzzProgram) text() string { return string(p.take(p.pick(40))) }

// The tracks and namespaces the programs name. The local session publishes
// fuzzLocalTrack and subscribes to fuzzPeerTrack; the others are unknown
// to it, reserved (§6.5) or invalid (§8.7).
var (
	fuzzLocalTrack = wire.FullTrackName{Namespace: wire.NewNamespace("live", "a"), Name: []byte("video")}
	fuzzPeerTrack  = wire.FullTrackName{Namespace: wire.NewNamespace("peer", "x"), Name: []byte("t")}
)

// genNamespace reads a namespace; 0 is def.
func (p *fuzzProgram) genNamespace(def wire.Namespace) wire.Namespace {
	switch p.pick(9) {
	case 0:
		return def
	case 1:
		return fuzzLocalTrack.Namespace
	case 2:
		return fuzzPeerTrack.Namespace
	case 3:
		return wire.NewNamespace("live")
	case 4:
		return wire.NewNamespace("peer")
	case 5:
		return wire.Namespace{}
	case 6:
		return wire.NewNamespace(".session", "x")
	case 7:
		// 33 fields, one more than §8.7 allows.
		ns := make(wire.Namespace, 33)
		for i := range ns {
			ns[i] = []byte{'f'}
		}
		return ns
	default:
		ns := make(wire.Namespace, p.pick(6))
		for i := range ns {
			ns[i] = p.take(p.pick(12)) // may be empty, which §8.7 forbids
		}
		return ns
	}
}

// genTrack reads a Full Track Name; 0 is def.
func (p *fuzzProgram) genTrack(def wire.FullTrackName) wire.FullTrackName {
	sel := p.u8()
	if sel == 0 {
		return def
	}
	t := wire.FullTrackName{Namespace: p.genNamespace(def.Namespace)}
	switch sel % 5 {
	case 0:
		t.Name = slices.Clone(def.Name)
	case 1:
		t.Name = []byte("video")
	case 2:
		t.Name = []byte("t")
	case 3:
		t.Name = []byte("audio") // the local Handler serves its FETCH by hand
	default:
		t.Name = p.take(p.pick(64))
	}
	return t
}

// genProps reads a Key-Value-Pair list: Track or Object Properties.
func (p *fuzzProgram) genProps() wire.KVList {
	types := []uint64{wire.PropObjectDeliveryTimeout, wire.PropMaxCacheDuration, wire.PropSubgroupDeliveryTimeout,
		wire.PropImmutableProperties, wire.PropDefaultPublisherPriority, wire.PropDefaultPublisherGroupOrder,
		wire.PropDynamicGroups, wire.PropPriorGroupIDGap, wire.PropPriorObjectIDGap, 0x4000, 0x4001, 0x7fff}
	n := p.pick(4)
	var l wire.KVList
	for range n {
		var t uint64
		if sel := p.u8(); int(sel) < len(types) {
			t = types[sel]
		} else {
			t = p.num()
		}
		kv := wire.KeyValue{Type: t}
		if t%2 == 0 {
			kv.Value = p.num()
		} else {
			kv.Bytes = p.take(p.pick(24))
		}
		l = append(l, kv)
	}
	// The encoder needs them in ascending order of type.
	slices.SortStableFunc(l, func(a, b wire.KeyValue) int { return cmpUint(a.Type, b.Type) })
	return l
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// genObjectProps reads an Object Properties block.
func (p *fuzzProgram) genObjectProps() []byte {
	b, err := p.genProps().Append(nil)
	if err != nil || len(b) == 0 {
		return nil
	}
	return b
}

// genToken reads an Authorization Token (§8.9).
func (p *fuzzProgram) genToken() wire.Token {
	return wire.Token{AliasType: wire.TokenAliasType(p.pick(4)), Alias: p.num(), Type: p.num(), Value: p.take(p.pick(24))}
}

// genParams reads a parameter list (§9.20). Which parameters a message
// may carry is left to the session to check, so a mask bit sets any of
// them in any message.
func (p *fuzzProgram) genParams() wire.Params { return p.genParamsDepth(0) }

func (p *fuzzProgram) genParamsDepth(depth int) wire.Params {
	var ps wire.Params
	mask := p.u8()
	if mask&0x01 != 0 {
		ps.Forward = wire.Some(p.flag())
	}
	if mask&0x02 != 0 {
		ps.SubscriberPriority = wire.Some(p.u8())
	}
	if mask&0x04 != 0 {
		f := wire.LocationFilter{Fields: p.pick(5)}
		f.StartGroup = p.num()
		f.StartObject = p.num()
		f.EndGroup = f.StartGroup + p.num()
		f.EndObject = p.num()
		ps.LocationFilter = wire.Some(f)
	}
	if mask&0x08 != 0 {
		ps.GroupOrder = wire.Some(wire.GroupOrder(1 + p.pick(2)))
	}
	if mask&0x10 != 0 {
		ps.ObjectDeliveryTimeout = wire.Some(p.num())
	}
	if mask&0x20 != 0 {
		ps.Expires = wire.Some(p.num())
	}
	if mask&0x40 != 0 {
		ps.LargestObject = wire.Some(wire.Location{Group: p.num(), Object: p.num()})
	}
	if mask&0x80 == 0 {
		return ps
	}
	ext := p.u8()
	if ext&0x01 != 0 {
		ps.SubgroupDeliveryTimeout = wire.Some(p.num())
	}
	if ext&0x02 != 0 {
		ps.FillTimeout = wire.Some(p.num())
	}
	if ext&0x04 != 0 {
		ps.RendezvousTimeout = wire.Some(p.num())
	}
	if ext&0x08 != 0 {
		ps.NewGroupRequest = wire.Some(p.num())
	}
	if ext&0x10 != 0 {
		ps.IncludeProperties = wire.Some(p.flag())
	}
	if ext&0x20 != 0 {
		for range 1 + p.pick(3) {
			ps.AuthorizationTokens = append(ps.AuthorizationTokens, p.genToken())
		}
	}
	if ext&0x40 != 0 {
		ps.RangeFilters = p.genRangeFilters()
	}
	if ext&0x80 != 0 {
		if depth == 0 && p.flag() {
			fill := p.genParamsDepth(depth + 1)
			ps.FillParameters = &fill
		} else {
			ps.TrackNamespacePrefix = wire.Some(p.genNamespace(fuzzPeerTrack.Namespace))
		}
	}
	return ps
}

// genRangeFilters reads range filters (§3.3.2, §8.6).
func (p *fuzzProgram) genRangeFilters() []wire.RangeFilter {
	types := []wire.ParamType{wire.ParamSubgroupFilter, wire.ParamObjectIDFilter, wire.ParamPriorityFilter,
		wire.ParamObjectPropertyFilter, wire.ParamTrackPropertyFilter}
	var out []wire.RangeFilter
	for range 1 + p.pick(3) {
		f := wire.RangeFilter{Type: types[p.pick(len(types))], SetID: p.u8() % 4}
		if f.Type == wire.ParamObjectPropertyFilter || f.Type == wire.ParamTrackPropertyFilter {
			f.PropertyType = p.num()
		}
		if p.u8()&0x0F == 0x0F {
			f.Clear = true
		} else {
			start := p.num()
			for i := range 1 + p.pick(3) {
				r := wire.Range{Start: start, End: start + p.num()}
				start = r.End + 1 + p.num()
				if i > 0 && p.u8() == 0xFF {
					r.Open = true
				}
				f.Ranges = append(f.Ranges, r)
			}
		}
		out = append(out, f)
	}
	return out
}

// genSetup reads a SETUP whose options are all the fuzzer's.
func (p *fuzzProgram) genSetup() *wire.Setup {
	st := &wire.Setup{}
	mask := p.u8()
	if mask&0x01 != 0 {
		st.Path = wire.Some(p.text())
	}
	if mask&0x02 != 0 {
		st.Authority = wire.Some(p.text())
	}
	if mask&0x04 != 0 {
		st.MaxRequestUpdates = wire.Some(p.num())
	}
	if mask&0x08 != 0 {
		st.MaxFilterRanges = wire.Some(p.num())
	}
	if mask&0x10 != 0 {
		st.MaxAuthTokenCacheSize = wire.Some(p.num())
	}
	if mask&0x20 != 0 {
		for range 1 + p.pick(3) {
			st.AuthorizationTokens = append(st.AuthorizationTokens, p.genToken())
		}
	}
	if mask&0x40 != 0 {
		st.MoqtImplementation = wire.Some(p.text())
	}
	if mask&0x80 != 0 {
		// Unknown options must be ignored (§9.1); odd types carry bytes.
		for _, kv := range p.genProps() {
			kv.Type += 0x100
			st.Unknown = append(st.Unknown, kv)
		}
	}
	return st
}

// fuzzRequestKinds are the messages that open a request stream (§6.4.2).
var fuzzRequestKinds = []wire.MessageType{wire.MsgSubscribe, wire.MsgFetch, wire.MsgTrackStatus, wire.MsgPublish,
	wire.MsgPublishNamespace, wire.MsgSubscribeNamespace, wire.MsgSubscribeTracks}

// genRequest reads a request of the kind selected by a byte; id is its
// Request ID.
func (p *fuzzProgram) genRequest(id uint64) wire.Message {
	switch fuzzRequestKinds[p.pick(len(fuzzRequestKinds))] {
	case wire.MsgSubscribe:
		t := p.genTrack(fuzzLocalTrack)
		return &wire.Subscribe{RequestID: id, TrackNamespace: t.Namespace, TrackName: t.Name, Parameters: p.genParams()}
	case wire.MsgFetch:
		t := p.genTrack(fuzzLocalTrack)
		return &wire.Fetch{RequestID: id, TrackNamespace: t.Namespace, TrackName: t.Name, Parameters: p.genParams()}
	case wire.MsgTrackStatus:
		t := p.genTrack(fuzzLocalTrack)
		return &wire.TrackStatus{RequestID: id, TrackNamespace: t.Namespace, TrackName: t.Name, Parameters: p.genParams()}
	case wire.MsgPublish:
		t := p.genTrack(fuzzPeerTrack)
		return &wire.Publish{RequestID: id, TrackNamespace: t.Namespace, TrackName: t.Name, TrackAlias: p.num(),
			Parameters: p.genParams(), TrackProperties: p.genProps()}
	case wire.MsgPublishNamespace:
		return &wire.PublishNamespace{RequestID: id, TrackNamespace: p.genNamespace(fuzzPeerTrack.Namespace),
			Parameters: p.genParams()}
	case wire.MsgSubscribeNamespace:
		return &wire.SubscribeNamespace{RequestID: id, TrackNamespacePrefix: p.genNamespace(wire.NewNamespace("live")),
			Parameters: p.genParams()}
	default:
		return &wire.SubscribeTracks{RequestID: id, TrackNamespacePrefix: p.genNamespace(wire.NewNamespace("live")),
			Parameters: p.genParams()}
	}
}

// fuzzMessageKinds are the messages genMessage makes: every response and
// follow-up message, then a request (a second one on a stream), SETUP
// and GOAWAY, which belong elsewhere.
var fuzzMessageKinds = []wire.MessageType{wire.MsgSubscribeOK, wire.MsgRequestOK, wire.MsgRequestError,
	wire.MsgFetchOK, wire.MsgPublishDone, wire.MsgRequestUpdate, wire.MsgNamespace, wire.MsgNamespaceDone,
	wire.MsgPublishSkipped, wire.MsgPublishStateNotify, wire.MsgGoaway, wire.MsgSubscribe, wire.MsgSetup}

// genMessage reads any message; newID hands out the Request ID of a
// REQUEST_UPDATE or a request.
func (p *fuzzProgram) genMessage(newID func() uint64) wire.Message {
	switch fuzzMessageKinds[p.pick(len(fuzzMessageKinds))] {
	case wire.MsgSubscribeOK:
		return &wire.SubscribeOK{TrackAlias: p.num(), Parameters: p.genParams(), TrackProperties: p.genProps()}
	case wire.MsgRequestOK:
		return &wire.RequestOK{Parameters: p.genParams(), TrackProperties: p.genProps()}
	case wire.MsgRequestError:
		return p.genRequestError()
	case wire.MsgFetchOK:
		return &wire.FetchOK{EndOfTrack: p.flag(), EndLocation: wire.Location{Group: p.num(), Object: p.num()},
			Parameters: p.genParams(), TrackProperties: p.genProps()}
	case wire.MsgPublishDone:
		return &wire.PublishDone{StatusCode: fuzzDoneCodes[p.pick(len(fuzzDoneCodes))], StreamCount: p.num(),
			ErrorReason: p.text()}
	case wire.MsgRequestUpdate:
		return &wire.RequestUpdate{RequestID: newID(), Parameters: p.genParams()}
	case wire.MsgNamespace:
		return &wire.NamespaceMsg{TrackNamespaceSuffix: p.genNamespace(wire.NewNamespace("x"))}
	case wire.MsgNamespaceDone:
		return &wire.NamespaceDone{TrackNamespaceSuffix: p.genNamespace(wire.NewNamespace("x"))}
	case wire.MsgPublishSkipped:
		return &wire.PublishSkipped{TrackNamespaceSuffix: p.genNamespace(wire.NewNamespace("x")), TrackName: p.take(p.pick(16))}
	case wire.MsgPublishStateNotify:
		return &wire.PublishStateNotify{Parameters: p.genParams()}
	case wire.MsgGoaway:
		return &wire.Goaway{NewSessionURI: p.text(), Timeout: p.num()}
	case wire.MsgSubscribe:
		return p.genRequest(newID())
	default:
		return p.genSetup()
	}
}

// fuzzDoneCodes are PUBLISH_DONE codes, one §12.4 does not define.
var fuzzDoneCodes = []wire.PublishDoneCode{wire.DoneTrackEnded, wire.DoneInternalError, wire.DoneUnauthorized,
	wire.DoneGoingAway, wire.DoneTooFarBehind, wire.DoneExpired, wire.DoneUpdateFailed, wire.DoneExcessiveLoad,
	wire.DoneMalformedTrack, 0x77}

// fuzzRequestErrorCodes are REQUEST_ERROR codes, one §12.3 does not define.
var fuzzRequestErrorCodes = []wire.RequestErrorCode{wire.ReqDoesNotExist, wire.ReqInternalError, wire.ReqUnauthorized,
	wire.ReqTimeout, wire.ReqNotSupported, wire.ReqGoingAway, wire.ReqExcessiveLoad, wire.ReqInvalidRange,
	wire.ReqMalformedTrack, wire.ReqUninterested, wire.ReqPrefixOverlap, wire.ReqRedirect, wire.ReqInvalidFilter, 0x77}

func (p *fuzzProgram) genRequestError() *wire.RequestError {
	m := &wire.RequestError{ErrorCode: fuzzRequestErrorCodes[p.pick(len(fuzzRequestErrorCodes))],
		RetryInterval: p.num(), ErrorReason: p.text()}
	if m.ErrorCode == wire.ReqRedirect {
		t := p.genTrack(fuzzPeerTrack)
		m.Redirect = wire.Some(wire.Redirect{ConnectURI: p.text(), TrackNamespace: t.Namespace, TrackName: t.Name})
	}
	return m
}

// fuzzResetCodes are stream reset codes (§12.5), one it does not define.
var fuzzResetCodes = []wire.ResetCode{wire.ResetCancelled, wire.ResetInternalError, wire.ResetDeliveryTimeout,
	wire.ResetSessionClosed, wire.ResetGoingAway, wire.ResetTooFarBehind, wire.ResetExcessiveLoad,
	wire.ResetMalformedTrack, 0x77}

func (p *fuzzProgram) genResetCode() uint64 {
	return uint64(fuzzResetCodes[p.pick(len(fuzzResetCodes))])
}

// fuzzStatuses weighs Normal, which carries payloads, over the rest; 0x1
// is not a status draft 21 defines.
var fuzzStatuses = []wire.ObjectStatus{wire.ObjectNormal, wire.ObjectNormal, wire.ObjectNormal, wire.ObjectNormal,
	wire.ObjectNormal, wire.ObjectEndOfGroup, wire.ObjectEndOfTrack, 0x1}
