package moqt

import (
	"bufio"
	"errors"
	"io"
	"slices"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/readahead"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The receiving half of the data plane: subgroup streams and datagrams
// find their subscription by Track Alias (§3.1.2). Objects that arrive
// before the SUBSCRIBE_OK or PUBLISH naming their alias wait, bounded in
// count, bytes and time (Config.MaxPendingStreams, MaxPendingBytes,
// MaxPendingDatagrams, AliasWait); a waiting stream is read into memory
// (see stream_pipe.go). Objects for an alias whose subscription just ended are
// discarded at once.

// receiveSubgroup routes a subgroup stream whose header has been read.
func (s *Session) receiveSubgroup(str transport.ReceiveStream, br *bufio.Reader, h wire.SubgroupHeader, slot *uniSlot) error {
	subs, ended := s.routes.lookupAlias(h.TrackAlias)
	var pipe *readahead.Pipe
	switch {
	case ended:
		// Late objects of a subscription that just ended are discarded
		// at once (§3.1.2).
		str.CancelRead(uint64(wire.ResetCancelled))
		return nil
	case len(subs) == 0:
		if !s.routes.reservePendingStream() {
			str.CancelRead(uint64(wire.ResetExcessiveLoad))
			return nil
		}
		pipe = newStreamPipe(s, str, br)
		var code wire.ResetCode
		var ok bool
		subs, code, ok = s.routes.waitAlias(s.ctx, h.TrackAlias)
		s.routes.releasePendingStream()
		if !ok {
			pipe.Abort(code)
			return nil
		}
		pipe.Bind()
		br = bufio.NewReader(pipe)
	}
	r := &SubgroupReader{str: str, br: br, pipe: pipe, dec: wire.SubgroupDecoder{Header: h}}
	r.held, _ = str.(*heldStream)
	first, err := r.dec.Read(br, nil)
	switch {
	case err == nil:
		r.first = &first
	case isCleanEOF(err):
		// An empty subgroup: it still counts as a stream of the
		// subscription (§9.9).
		r.err = err
	default:
		var pe *wire.ProtocolError
		if asProtocolError(err, &pe) {
			return err // closes the session
		}
		// Reset before its first object: still the subscription's
		// stream, which the reader reports as reset.
		r.err = s.streamError(err)
	}
	subgroupID, _ := r.dec.SubgroupID()
	accepts := func(sub *Subscription) bool { return sub.acceptsGroup(h.GroupID) }
	if r.first != nil {
		meta := filter.Object{Location: wire.Location{Group: h.GroupID, Object: first.ObjectID}, SubgroupID: subgroupID,
			PublisherPriority: h.Priority, Properties: first.Properties}
		if h.DefaultPriority {
			meta.PublisherPriority = subs[0].publisherPriority()
		}
		accepts = func(sub *Subscription) bool { return sub.accepts(meta) }
	}
	// A subscription that has all its streams, ended while this one was
	// routed, is passed over: a copy of a shared alias it would drop is
	// another's (§3.1.2).
	live := func(sub *Subscription) bool { return !sub.dataEnded() && accepts(sub) }
	for {
		sub := s.routes.routeCopy(h.TrackAlias, subs, copyKey{group: h.GroupID, id: subgroupID}, live)
		if sub == nil {
			// Its first object passes no live subscription's filters: a
			// late stream of an ended subscription that had the alias
			// (see Subscription.accepts). It is stopped, not delivered
			// nor counted for PUBLISH_DONE.
			r.stopWith(wire.ResetCancelled)
			return nil
		}
		r.sub = sub
		s.hook(func(h *sessionHooks) func() { return h.streamRouted })
		if r.err == nil {
			// The reader releases the slot once the stream is read to
			// its end or stopped; one that ended already needs none.
			r.slot = slot
			slot.handOver()
		}
		if sub.deliverStream(r) {
			return nil
		}
		subs = slices.DeleteFunc(slices.Clone(subs), func(o *Subscription) bool { return o == sub })
	}
}

// receiveDatagrams reads the session's datagrams until it ends (§11.2).
func (s *Session) receiveDatagrams() {
	for {
		b, err := s.conn.ReceiveDatagram(s.ctx)
		if err != nil {
			return
		}
		d, padding, err := wire.ParseDatagram(b)
		if err != nil {
			s.fail(err) // an unknown or invalid datagram type closes the session (§11)
			return
		}
		if padding {
			continue
		}
		s.routeDatagram(d)
	}
}

// routeDatagram delivers a datagram, or holds it briefly when its alias is
// not known yet.
func (s *Session) routeDatagram(d wire.ObjectDatagram) {
	subs := s.routes.liveAliasSubs(d.TrackAlias)
	if len(subs) == 0 {
		s.routes.holdDatagram(d)
		return
	}
	meta := filter.Object{Location: wire.Location{Group: d.GroupID, Object: d.ObjectID}, Datagram: true,
		PublisherPriority: d.Priority, Properties: d.Properties}
	if d.DefaultPriority {
		meta.PublisherPriority = subs[0].publisherPriority()
	}
	sub := s.routes.routeCopy(d.TrackAlias, subs, copyKey{group: d.GroupID, id: d.ObjectID, datagram: true},
		func(sub *Subscription) bool { return sub.accepts(meta) })
	if sub != nil {
		sub.deliverDatagram(d)
	}
	// Otherwise it passes no subscription's filters and is not theirs
	// (see Subscription.accepts).
}

// dataStreamError handles a data stream that failed while its header or
// first object was read.
func (s *Session) dataStreamError(str transport.ReceiveStream, err error) error {
	if isCleanEOF(err) {
		return nil
	}
	var pe *wire.ProtocolError
	if asProtocolError(err, &pe) {
		return err // closes the session
	}
	str.CancelRead(uint64(wire.ResetCancelled))
	return nil
}

// isCleanEOF reports a stream that ended at a boundary, not inside a
// structure.
func isCleanEOF(err error) bool {
	return errors.Is(err, io.EOF) && !errors.Is(err, wire.ErrTruncated)
}

// asProtocolError reports a codec error that must close the session.
func asProtocolError(err error, pe **wire.ProtocolError) bool {
	return errors.As(err, pe)
}
