package moqt

import "github.com/moqt-go/moqt/wire"

// Object is one MoQT object (§2.1, §11.1.1): where it sits in its track,
// how it is delivered, and its payload. Readers return it, writers take
// it, and datagrams carry it, so a relay forwards what it reads unchanged.
//
// Payload ownership: an Object a reader returns owns its Payload (and
// Properties) unless the reader's doc says the slice is the caller's
// buffer or is valid only until the next read; a writer does not keep
// either slice after it returns, so the caller may reuse them at once.
//
// An Object read from a subscription's streams or datagrams also remembers
// when it arrived. Written on as it is, as a relay does, its
// OBJECT_DELIVERY_TIMEOUT and the track's MAX_CACHE_DURATION run from that
// arrival, not from the write (§5.2, §10.3); an Object built afresh runs
// them from its write. That memory is an unexported field: compare a read
// Object's fields, not the whole value, with one built by hand.
type Object struct {
	// Location is the object's Group ID and Object ID.
	Location wire.Location
	// SubgroupID is the object's Subgroup ID; 0 for datagrams, which have
	// none.
	SubgroupID uint64
	// Priority is the Publisher Priority (§5.1). A reader always sets it,
	// to the object's own or the track's default it inherits; unset on a
	// write, the object inherits the track's default.
	Priority wire.Opt[uint8]
	// Status is the Object Status; a status other than Normal has no
	// payload (§11.1.1.1).
	Status wire.ObjectStatus
	// Properties is the raw Object Properties block (§11.1.3), read with
	// wire.WalkKV; nil for none.
	Properties []byte
	// Payload is the object's payload.
	Payload []byte
	// Datagram reports the Datagram Forwarding Preference: the object
	// travels in an OBJECT_DATAGRAM and has no Subgroup ID (§2.2).
	Datagram bool
	// EndOfGroup is the datagram END_OF_GROUP flag: no larger Object ID
	// exists in the group (§11.2.1).
	EndOfGroup bool
	// EndOfRange, when set, makes this entry of a FETCH or fill fetch
	// stream not an object but the end of a range of objects the stream
	// does not carry (§11.4.1.2): every Location after the previous entry
	// (or from the start of the requested range) up to and including
	// Location does not exist, is unknown, or timed out. No other field is
	// used. Subscription streams and datagrams never carry one.
	EndOfRange wire.EndOfRange
	// Incomplete, when set, makes this entry of Subscription.ReadObject
	// not an object but news that objects may be missing, the way
	// EndOfRange reports a fetch's gaps: a subgroup stream that ended
	// before its FIN (§11.3.2), named by Location.Group and SubgroupID,
	// whose objects after the last one returned may exist; or, with
	// ErrFillFailed in its chain, a fill fetch stream that failed before
	// delivering its whole range (§3.4.1). It says why: a *StreamError
	// with the publisher's reset code (CANCELLED for a subscription that
	// joined mid-subgroup or whose filter changed, DELIVERY_TIMEOUT, …),
	// or ErrObjectTooLarge for a stream this end stopped. No other field
	// is set. The subscription goes on. Writers refuse such an entry.
	Incomplete error

	// arrived is when a reader received the object (mono.Now): when it
	// last read its stream from the transport before decoding the
	// object's header; 0 for an object the application made. A relay
	// writing the object on passes it along, so that
	// OBJECT_DELIVERY_TIMEOUT, MAX_CACHE_DURATION and the wait for slow
	// subscribers run from the object's receipt, not from its write
	// (§5.2, §10.3).
	arrived int64
}
