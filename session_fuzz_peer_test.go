package moqt

import (
	"context"
	"time"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// FuzzSession's fake peer: the operations of a program that act as the
// peer (session_fuzz_test.go runs them). They write raw wire bytes over
// the Pipe and never wait long: a write or stream opening that the local
// session's flow control holds up gives up after fuzzWriteWait.

// startPeer starts the peer's readers: they take every stream and
// datagram the local session sends and read them to their end, so that
// the session's writes wait only on a peer whose program stopped reading
// (opPeerReading).
func (r *fuzzRun) startPeer() {
	r.goPeer(func() {
		for {
			str, err := r.peer.AcceptStream(context.Background())
			if err != nil {
				return
			}
			r.mu.Lock()
			r.reqs = append(r.reqs, str)
			r.mu.Unlock()
			r.goPeer(func() { r.drainRequest(str) })
		}
	})
	r.goPeer(func() {
		for {
			str, err := r.peer.AcceptUniStream(context.Background())
			if err != nil {
				return
			}
			r.mu.Lock()
			r.libUnis = append(r.libUnis, str)
			r.mu.Unlock()
			r.goPeer(func() { r.drain(str) })
		}
	})
	r.goPeer(func() {
		for {
			if _, err := r.peer.ReceiveDatagram(context.Background()); err != nil {
				return
			}
		}
	})
}

// drain reads str to its end, whenever the peer reads.
func (r *fuzzRun) drain(str transport.ReceiveStream) {
	buf := make([]byte, 4<<10)
	for {
		r.mu.Lock()
		reading := r.reading
		r.mu.Unlock()
		select {
		case <-reading:
		case <-r.peer.Context().Done():
		}
		if _, err := str.Read(buf); err != nil {
			return
		}
	}
}

// drainRequest drains a request stream; tracing, it logs the local
// session's messages on it.
func (r *fuzzRun) drainRequest(str transport.Stream) {
	if !fuzzTrace {
		r.drain(str)
		return
	}
	mr := wire.NewMessageReader(str)
	for {
		m, err := mr.ReadMessage(r.s.version)
		if err != nil {
			r.logf("  local session's request stream: %v", err)
			return
		}
		r.logf("  local session sent %s: %+v", m.Type(), m)
	}
}

// opPeerReading pauses the peer's reading, or resumes it: a peer that
// stops reading makes the local session's writes meet flow control.
func (r *fuzzRun) opPeerReading() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.reading:
		r.reading = make(chan struct{})
	default:
		close(r.reading)
	}
}

func (r *fuzzRun) goPeer(f func()) {
	r.peerWG.Add(1)
	go func() {
		defer r.peerWG.Done()
		f()
	}()
}

func (r *fuzzRun) goApp(f func()) {
	r.app.Add(1)
	go func() {
		defer r.app.Done()
		f()
	}()
}

// write sends b on str within the peer's budget, giving up after
// fuzzWriteWait.
func (r *fuzzRun) write(str transport.SendStream, b []byte) {
	if str == nil {
		return // its opening failed; the operands were read all the same
	}
	if len(b) > r.budget {
		b = b[:r.budget]
	}
	r.budget -= len(b)
	if len(b) == 0 {
		return
	}
	_ = str.SetWriteDeadline(time.Now().Add(fuzzWriteWait))
	_, _ = str.Write(b)
}

// writeMessage sends m framed; a message the codec refuses to encode is
// not sent.
func (r *fuzzRun) writeMessage(str transport.SendStream, m wire.Message) {
	b, err := wire.AppendMessage(r.s.version, nil, m)
	if err != nil {
		r.logf("  not encodable: %v", err)
		return
	}
	r.logf("  %s (%d bytes)", m.Type(), len(b))
	r.write(str, b)
}

// fuzzZeros are the payload bytes the peer sends.
var fuzzZeros = make([]byte, 64<<10)

// payload reads a payload length, at most 64 KiB.
func (r *fuzzRun) payload() uint64 { return min(r.p.num()*37, uint64(len(fuzzZeros))) }

func (r *fuzzRun) openStream() transport.Stream {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWriteWait)
	defer cancel()
	str, err := r.peer.OpenStreamSync(ctx)
	if err != nil {
		return nil
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, str)
	r.mu.Unlock()
	r.goPeer(func() { r.drainRequest(str) })
	return str
}

func (r *fuzzRun) openUni() transport.SendStream {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWriteWait)
	defer cancel()
	str, err := r.peer.OpenUniStreamSync(ctx)
	if err != nil {
		return nil
	}
	return str
}

// stream returns the request stream an operand selects, or nil.
func (r *fuzzRun) stream() transport.Stream {
	i := int(r.p.u8())
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		return nil
	}
	return r.reqs[i%len(r.reqs)]
}

