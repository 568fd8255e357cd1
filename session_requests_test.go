package moqt

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/moqt-go/moqt/wire"
)

// The dispatch table has an entry for exactly the messages that may open a
// request stream (§6.4.2), each of which says how it is served.
func TestRequestKindsCoverEveryRequest(t *testing.T) {
	for typ := wire.MessageType(0); typ <= wire.MsgSetup; typ++ {
		kind, ok := requestKinds[typ]
		assert.Equal(t, typ.IsRequest(), ok, "%s", typ)
		if ok {
			assert.NotNil(t, kind.serve, "%s", typ)
		}
	}
}
