package relay

import (
	"fmt"
	"hash/maphash"
	"io"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// Comparing duplicates (§7.1, §12.1). The objects of several publishers of
// one track are deduplicated by Location; a duplicate that differs from
// the object forwarded in its Forwarding Preference, Subgroup ID, Publisher
// Priority or payload makes the track Malformed. The relay keeps, for the
// objects it forwarded last, a fingerprint: those fields and the payload's
// length and 64-bit hash.
//
// The hash is hash/maphash, seeded per track at random: fast (a few tens
// of nanoseconds for a 1200-byte payload), 64 bits, and unpredictable to a
// publisher that does not know the seed. Equal payloads always hash equal,
// so a hash never makes a well-formed track Malformed; a collision only
// lets a differing duplicate through unnoticed, which a hostile publisher
// gains nothing from (it could send identical duplicates). Payloads too
// large to hold are hashed as they stream, with the same function.
//
// Memory is bounded: fingerprints live in a direct-mapped table of
// maxFingerprints slots, allocated at the track's first object, where a new
// object takes the slot of an older one. Forgetting only loses evidence: a
// duplicate with no fingerprint left is dropped unchecked, as before, and
// never reported. At 48 bytes a slot, a track holds 48 KB of them.
const maxFingerprints = 1024

// fingerprint is what the relay keeps of an object it forwarded.
type fingerprint struct {
	loc      wire.Location
	subgroup uint64
	length   uint64
	hash     uint64
	priority uint8
	datagram bool
	// payload: the object has Normal status, so its payload is compared;
	// one that has ceased to exist may be received again without it
	// (§7.1).
	payload bool
	used    bool
	// onlyDatagram: all that is known is that the object was a datagram,
	// its fingerprint overwritten.
	onlyDatagram bool
}

// slot is where l's fingerprint goes: consecutive Object IDs take
// consecutive slots, and groups spread by Fibonacci hashing, so that the
// table keeps about the last maxFingerprints objects.
func slot(l wire.Location) int {
	return int((l.Group*0x9E3779B97F4A7C15>>54 + l.Object) % maxFingerprints)
}

// fingerprintOf fingerprints obj, with hash the hash of its payload.
func fingerprintOf(obj *moqt.Object, length, hash uint64) fingerprint {
	return fingerprint{
		loc: obj.Location, subgroup: obj.SubgroupID, length: length, hash: hash,
		priority: obj.Priority.Value, datagram: obj.Datagram,
		payload: obj.Status == wire.ObjectNormal, used: true,
	}
}

// differs names how duplicate d contradicts the object f forwarded, or
// returns "" when it does not; the payload is compared when withPayload.
func (f *fingerprint) differs(d *fingerprint, withPayload bool) string {
	l := f.loc
	switch {
	case f.datagram != d.datagram:
		return fmt.Sprintf("object %v received both as a datagram and on a subgroup stream", l)
	case f.onlyDatagram:
		return ""
	case f.subgroup != d.subgroup:
		return fmt.Sprintf("object %v received on subgroups %d and %d", l, f.subgroup, d.subgroup)
	case f.priority != d.priority:
		return fmt.Sprintf("object %v received with Publisher Priorities %d and %d", l, f.priority, d.priority)
	case f.payload && d.payload && f.length != d.length:
		return fmt.Sprintf("object %v received with payloads of %d and %d bytes", l, f.length, d.length)
	case withPayload && f.payload && d.payload && f.hash != d.hash:
		return fmt.Sprintf("object %v received with different payloads", l)
	}
	return ""
}

// hashPayload hashes a payload held whole.
func (o *outputs) hashPayload(b []byte) uint64 { return maphash.Bytes(o.seed, b) }

// lookupLocked returns the fingerprint kept of l, if any; o.mu is held.
// An object forwarded as a datagram whose fingerprint was overwritten is
// still known as one.
func (o *outputs) lookupLocked(l wire.Location) (fingerprint, bool) {
	if o.fps != nil {
		if f := o.fps[slot(l)]; f.used && f.loc == l {
			return f, true
		}
	}
	if _, ok := o.dgSeen[l]; ok {
		return fingerprint{loc: l, datagram: true, used: true, onlyDatagram: true}, true
	}
	return fingerprint{}, false
}

// note looks fp's object up: seen reports it a duplicate of an object
// kept, conflict how it contradicts it. A new object is kept when keep
// says it is to be forwarded. The payload is compared when withPayload;
// without, the caller compares it once hashed (compare).
func (o *outputs) note(fp fingerprint, withPayload, keep bool) (seen bool, conflict string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f, ok := o.lookupLocked(fp.loc); ok {
		return true, f.differs(&fp, withPayload)
	}
	if keep {
		o.keepLocked(fp)
	}
	return false, ""
}

// keepLocked records fp; o.mu is held.
func (o *outputs) keepLocked(fp fingerprint) {
	if o.fps == nil {
		o.fps = make([]fingerprint, maxFingerprints)
	}
	o.fps[slot(fp.loc)] = fp
	if fp.datagram {
		o.dgSeen[fp.loc] = struct{}{}
		o.dgOrder = append(o.dgOrder, fp.loc)
		if len(o.dgOrder) > maxSeenDatagrams {
			delete(o.dgSeen, o.dgOrder[0])
			o.dgOrder = o.dgOrder[1:]
		}
	}
}

// keep records fp of an object forwarded after its payload streamed
// through, and reports how it contradicts one of the same Location kept
// meanwhile (another publisher's, on another subgroup).
func (o *outputs) keep(fp fingerprint) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if f, ok := o.lookupLocked(fp.loc); ok {
		return f.differs(&fp, true)
	}
	o.keepLocked(fp)
	return ""
}

