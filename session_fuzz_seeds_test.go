package moqt

import (
	"slices"

	"github.com/moqt-go/moqt/wire"
)

// FuzzSession's seeds: programs that walk through whole exchanges, so that
// mutation starts from deep states (a subscription established and
// receiving, a fetch half delivered, a namespace subscription with
// namespaces active) rather than having to find SETUP first. Operands are
// written in the order the operations read them (session_fuzz_test.go);
// small numbers are one byte, whether read by u8 or num.

// fop is an operation: its opcode and operands.
func fop(name string, operands ...byte) []byte {
	for i, op := range fuzzOps {
		if op.name == name {
			return append([]byte{byte(i)}, operands...)
		}
	}
	panic("no fuzz operation " + name)
}

// fnum encodes v as fuzzProgram.num reads it.
func fnum(v uint64) []byte {
	switch {
	case v < 0xE0:
		return []byte{byte(v)}
	case v < 1<<12:
		return []byte{0xE0 | byte(v>>8), byte(v)}
	case v < 1<<32:
		return []byte{0xF0, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	}
	return []byte{0xFF, byte(v >> 56), byte(v >> 48), byte(v >> 40), byte(v >> 32),
		byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

// fblob encodes b as fuzzProgram.blob reads it.
func fblob(b []byte) []byte { return append(fnum(uint64(len(b))), b...) }

// fmsg is a framed control message, for the raw operations.
func fmsg(m wire.Message) []byte {
	b, err := wire.AppendMessage(wire.Draft21, nil, m)
	if err != nil {
		panic(err)
	}
	return b
}

// Indexes into the operations' tables, named for the seeds.
const (
	seedSubscribe, seedFetch, seedTrackStatus, seedPublish, seedPublishNamespace,
	seedSubscribeNamespace, seedSubscribeTracks = 0, 1, 2, 3, 4, 5, 6

	seedSubscribeOK, seedRequestOK, seedRequestError, seedFetchOK, seedPublishDone, seedRequestUpdate,
	seedNamespace, seedNamespaceDone, seedPublishSkipped, seedPublishStateNotify = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9

	seedLibSubscribe, seedLibFetch, seedLibSubscribeNamespace, seedLibSubscribeTracks, seedLibTrackStatus,
	seedLibPublishNamespace, seedLibPublish, seedLibUpdate, seedLibClose, seedLibAppClose, seedLibShutdown = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
)

func fuzzSessionSeeds() [][]byte {
	var seeds [][]byte
	add2 := func(flags, flags2 byte, ops ...[]byte) {
		seeds = append(seeds, slices.Concat(append([][]byte{{flags, flags2}}, ops...)...))
	}
	add := func(flags byte, ops ...[]byte) { add2(flags, 0, ops...) }
	server := byte(fuzzAutoSetup)
	client := byte(fuzzAutoSetup | fuzzLibClient)
	const wt = fuzzWebTransport

	// The peer subscribes to the local track, which publishes a group and
	// a datagram; the peer narrows the subscription with REQUEST_UPDATE
	// (LOCATION_FILTER from {2, 0}) and cancels it.
	peerSubscribes := [][]byte{
		fop("request", 0, seedSubscribe, 0, 0, 0),
		fop("local-track", 0, 0x01, 1, 0, 2, 5),
		fop("send", 0, seedRequestUpdate, 0, 0x04, 2, 2, 0, 0, 0),
		fop("local-track", 0, 0, 2, 0, 1, 3),
		fop("local-track", 2, 3, 0, 10),
		fop("stream-end", 0, 3, 0),
		fop("sleep", 4),
	}
	add(server, peerSubscribes...)
	add(client|wt, peerSubscribes...)

	// The local session subscribes; the peer answers SUBSCRIBE_OK with
	// alias 5, sends a subgroup of three objects, a datagram and
	// PUBLISH_DONE counting the one stream.
	libSubscribes := [][]byte{
		fop("local-request", seedLibSubscribe, 0, 0, 0),
		fop("send", 0, seedSubscribeOK, 5, 0, 0),
		fop("subgroup", 0x20, 5, 0, 3, 0, 0, 3, 0, 0, 3, 0, 0, 3, 0),
		fop("datagram", 0, 0x02, 5, 1, 0, 2, 0),
		fop("send", 0, seedPublishDone, 0, 1, 0),
		fop("sleep", 5),
	}
	add(client, libSubscribes...)
	add(server|wt, libSubscribes...)
	// The same read stream by stream, with the data ahead of SUBSCRIBE_OK
	// (§3.1.2) and a second stream left open past AliasWait.
	add(client,
		fop("local-request", seedLibSubscribe, 0, 0, 1),
		fop("subgroup", 0x60, 7, 0, 2, 0, 0, 4, 0, 0, 4, 0),
		fop("send", 0, seedSubscribeOK, 7, 0, 0),
		fop("subgroup", 0x21, 7, 1, 1, 0, 0, 2, 0, 1),
		fop("sleep", 5),
		fop("uni-more", 1, 0, 0),
		fop("sleep", 6),
	)

	// The local session fetches; FETCH_OK up to {2, 0}, then a fetch stream
	// with two objects and an End of Range.
	add(client,
		fop("local-request", seedLibFetch, 0, 0),
		fop("send", 0, seedFetchOK, 0, 2, 0, 0, 0),
		fop("fetch-stream", 0, 0, 3, 0, 0, 0, 0, 2, 0, 1, 0, 2, 0xC0, 5, 0),
		fop("sleep", 4),
	)

	// The peer fetches the local track from its cache and asks its status.
	add(server,
		fop("request", 0, seedFetch, 0, 0, 1),
		fop("request", 0, seedTrackStatus, 0, 0, 1),
		fop("sleep", 3),
	)

	// The local session subscribes to namespaces under (peer); the peer
	// accepts and publishes one, withdraws it, and publishes another.
	add(client,
		fop("local-request", seedLibSubscribeNamespace, 0, 0),
		fop("send", 0, seedRequestOK, 0, 0),
		fop("send", 0, seedNamespace, 0),
		fop("send", 0, seedNamespaceDone, 0),
		fop("send", 0, seedNamespace, 2),
		fop("sleep", 3),
	)

	// The peer asks for the tracks under (live): the local session
	// PUBLISHes its track on a stream of its own (the second), which the
	// peer accepts, and publishes to it. The peer also asks for the
	// namespaces under (live).
	add(server,
		fop("request", 0, seedSubscribeTracks, 0, 0, 0),
		fop("send", 1, seedRequestOK, 0, 0),
		fop("local-track", 0, 0, 4, 0, 1, 3),
		fop("request", 0, seedSubscribeNamespace, 0, 0, 0),
		fop("stream-end", 1, 2, 0),
		fop("sleep", 3),
	)

	// The peer PUBLISHes a track under (peer), alias 3, sends a subgroup
	// and PUBLISH_DONE.
	add(server,
		fop("request", 0, seedPublish, 0, 3, 0, 0, 0),
		fop("subgroup", 0x20, 3, 0, 2, 0, 0, 3, 0, 0, 3, 0),
		fop("send", 0, seedPublishDone, 0, 1, 0),
		fop("sleep", 5),
	)

	// The local session PUBLISHes; the peer answers PUBLISH_OK, updates the
	// subscriber priority, and stops the stream.
	add(client,
		fop("local-request", seedLibPublish, 0),
		fop("send", 0, seedRequestOK, 0, 0),
		fop("local-track", 0, 0x01, 1, 0, 2, 5),
		fop("send", 0, seedRequestUpdate, 0, 0x02, 9),
		fop("stream-end", 0, 2, 0),
		fop("sleep", 4),
	)

	// The local session announces a namespace and asks a track's status;
	// the peer accepts one and refuses the other; then GOAWAY and a
	// Shutdown that waits 100 ms.
	add(client,
		fop("local-request", seedLibPublishNamespace, 0, 0),
		fop("local-request", seedLibTrackStatus, 0, 0),
		fop("send", 0, seedRequestOK, 0, 0),
		fop("send", 1, seedRequestError, 0, 0, 0),
		fop("control", 0, 0, 0),
		fop("local-request", seedLibShutdown, 100, 0),
		fop("sleep", 4),
	)

	// No SETUP: a request waits for it, until SETUP's timeout closes the
	// session.
	add(0,
		fop("request", 0, seedSubscribe, 0, 0, 0),
		fop("sleep", 6),
	)

	// A raw SETUP, after the control stream's type, then raw GOAWAY.
	add(fuzzLibClient,
		slices.Concat(fop("setup", 2), fblob(fmsg(&wire.Setup{})[2:])),
		slices.Concat(fop("control", 2), fblob(fmsg(&wire.Goaway{Timeout: 100}))),
		fop("sleep", 4),
	)

	// Requests and updates as raw bytes: a SUBSCRIBE with a LOCATION_FILTER
	// and a REQUEST_UPDATE on its stream.
	add(server,
		slices.Concat(fop("request-raw"), fblob(fmsg(&wire.Subscribe{RequestID: 0, TrackNamespace: fuzzLocalTrack.Namespace,
			TrackName: fuzzLocalTrack.Name, Parameters: wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())}}))),
		fop("local-track", 0, 0, 1, 0, 1, 3),
		slices.Concat(fop("send-raw", 0), fblob(fmsg(&wire.RequestUpdate{RequestID: 2,
			Parameters: wire.Params{Forward: wire.Some(false)}}))),
		fop("sleep", 4),
	)

	// Padding on a stream and in datagrams, raw datagrams and streams.
	add(server,
		fop("uni-raw", 1, 100, 0),
		fop("datagram", 3, 10, 3),
		slices.Concat(fop("datagram", 2), fblob([]byte{0x00, 0x05, 0x01, 0x02, 'x'}), []byte{2}),
		slices.Concat(fop("uni-raw", 0), fblob([]byte{0x10, 0x05, 0x00, 0x01, 0x00, 0x01, 'y'}), []byte{0}),
		fop("sleep", 2),
	)

	// Fill fetch streams (§3.4): the peer subscribes with FILL_PARAMETERS;
	// the local session does, and the peer answers SUBSCRIBE_OK with a
	// Largest Object of {3, 1}, sends the fill for the SUBSCRIBE's Request
	// ID, then a subgroup.
	add(server,
		fop("request", 0, seedSubscribe, 0, 0x80, 0x80, 1, 0, 0),
		fop("local-track", 0, 0, 1, 0, 1, 3),
		fop("sleep", 3),
	)
	add(client,
		fop("local-request", seedLibSubscribe, 0, 0x80, 0x80, 1, 0, 0),
		fop("send", 0, seedSubscribeOK, 5, 0x40, 3, 1, 0),
		fop("fetch-stream", 0, 0, 2, 0, 2, 0, 0, 2, 0, 1, 0, 2, 0),
		fop("subgroup", 0x20, 5, 4, 1, 0, 0, 3, 0),
		fop("sleep", 4),
	)

	// A cache miss: the local track's Largest Object is {5, 0} but it holds
	// group 0 only, so the peer's FETCH makes it FETCH the rest from the
	// peer (CacheLimits.Miss), which answers.
	add2(server, fuzzMiss,
		fop("local-track", 4, 1, 5, 0),
		fop("request", 0, seedFetch, 0, 0, 1),
		fop("send", 1, seedFetchOK, 0, 5, 0, 0, 0),
		fop("fetch-stream", 0, 0, 2, 0, 1, 0, 0, 2, 1, 1, 0, 0, 2, 0),
		fop("sleep", 4),
	)

	// Volume: 31 subgroups of 7 objects of 64 KiB each for a subscription
	// the local session reads, and 31 × 16 datagrams for an alias nobody
	// named.
	big := fnum(1771) // × 37: 65527 bytes
	obj := slices.Concat([]byte{0, 0}, big)
	add(client,
		fop("local-request", seedLibSubscribe, 0, 0, 0),
		fop("send", 0, seedSubscribeOK, 5, 0, 0),
		fop("repeat", 29),
		slices.Concat(fop("subgroup", 0x20, 5, 0, 7), obj, obj, obj, obj, obj, obj, obj, []byte{0}),
		fop("repeat", 29),
		fop("datagram", 0, 0x02, 9, 1, 0, 30, 15),
		fop("sleep", 5),
	)
	// A peer that stops reading while the local track publishes to it:
	// the subscription falls behind (TOO_FAR_BEHIND).
	add2(server, fuzzPaused|fuzzTrackProps,
		fop("request", 0, seedSubscribe, 0, 0, 0),
		fop("repeat", 29),
		slices.Concat(fop("local-track", 0, 0, 1), []byte{0, 3}, fnum(221)),
		fop("sleep", 5),
		fop("peer-reading"),
		fop("sleep", 5),
	)

	// A bystander session shares the local track with the peer, which
	// subscribes, stops reading while the track publishes, and resets its
	// request stream.
	add2(client, fuzzWithBystander|fuzzPaused,
		fop("request", 0, seedSubscribe, 0, 0, 0),
		fop("repeat", 10),
		slices.Concat(fop("local-track", 0, 0, 1), []byte{0, 3}, fnum(221)),
		fop("sleep", 5),
		fop("stream-end", 0, 1, 0),
		fop("local-request", seedLibAppClose, 0),
	)

	// The local session updates and closes what it asked for: a namespace
	// subscription, a fetch, an announcement, a subscription; the peer
	// accepts each request and each update.
	add(client,
		fop("local-request", seedLibSubscribeNamespace, 0, 0),
		fop("send", 0, seedRequestOK, 0, 0),
		fop("local-request", seedLibUpdate, 0, 0x80, 0x80, 0, 2),
		fop("send", 0, seedRequestOK, 0, 0),
		fop("local-request", seedLibClose, 0, 0),
		fop("local-request", seedLibFetch, 0, 0),
		fop("send", 1, seedFetchOK, 0, 1, 0, 0, 0),
		fop("local-request", seedLibUpdate, 1, 0x02, 3),
		fop("send", 1, seedRequestOK, 0, 0),
		fop("local-request", seedLibClose, 1, 0),
		fop("local-request", seedLibPublishNamespace, 0, 0),
		fop("send", 2, seedRequestOK, 0, 0),
		fop("local-request", seedLibClose, 2, 0),
		fop("local-request", seedLibSubscribe, 0, 0, 0),
		fop("send", 3, seedSubscribeOK, 6, 0, 0),
		fop("local-request", seedLibUpdate, 3, 0x01, 0),
		fop("send", 3, seedRequestOK, 0, 0),
		fop("local-request", seedLibClose, 3, 0),
		fop("sleep", 4),
	)

	// The peer's FETCH of the track the Handler serves by hand, left open:
	// an update on it, then STOP_SENDING; and a SUBSCRIBE_NAMESPACE whose
	// prefix an update moves to (live, a).
	add(server,
		fop("request", 0, seedFetch, 3, 0, 0, 0),
		fop("send", 0, seedRequestUpdate, 0, 0x02, 1),
		fop("stream-end", 0, 2, 0),
		fop("request", 0, seedSubscribeNamespace, 0, 0, 0),
		fop("send", 1, seedRequestUpdate, 0, 0x80, 0x80, 0, 1),
		fop("request", 0, seedSubscribeTracks, 0, 0, 0),
		fop("sleep", 3),
	)

	// Delivery timeouts (§5.2): the peer subscribes with an
	// OBJECT_DELIVERY_TIMEOUT of 100 ms and stops reading while the track
	// publishes small subgroups, more than its stream credit allows.
	add2(server, fuzzPaused,
		fop("request", 0, seedSubscribe, 0, 0x10, 100, 0),
		fop("repeat", 25),
		fop("local-track", 0, 0, 2, 0, 0, 1),
		fop("sleep", 4),
		fop("peer-reading"),
		fop("sleep", 4),
	)

	// The peer closes with a code, or loses the connection.
	add(client, fop("request", 0, seedSubscribe, 0, 0, 0), fop("close", 0, 1))
	add(server, fop("local-request", seedLibSubscribe, 0, 0, 0), fop("close", 2))

	// The same programs on drafts 19 and 18 (the second flags byte's
	// draft bits): where a draft lacks a message or parameter a program
	// sends, the session must refuse it as that draft says.
	n := len(seeds)
	for _, d := range []byte{2, 3} {
		for _, sd := range seeds[:n] {
			c := slices.Clone(sd)
			c[1] |= d << fuzzDraftShift
			seeds = append(seeds, c)
		}
	}
	return seeds
}
