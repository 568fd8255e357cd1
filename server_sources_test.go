package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// TestMaxSessionsPerSource: a source holding ServerOptions.MaxSessionsPerSource
// sessions, set up and idle, gets its next connection closed as busy before
// SETUP; once one of its sessions ends, it gets in again. Without the
// bound, a host opening idle sessions grew a relay to 10,000 of them and
// 1.4 GB.
func TestMaxSessionsPerSource(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		ls := startLibServer(t, nil, &ServerOptions{MaxSessionsPerSource: 2})
		var held []*Session
		for range 2 {
			fp := ls.dial("moqt")
			fp.sendSetup(ls.clientSetup())
			fp.readPeerSetup()
			held = append(held, ls.accept())
		}
		over := ls.dial("moqt")
		ce := over.expectClose(wire.InternalError)
		assert.Equal(t, "server busy", ce.Reason)

		require.NoError(t, held[0].CloseWithError(wire.NoError, ""))
		fp := ls.dial("moqt")
		fp.sendSetup(ls.clientSetup())
		fp.readPeerSetup()
		s := ls.accept()
		assert.NoError(t, s.Context().Err(), "a place was given back")
	})
}