// forget drops the fingerprint of an object that could not be forwarded:
// another publisher's copy is then forwarded, not dropped.
func (o *outputs) forget(l wire.Location) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fps != nil && o.fps[slot(l)].loc == l {
		o.fps[slot(l)] = fingerprint{}
	}
}

// compare hashes the rest of a duplicate's payload, too large to hold, from
// r and compares it with what the relay kept of the object.
func (o *outputs) compare(fp fingerprint, r io.Reader) (string, error) {
	h := maphash.Hash{}
	h.SetSeed(o.seed)
	if _, err := io.Copy(&h, r); err != nil {
		return "", err
	}
	fp.hash = h.Sum64()
	o.mu.Lock()
	f, ok := o.lookupLocked(fp.loc)
	o.mu.Unlock()
	if !ok {
		return "", nil
	}
	return f.differs(&fp, true), nil
}

// hashingReader hashes what is read through it.
type hashingReader struct {
	r   io.Reader
	h   maphash.Hash
	err error // the read's failure, other than io.EOF
}

func (hr *hashingReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	_, _ = hr.h.Write(p[:n])
	if err != nil && err != io.EOF {
		hr.err = err
	}
	return n, err
}

// malformed ends the track on a duplicate that contradicts the object
// forwarded: every downstream subscription gets PUBLISH_DONE
// MALFORMED_TRACK, every upstream subscription is cancelled, and the track
// leaves the registry, its cache with it (§12.1), as for a Malformed Track
// an upstream subscription reports.
func (o *outputs) malformed(reason string) {
	reg := o.e.reg
	o.mu.Lock()
	again := o.malformedSeen
	o.malformedSeen = true
	o.mu.Unlock()
	if again { // the track is ending: objects in flight find it too
		return
	}
	reg.met.Dropped(DropMalformed, 1)
	reg.log.Warn("relay: track", "event", "malformed", "track", o.e.name.String(), "reason", reason)
	o.e.shutdown(wire.DoneMalformedTrack, "malformed track upstream: "+reason)
}
