package moqt

import (
	"bufio"
	"context"
	"errors"
	"io"
	"time"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// The receiving half of the data plane: subgroup streams and datagrams
// find their subscription by Track Alias (§3.1.2). Objects that arrive
// before the SUBSCRIBE_OK or PUBLISH naming their alias wait, bounded in
// count, bytes and time (Config.MaxPendingStreams, MaxPendingBytes,
// MaxPendingDatagrams, AliasWait); a waiting stream is read into memory
// (see streamPipe). Objects for an alias whose subscription just ended are
// discarded at once.

// receiveSubgroup routes a subgroup stream whose header has been read.
func (s *Session) receiveSubgroup(str transport.ReceiveStream, br *bufio.Reader, h wire.SubgroupHeader) error {
	subs, ended := s.lookupAlias(h.TrackAlias)
	var pipe *streamPipe
	switch {
	case ended:
		// Late objects of a subscription that just ended are discarded
		// at once (§3.1.2).
		str.CancelRead(uint64(wire.ResetCancelled))
		return nil
	case len(subs) == 0:
		if !s.reservePendingStream() {
			str.CancelRead(uint64(wire.ResetExcessiveLoad))
			return nil
		}
		pipe = newStreamPipe(s, str, br)
		var code wire.ResetCode
		var ok bool
		subs, code, ok = s.waitAlias(h.TrackAlias)
		s.releasePendingStream()
		if !ok {
			pipe.abort(code)
			return nil
		}
		pipe.bind()
		br = bufio.NewReader(pipe)
	}
	r := &SubgroupReader{str: str, br: br, pipe: pipe, dec: wire.SubgroupDecoder{Header: h}}
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
	sub := s.routeCopy(h.TrackAlias, subs, copyKey{group: h.GroupID, id: subgroupID}, accepts)
	if sub == nil {
		// Its first object passes no subscription's filters: a late
		// stream of an ended subscription that had the alias (see
		// Subscription.accepts). It is stopped, not delivered nor
		// counted for PUBLISH_DONE.
		r.stopWith(wire.ResetCancelled)
		return nil
	}
	r.sub = sub
	return sub.deliverStream(r)
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
	subs := s.liveAliasSubs(d.TrackAlias)
	if len(subs) == 0 {
		s.holdDatagram(d)
		return
	}
	meta := filter.Object{Location: wire.Location{Group: d.GroupID, Object: d.ObjectID}, Datagram: true,
		PublisherPriority: d.Priority, Properties: d.Properties}
	if d.DefaultPriority {
		meta.PublisherPriority = subs[0].publisherPriority()
	}
	sub := s.routeCopy(d.TrackAlias, subs, copyKey{group: d.GroupID, id: d.ObjectID, datagram: true},
		func(sub *Subscription) bool { return sub.accepts(meta) })
	if sub != nil {
		sub.deliverDatagram(d)
	}
	// Otherwise it passes no subscription's filters and is not theirs
	// (see Subscription.accepts).
}

// lookupAlias returns the subscriptions bound to alias, and whether the
// alias belongs to a subscription that just ended.
func (s *Session) lookupAlias(alias uint64) ([]*Subscription, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	subs := s.aliases.subs[alias]
	return subs, len(subs) == 0 && s.aliases.recentlyEnded(alias)
}

// reservePendingStream claims one of Config.MaxPendingStreams slots for a
// stream waiting for its alias.
func (s *Session) reservePendingStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pendingStreams >= s.cfg.MaxPendingStreams {
		return false
	}
	s.pendingStreams++
	return true
}

func (s *Session) releasePendingStream() {
	s.mu.Lock()
	s.pendingStreams--
	s.mu.Unlock()
}

// waitAlias waits up to Config.AliasWait for alias to be bound and returns
// its subscriptions. It reports false with a STOP_SENDING code when the
// wait ends otherwise.
func (s *Session) waitAlias(alias uint64) ([]*Subscription, wire.ResetCode, bool) {
	timer := time.NewTimer(s.cfg.AliasWait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		subs := s.aliases.subs[alias]
		bound := s.aliasBound
		s.mu.Unlock()
		if len(subs) > 0 {
			return subs, 0, true
		}
		select {
		case <-bound:
		case <-timer.C:
			return nil, wire.ResetCancelled, false
		case <-s.ctx.Done():
			return nil, wire.ResetSessionClosed, false
		}
	}
}

// liveAliasSubs returns the subscriptions bound to alias.
func (s *Session) liveAliasSubs(alias uint64) []*Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aliases.subs[alias]
}

// pendingDatagram is a datagram held until its alias is known.
type pendingDatagram struct {
	d    wire.ObjectDatagram
	when time.Time
}

// holdDatagram keeps a datagram with an unknown alias for up to
// Config.AliasWait, within Config.MaxPendingDatagrams; beyond that, or for
// an alias that just ended, it is dropped, as §11.2 allows.
func (s *Session) holdDatagram(d wire.ObjectDatagram) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aliases.recentlyEnded(d.TrackAlias) {
		return
	}
	now := time.Now()
	kept := s.pendingDatagrams[:0]
	for _, p := range s.pendingDatagrams {
		if now.Sub(p.when) < s.cfg.AliasWait {
			kept = append(kept, p)
		}
	}
	s.pendingDatagrams = kept
	if len(kept) >= s.cfg.MaxPendingDatagrams {
		s.droppedDatagrams++
		return
	}
	// The payload aliases the transport's buffer, which is the
	// datagram's own; it is kept as is.
	s.pendingDatagrams = append(s.pendingDatagrams, pendingDatagram{d: d, when: now})
}

