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

// Authorization tokens in a request's parameters: the credential as it is
// (USE_VALUE), or registered once under an alias and then named by it, which
// saves resending a long token on every request. The Type says what kind of
// credential the Value is; TokenTypeOutOfBand is one the endpoints agreed on.
func ExampleUseToken() {
	jwt := []byte("eyJhbGciOi...")
	first := wire.Params{AuthorizationTokens: []wire.Token{wire.RegisterToken(1, wire.TokenTypeOutOfBand, jwt)}}
	later := wire.Params{AuthorizationTokens: []wire.Token{wire.UseTokenAlias(1)}}
	once := wire.Params{AuthorizationTokens: []wire.Token{wire.UseToken(wire.TokenTypeOutOfBand, []byte("secret"))}}
	for _, p := range []wire.Params{first, later, once} {
		tok := p.AuthorizationTokens[0]
		fmt.Printf("%v alias=%d type=%d value=%q\n", tok.AliasType, tok.Alias, tok.Type, tok.Value)
	}
	// Output:
	// REGISTER alias=1 type=0 value="eyJhbGciOi..."
	// USE_ALIAS alias=1 type=0 value=""
	// USE_VALUE alias=0 type=0 value="secret"
}