// newID reads which Request ID the peer uses next: the next valid one,
// or from 0xF0 on, any.
func (r *fuzzRun) newID() uint64 {
	if r.p.u8() >= 0xF0 {
		return r.p.num()
	}
	id := r.nextID
	r.nextID += 2
	return id
}

// validSetup is the SETUP a well-behaved peer sends: a raw QUIC client
// names the path and authority (§9.1.1, §9.1.2).
func (r *fuzzRun) validSetup() *wire.Setup {
	if !r.libClient && !r.s.conn.WebTransport() {
		return &wire.Setup{Path: wire.Some("/live"), Authority: wire.Some(pipeAuthority)}
	}
	return &wire.Setup{}
}

// sendSetup opens a control stream and writes st on it; the first such
// stream is the peer's control stream.
func (r *fuzzRun) sendSetup(st *wire.Setup) {
	str := r.openUni()
	if str == nil {
		return
	}
	if r.ctrl == nil {
		r.ctrl = str
	}
	r.writeMessage(str, st)
}

// opSetup: SETUP on a new control stream, valid, generated or raw.
func (r *fuzzRun) opSetup() {
	switch r.p.pick(3) {
	case 0:
		r.sendSetup(r.validSetup())
	case 1:
		r.sendSetup(r.p.genSetup())
	default:
		b := append(wire.AppendVarint(nil, wire.ControlStreamType), r.p.blob()...)
		str := r.openUni()
		if str == nil {
			return
		}
		if r.ctrl == nil {
			r.ctrl = str
		}
		r.write(str, b)
	}
}

// opControl: on the peer's control stream, GOAWAY, another message, raw
// bytes, FIN or a reset.
func (r *fuzzRun) opControl() {
	kind := r.p.pick(5)
	var m wire.Message
	var raw []byte
	var code uint64
	switch kind {
	case 0:
		m = &wire.Goaway{NewSessionURI: r.p.text(), Timeout: r.p.num()}
	case 1:
		m = r.p.genMessage(r.newID)
	case 2:
		raw = r.p.blob()
	case 4:
		code = r.p.genResetCode()
	}
	if r.ctrl == nil {
		if r.ctrl = r.openUni(); r.ctrl == nil {
			return
		}
	}
	switch kind {
	case 0, 1:
		r.writeMessage(r.ctrl, m)
	case 2:
		r.write(r.ctrl, raw)
	case 3:
		_ = r.ctrl.Close()
	default:
		r.ctrl.CancelWrite(code)
	}
}

// opRequest: a new request stream with a generated request, then maybe
// FIN.
func (r *fuzzRun) opRequest() {
	m := r.p.genRequest(r.newID())
	fin := r.p.flag()
	if str := r.openStream(); str != nil {
		r.writeMessage(str, m)
		if fin {
			_ = str.Close()
		}
	}
}

// opRequestRaw: a new request stream with raw bytes.
func (r *fuzzRun) opRequestRaw() {
	b := r.p.blob()
	if str := r.openStream(); str != nil {
		r.write(str, b)
	}
}

// opSend: a generated message on a request stream.
func (r *fuzzRun) opSend() {
	str := r.stream()
	m := r.p.genMessage(r.newID)
	if str != nil {
		r.writeMessage(str, m)
	}
}

// opSendRaw: raw bytes on a request stream.
func (r *fuzzRun) opSendRaw() {
	str := r.stream()
	b := r.p.blob()
	if str != nil {
		r.write(str, b)
	}
}

// opStreamEnd: FIN, RESET_STREAM, STOP_SENDING or both on a request
// stream.
func (r *fuzzRun) opStreamEnd() {
	str := r.stream()
	how, code := r.p.pick(4), r.p.genResetCode()
	if str == nil {
		return
	}
	switch how {
	case 0:
		_ = str.Close()
	case 1:
		str.CancelWrite(code)
	case 2:
		str.CancelRead(code)
	default:
		str.CancelWrite(code)
		str.CancelRead(code)
	}
}