// releaseDatagrams delivers the held datagrams of a newly bound alias.
// s.mu is held.
func (s *Session) releaseDatagramsLocked(alias uint64) []wire.ObjectDatagram {
	var out []wire.ObjectDatagram
	kept := s.pendingDatagrams[:0]
	for _, p := range s.pendingDatagrams {
		if p.d.TrackAlias == alias {
			out = append(out, p.d)
		} else {
			kept = append(kept, p)
		}
	}
	s.pendingDatagrams = kept
	return out
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

// deliverStream hands a subgroup stream to the subscription's reader,
// waiting while its queue is full: the stream stays unread meanwhile, so
// QUIC flow control pushes back on the publisher.
func (sub *Subscription) deliverStream(r *SubgroupReader) error {
	if r.err == nil {
		sub.trackReader(r)
	}
	// A free slot is always taken first: a stream is counted for
	// PUBLISH_DONE only once delivered, so the data plane cannot end while
	// a counted stream waits for a slot. Once the data plane has ended,
	// nothing is queued any more.
	select {
	case <-sub.dataDone:
		_ = r.Close()
		return nil
	default:
	}
	select {
	case sub.incoming <- r:
	default:
		select {
		case sub.incoming <- r:
			select {
			case <-sub.dataDone:
				// Both were ready: stopped like the rest below.
			default:
			}
		case <-sub.dataDone:
			_ = r.Close()
			return nil
		case <-sub.sess.ctx.Done():
			return nil
		}
	}
	sub.mu.Lock()
	sub.streamsSeen++
	finished := sub.finished != nil
	sub.mu.Unlock()
	select {
	case <-sub.dataDone:
		if !finished {
			// Cancelled here as the stream went in: endData may have
			// drained the queue before it, and nobody would stop it.
			sub.stopReaders()
		}
	default:
	}
	sub.noteStream()
	return nil
}

// deliverDatagram queues a datagram for ReadDatagram. When the queue is
// full the oldest datagram is dropped and counted: datagrams are unreliable
// by design (§11.2), but never dropped without a trace.
//
// A datagram that reveals a Malformed Track is dropped (C023) and the
// subscription cancelled (§12.1, C022).
func (sub *Subscription) deliverDatagram(d wire.ObjectDatagram) {
	if e := sub.checks.datagram(&d); e != nil {
		sub.malformedTrack(e)
		return
	}
	obj := Object{
		Location:   wire.Location{Group: d.GroupID, Object: d.ObjectID},
		Priority:   wire.Some(d.Priority),
		Status:     d.Status,
		Properties: d.Properties,
		Payload:    d.Payload,
		Datagram:   true,
		EndOfGroup: d.EndOfGroup,
	}
	if d.DefaultPriority {
		obj.Priority.Value = sub.publisherPriority()
	}
	if !sub.accepts(filter.Object{Location: obj.Location, Datagram: true, PublisherPriority: obj.Priority.Value, Properties: obj.Properties}) {
		return // held before its alias was known, and not this subscription's
	}
	for {
		select {
		case sub.datagrams <- obj:
			return
		default:
		}
		select {
		case <-sub.datagrams:
			sub.mu.Lock()
			sub.droppedDatagrams++
			sub.mu.Unlock()
		default:
		}
	}
}

// AcceptSubgroup returns the next subgroup stream of the subscription.
// After the subscription ends it keeps returning the streams that arrive
// late, until every stream PUBLISH_DONE counted has arrived or
// Config.DoneLinger passes; then it returns the subscription's error. A
// subscription whose streams wait here, or taken but unread, for longer
// than Config.ReadStallTimeout is cancelled (ErrFellBehind).
func (sub *Subscription) AcceptSubgroup(ctx context.Context) (*SubgroupReader, error) {
	for {
		var r *SubgroupReader
		select {
		case r = <-sub.incoming:
		default:
			select {
			case r = <-sub.incoming:
			case <-sub.dataDone:
				select {
				case r = <-sub.incoming:
				default:
					return nil, sub.Err()
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if r = sub.take(r); r != nil {
			return r, nil
		}
	}
}

// take hands r to the application, unless this end cancelled the
// subscription for falling behind or a Malformed Track: its queued streams
// are being stopped, and one taken now would be stopped too.
func (sub *Subscription) take(r *SubgroupReader) *SubgroupReader {
	sub.mu.Lock()
	code := sub.stopCode
	sub.mu.Unlock()
	if code != 0 {
		r.stopWith(code)
		sub.forgetReader(r)
		return nil
	}
	r.watch.take()
	return r
}

// ReadDatagram returns the next object the subscription received as a
// datagram (§11.2). The Object's Payload and Properties alias the
// datagram as the transport delivered it, a buffer of its own: they are the
// caller's to keep. Datagrams not taken are queued, up to 256; beyond that
// the oldest are dropped and counted by DroppedDatagrams. Use either
// ReadDatagram or Subscription.ReadObject, which returns datagrams too.
func (sub *Subscription) ReadDatagram(ctx context.Context) (Object, error) {
	select {
	case d := <-sub.datagrams:
		return d, nil
	case <-sub.dataDone:
		select {
		case d := <-sub.datagrams:
			return d, nil
		default:
		}
		return Object{}, sub.Err()
	case <-ctx.Done():
		return Object{}, ctx.Err()
	}
}

// DroppedDatagrams counts datagrams dropped because ReadDatagram did not
// keep up.
func (sub *Subscription) DroppedDatagrams() uint64 {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	return sub.droppedDatagrams
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
