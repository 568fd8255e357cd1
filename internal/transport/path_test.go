package transport_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/moqt-go/moqt/internal/transport"
)

// TestPathCounts: each end counts the packets it received from the other
// and the bytes it sent, on raw QUIC and on WebTransport.
func TestPathCounts(t *testing.T) {
	forEachKind(t, func(t *testing.T, k kind) {
		client, server, _ := connect(t, listen(t, nil), k, "/", nil)
		before := client.Path()
		roundTrip(t, client, server, "counted")
		after := client.Path()
		assert.Greater(t, after.Received, before.Received, "the client heard the server")
		assert.Greater(t, after.Sent, before.Sent, "the client sent")
		assert.Positive(t, server.Path().Received, "the server heard the client")
	})
}

// TestRecovering: a path recovers when the peer was heard from and this
// end sent at least a packet's worth meanwhile.
func TestRecovering(t *testing.T) {
	a := transport.PathCounts{Received: 10, Sent: 5000}
	assert.True(t, transport.Recovering(a, transport.PathCounts{Received: 11, Sent: 6200}))
	assert.False(t, transport.Recovering(a, transport.PathCounts{Received: 10, Sent: 9000}), "nothing heard")
	assert.False(t, transport.Recovering(a, transport.PathCounts{Received: 12, Sent: 5100}), "acknowledgements only")
}