// opSubgroup: a subgroup stream (§11.3): a SUBGROUP_HEADER from fuzzed
// fields, objects, and an ending.
func (r *fuzzRun) opSubgroup() {
	p := &r.p
	flags := p.u8()
	h := wire.SubgroupHeader{
		TrackAlias:      p.num(),
		GroupID:         p.num(),
		SubgroupIDMode:  wire.SubgroupIDMode(flags >> 1 & 3 % 3),
		HasProperties:   flags&0x01 != 0,
		EndOfGroup:      flags&0x08 != 0,
		DefaultPriority: flags&0x20 != 0,
		FirstObject:     flags&0x40 != 0,
	}
	u := &fuzzUni{}
	switch h.SubgroupIDMode {
	case wire.SubgroupIDPresent:
		h.SubgroupID = p.num()
	case wire.SubgroupIDFirstObject:
		// The first object's ID is the Subgroup ID.
		h.SubgroupID = p.num()
		u.next = h.SubgroupID
	}
	if !h.DefaultPriority {
		h.Priority = p.u8()
	}
	b, err := h.Append(nil)
	if err != nil {
		return
	}
	u.sub = &wire.SubgroupEncoder{Header: h}
	if u.str = r.openUni(); u.str != nil {
		r.logf("  subgroup alias %d group %d", h.TrackAlias, h.GroupID)
		r.unis = append(r.unis, u)
	}
	r.write(u.str, b)
	r.subgroupObjects(u)
	r.endUni(u)
}

// subgroupObjects writes up to 7 objects on a subgroup stream.
func (r *fuzzRun) subgroupObjects(u *fuzzUni) {
	p := &r.p
	for range p.pick(8) {
		id := u.next
		if u.started || u.sub.Header.SubgroupIDMode != wire.SubgroupIDFirstObject {
			id += p.num()
		}
		o := wire.SubgroupObject{ObjectID: id, Status: fuzzStatuses[p.pick(len(fuzzStatuses))]}
		if o.Status == wire.ObjectNormal {
			o.PayloadLength = r.payload()
			if u.sub.Header.HasProperties && p.flag() {
				o.Properties = p.genObjectProps()
			}
		}
		b, err := u.sub.AppendObject(nil, o)
		if err != nil {
			continue
		}
		u.started, u.next = true, id+1
		r.write(u.str, b)
		r.write(u.str, fuzzZeros[:o.PayloadLength])
	}
}

// endUni ends a data stream as an operand says: FIN, left open, reset,
// or an object header whose payload never comes, then FIN or nothing.
func (r *fuzzRun) endUni(u *fuzzUni) {
	how := r.p.pick(5)
	var code uint64
	var truncated []byte
	fin := false
	switch how {
	case 2:
		code = r.p.genResetCode()
	case 3, 4:
		// A truncated object: its header promises a payload the stream
		// does not carry.
		truncated = wire.AppendVarint(nil, r.p.num())
		truncated = wire.AppendVarint(truncated, 1+r.p.num())
		fin = r.p.flag()
	}
	if u.str == nil {
		return
	}
	switch how {
	case 0:
		_ = u.str.Close()
	case 2:
		u.str.CancelWrite(code)
	case 3, 4:
		r.write(u.str, truncated)
		if fin {
			_ = u.str.Close()
		}
	}
}

// fetchID reads the Request ID of a FETCH_HEADER: mostly one the local
// session used (its requests are numbered in the order the program makes
// them), else the peer's own or any.
func (r *fuzzRun) fetchID() uint64 {
	sel := r.p.u8()
	switch {
	case sel < 0x80:
		return r.libFirst + 2*uint64(sel%16)
	case sel < 0xC0:
		return r.nextID - 2 + 2*uint64(sel%4)
	default:
		return r.p.num()
	}
}

// opFetchStream: a fetch stream (§11.4): FETCH_HEADER, entries, ending.
func (r *fuzzRun) opFetchStream() {
	h := wire.FetchHeader{RequestID: r.fetchID()}
	u := &fuzzUni{fetch: &wire.FetchEncoder{Descending: r.p.flag()}}
	if u.str = r.openUni(); u.str != nil {
		r.logf("  fetch stream for request %d", h.RequestID)
		r.unis = append(r.unis, u)
	}
	r.write(u.str, h.Append(nil))
	r.fetchEntries(u)
	r.endUni(u)
}

// fetchEntries writes up to 7 entries on a fetch stream.
func (r *fuzzRun) fetchEntries(u *fuzzUni) {
	p := &r.p
	for range p.pick(8) {
		kind := p.u8()
		group := u.group
		if kind&0x01 != 0 || !u.started {
			if d := p.num(); u.fetch.Descending && d <= group {
				group -= d
			} else if !u.fetch.Descending {
				group += d
			}
		}
		o := wire.FetchObject{GroupID: group, ObjectID: p.num()}
		if kind&0xC0 == 0xC0 {
			o.EndOfRange = wire.EndOfNonExistentRange
			if kind&0x20 != 0 {
				o.EndOfRange = wire.EndOfUnknownRange
			}
		} else {
			o.Datagram = kind&0x04 != 0
			if kind&0x02 != 0 && !o.Datagram {
				o.SubgroupID = p.num()
			}
			o.Priority = p.u8()
			if kind&0x08 != 0 {
				o.Properties = p.genObjectProps()
			}
			o.PayloadLength = r.payload()
		}
		b, err := u.fetch.AppendObject(nil, o)
		if err != nil {
			continue
		}
		u.started, u.group = true, group
		r.write(u.str, b)
		if o.EndOfRange == 0 {
			r.write(u.str, fuzzZeros[:o.PayloadLength])
		}
	}
}

