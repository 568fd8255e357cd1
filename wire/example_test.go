package wire_test

import (
	"bytes"
	"fmt"

	"github.com/moqt-go/moqt/wire"
)

// Encode a SUBSCRIBE into a reused buffer and read it back through a
// MessageReader, as a session does on a request stream.
func ExampleAppendMessage() {
	sub := &wire.Subscribe{
		RequestID:      0,
		TrackNamespace: wire.NewNamespace("live"),
		TrackName:      []byte("cam"),
		Parameters:     wire.Params{Forward: wire.Some(true)},
	}
	buf, err := wire.AppendMessage(wire.Draft21, nil, sub)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("% x\n", buf)

	m, err := wire.NewMessageReader(bytes.NewReader(buf)).ReadMessage(wire.Draft21)
	if err != nil {
		fmt.Println(err)
		return
	}
	got := m.(*wire.Subscribe)
	fmt.Println(m.Type(), got.TrackNamespace, string(got.TrackName), got.Parameters.Forward.Value)
	// Output:
	// 03 00 0e 00 01 04 6c 69 76 65 03 63 61 6d 01 10 01
	// SUBSCRIBE live cam true
}
