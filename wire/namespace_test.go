package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawNamespace encodes fields as a Track Namespace without the encoder's
// checks.
func rawNamespace(fields ...[]byte) []byte {
	b := AppendVarint(nil, uint64(len(fields)))
	for _, f := range fields {
		b = appendLenBytes(b, f)
	}
	return b
}

func fieldsOf(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = bytes.Repeat([]byte{'a' + byte(i%26)}, size)
	}
	return out
}

// namespaceCarriers returns, for each message with a Track Namespace or a
// namespace plus Track Name, a body built around ns and name.
func namespaceCarriers(ns []byte, name []byte) map[string]struct {
	typ  MessageType
	body []byte
} {
	n := appendLenBytes(nil, name)
	type carrier = struct {
		typ  MessageType
		body []byte
	}
	return map[string]carrier{
		"SUBSCRIBE":           {MsgSubscribe, rawBody(0, ns, n, 0)},
		"FETCH":               {MsgFetch, rawBody(0, ns, n, 0)},
		"TRACK_STATUS":        {MsgTrackStatus, rawBody(0, ns, n, 0)},
		"PUBLISH":             {MsgPublish, rawBody(1, ns, n, 2, 0)},
		"PUBLISH_SKIPPED":     {MsgPublishSkipped, rawBody(ns, n)},
		"REQUEST_ERROR":       {MsgRequestError, rawBody(int(ReqRedirect), 0, 0, 0, ns, n)},
		"PUBLISH_NAMESPACE":   {MsgPublishNamespace, rawBody(0, ns, 0)},
		"SUBSCRIBE_NAMESPACE": {MsgSubscribeNamespace, rawBody(0, ns, 0)},
		"SUBSCRIBE_TRACKS":    {MsgSubscribeTracks, rawBody(0, ns, 0)},
		"NAMESPACE":           {MsgNamespace, rawBody(ns)},
		"NAMESPACE_DONE":      {MsgNamespaceDone, rawBody(ns)},
		"REQUEST_UPDATE":      {MsgRequestUpdate, rawBody(0, 1, int(ParamTrackNamespacePrefix), ns)},
	}
}

func TestNamespace33Fields(t *testing.T) {
	for name, c := range namespaceCarriers(rawNamespace(fieldsOf(33, 1)...), []byte("t")) {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		assertCloses(t, err, ProtocolViolation)
		assert.NotErrorIs(t, err, ErrTruncated, name)
	}
	for name, c := range namespaceCarriers(rawNamespace(fieldsOf(32, 1)...), []byte("t")) {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		assert.NoError(t, err, name)
	}
	_, err := AppendMessage(Draft21, nil, &SubscribeNamespace{TrackNamespacePrefix: fieldsOf(33, 1)})
	assertCloses(t, err, ProtocolViolation)
}

func TestNamespaceEmptyField(t *testing.T) {
	ns := rawNamespace([]byte("a"), []byte{}, []byte("b"))
	for name, c := range namespaceCarriers(ns, []byte("t")) {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		assertCloses(t, err, ProtocolViolation)
		assert.NotErrorIs(t, err, ErrTruncated, name)
	}
	_, err := AppendMessage(Draft21, nil, &NamespaceMsg{TrackNamespaceSuffix: Namespace{[]byte("a"), nil}})
	assertCloses(t, err, ProtocolViolation)
}

func TestFullTrackNameOver4096(t *testing.T) {
	ns := rawNamespace(fieldsOf(4, 1000)...) // 4000 bytes
	withName := map[MessageType]bool{MsgSubscribe: true, MsgFetch: true, MsgTrackStatus: true,
		MsgPublish: true, MsgPublishSkipped: true, MsgRequestError: true}
	for name, c := range namespaceCarriers(ns, make([]byte, 97)) {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		if !withName[c.typ] {
			assert.NoError(t, err, "a 4000-byte namespace alone is fine: %s", name)
			continue
		}
		assertCloses(t, err, ProtocolViolation)
		assert.NotErrorIs(t, err, ErrTruncated, name)
	}
	for name, c := range namespaceCarriers(ns, make([]byte, 96)) {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		assert.NoError(t, err, "exactly 4096 bytes: %s", name)
	}
	// A namespace alone over 4096 bytes.
	long := rawNamespace(fieldsOf(5, 1000)...)
	for name, c := range namespaceCarriers(long, nil) {
		_, err := ParseMessage(Draft21, c.typ, c.body)
		assertCloses(t, err, ProtocolViolation)
		_ = name
	}
	_, err := AppendMessage(Draft21, nil, &PublishSkipped{TrackNamespaceSuffix: fieldsOf(4, 1000), TrackName: make([]byte, 97)})
	assertCloses(t, err, ProtocolViolation)
}

func TestNamespaceSuffixMayBeEmpty(t *testing.T) {
	// A suffix of zero fields names the prefix itself.
	m, err := ParseMessage(Draft21, MsgNamespace, []byte{0x00})
	require.NoError(t, err)
	assert.Equal(t, &NamespaceMsg{TrackNamespaceSuffix: Namespace{}}, m)
}