// opUniRaw: a unidirectional stream of raw bytes (a stream type, a
// header, objects, padding …), then an ending.
func (r *fuzzRun) opUniRaw() {
	var b []byte
	if r.p.flag() {
		// Padding (§11.5.1), whose type the fuzzer would hardly guess.
		b = wire.AppendPaddingStream(nil, int(min(r.p.num(), 8<<10)))
	} else {
		b = r.p.blob()
	}
	u := &fuzzUni{}
	if u.str = r.openUni(); u.str != nil {
		r.unis = append(r.unis, u)
	}
	r.write(u.str, b)
	r.endUni(u)
}

// opUniMore: more on a data stream the peer opened: objects of its kind,
// or raw bytes; then an ending.
func (r *fuzzRun) opUniMore() {
	i := int(r.p.u8())
	raw := r.p.flag()
	u := &fuzzUni{} // none open: the operands are read for nothing
	if len(r.unis) > 0 {
		u = r.unis[i%len(r.unis)]
	}
	switch {
	case raw:
		r.write(u.str, r.p.blob())
	case u.sub != nil:
		r.subgroupObjects(u)
	case u.fetch != nil:
		r.fetchEntries(u)
	}
	r.endUni(u)
}

// opDatagram: up to 16 datagrams (§11.2): OBJECT_DATAGRAMs from fuzzed
// fields, raw bytes or padding.
func (r *fuzzRun) opDatagram() {
	p := &r.p
	var b []byte
	switch p.pick(4) {
	case 0, 1:
		flags := p.u8()
		d := wire.ObjectDatagram{TrackAlias: p.num(), GroupID: p.num(), ObjectID: p.num(),
			EndOfGroup: flags&0x01 != 0, DefaultPriority: flags&0x02 != 0, HasStatus: flags&0x04 != 0}
		if !d.DefaultPriority {
			d.Priority = p.u8()
		}
		if d.HasStatus {
			d.Status = fuzzStatuses[p.pick(len(fuzzStatuses))]
		} else {
			d.Payload = fuzzZeros[:min(r.payload(), 1100)]
		}
		if flags&0x08 != 0 {
			d.Properties = p.genObjectProps()
		}
		var err error
		if b, err = d.Append(nil); err != nil {
			return
		}
	case 2:
		b = p.blob()
	default:
		b = wire.AppendPaddingDatagram(nil, 1+p.pick(64))
	}
	for range 1 + p.pick(16) {
		if len(b) > r.budget {
			return
		}
		r.budget -= len(b)
		_ = r.peer.SendDatagram(b)
	}
}

// fuzzDurations are the steps opSleep lets the bubble's clock take: short
// ones, and ones past the session's timeouts (AliasWait 2 s, SETUP and
// control messages 10 s, the idle ends after them).
var fuzzDurations = []time.Duration{time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 10*time.Second + time.Millisecond, 31 * time.Second}

// opSleep lets time pass with every goroutine of the bubble idle.
func (r *fuzzRun) opSleep() { time.Sleep(fuzzDurations[r.p.pick(len(fuzzDurations))]) }

// fuzzCloseCodes are codes the peer closes with.
var fuzzCloseCodes = []wire.SessionErrorCode{wire.NoError, wire.ProtocolViolation, wire.InternalError,
	wire.GoawayTimeout, wire.ControlMessageTimeout}

// opClose: the peer closes the connection with a code, or loses it.
func (r *fuzzRun) opClose() {
	var code uint64
	switch r.p.pick(3) {
	case 0:
		code = uint64(fuzzCloseCodes[r.p.pick(len(fuzzCloseCodes))])
	case 1:
		code = r.p.num()
	default:
		if r.peerClose == nil && r.peer.Context().Err() == nil {
			r.lost = true
		}
		r.peer.Lose()
		return
	}
	if r.peerClose == nil && r.peer.Context().Err() == nil {
		r.peerClose = &transport.CloseError{Code: r.carried(code)}
	}
	_ = r.peer.CloseWithError(code, "fuzz")
}

// opStopLocalStream: STOP_SENDING on a data stream the local session
// opened (its control stream among them).
func (r *fuzzRun) opStopLocalStream() {
	i, code := int(r.p.u8()), r.p.genResetCode()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.libUnis) > 0 {
		r.libUnis[i%len(r.libUnis)].CancelRead(code)
	}
}
