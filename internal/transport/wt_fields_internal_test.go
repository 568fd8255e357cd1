package transport

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestWebTransportFields: the unexported webtransport-go fields the
// transport reaches by reflection are there, with the types it expects,
// in the pinned version; without them reliable resets, stream priorities
// and the path counts of an application's session are lost.
func TestWebTransportFields(t *testing.T) {
	assert.True(t, wtFields.ok, "SendStream's str, streamHdrMu, streamHdr and writeErr")
	assert.True(t, wtFields.bidiOK, "Stream's sendStr")
	assert.True(t, wtFields.connOK, "Session's conn")
}
