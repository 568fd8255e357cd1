package moqt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Session setup and the control streams (§6.3, §9.1, §9.2).

// After SETUP only GOAWAY may appear on the control stream (§9, Table 5).
func TestSetupOnlyGoawayOnControlStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  func(t *testing.T) []byte
	}{
		{"SUBSCRIBE", func(t *testing.T) []byte {
			b, err := wire.AppendMessage(wire.Draft21, nil, subscribeMsg(0, trackA, wire.Params{}))
			require.NoError(t, err)
			return b
		}},
		{"second SETUP", func(t *testing.T) []byte {
			b, err := wire.AppendMessage(wire.Draft21, nil, &wire.Setup{})
			require.NoError(t, err)
			return b
		}},
		{"unknown message type", func(*testing.T) []byte { return frame(0x3F, nil) }},
		{"reserved PUBLISH_OK of draft 17", func(*testing.T) []byte { return frame(0x1E, nil) }},
		{"length larger than the body", func(*testing.T) []byte { return frame(wire.MsgGoaway, []byte{0, 0})[:4] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := serverSession(t, nil)
				fp.ctrlMu.Lock()
				_, err := fp.ctrl.Write(tc.raw(t))
				fp.ctrlMu.Unlock()
				require.NoError(t, err)
				if tc.name == "length larger than the body" {
					// The body never completes until the stream ends.
					require.NoError(t, fp.ctrl.Close())
				}
				fp.expectClose(wire.ProtocolViolation)
				expectSessionError(t, s, wire.ProtocolViolation)
			})
		})
	}
}

// No SETUP within Config.SetupTimeout closes with CONTROL_MESSAGE_TIMEOUT,
// on the bubble's clock, to the millisecond.
func TestSetupTimeout(t *testing.T) {
	cfg := func() *Config { return &Config{SetupTimeout: 100 * time.Millisecond} }
	t.Run("pipe/no control stream", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			start := time.Now()
			_, fp, served := pipeServerAccept(t, transport.PipeConfig{}, cfg())
			fp.expectClose(wire.ControlMessageTimeout)
			assert.Equal(t, 100*time.Millisecond, time.Since(start))
			var se *SessionError
			require.ErrorAs(t, <-served, &se)
			assert.Equal(t, wire.ControlMessageTimeout, se.Code)
		})
	})
	t.Run("pipe/SETUP never completes", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			start := time.Now()
			_, fp, _ := pipeServerAccept(t, transport.PipeConfig{}, cfg())
			_, err := fp.openControl().Write([]byte{0xAF, 0x00, 0x00}) // type and half a length
			require.NoError(t, err)
			fp.expectClose(wire.ControlMessageTimeout)
			assert.Equal(t, 100*time.Millisecond, time.Since(start))
		})
	})
	t.Run("pipe/library client", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			start := time.Now()
			_, fp, dialed := pipeClientDial(t, transport.PipeConfig{}, cfg())
			fp.readPeerSetup()
			var se *SessionError
			require.ErrorAs(t, recvOrFail(t, dialed), &se)
			assert.Equal(t, wire.ControlMessageTimeout, se.Code)
			fp.expectClose(wire.ControlMessageTimeout)
			assert.Equal(t, 100*time.Millisecond, time.Since(start))
		})
	})
}

// A message of a type its stream may not carry closes the session with
// PROTOCOL_VIOLATION as soon as the type arrives (§6.3: a request stream
// begun by any other message; §9: an unknown type; only GOAWAY after SETUP
// on the control stream), not with CONTROL_MESSAGE_TIMEOUT once its
// declared body has failed to come. Random bytes on a request stream of
// moqt relay, from a hostile client, held their reader for 10 s and then
// closed with the wrong code.
func TestWrongMessageTypeRefusedBeforeItsBody(t *testing.T) {
	head := func(typ wire.MessageType) []byte { return frame(typ, make([]byte, 1000))[:20] }
	for _, tc := range []struct {
		name string
		send func(fp *fakePeer) error
	}{
		{"request stream begun by SUBSCRIBE_OK", func(fp *fakePeer) error {
			fp.openStream().sendRaw(head(wire.MsgSubscribeOK))
			return nil
		}},
		{"request stream begun by an unknown type", func(fp *fakePeer) error {
			fp.openStream().sendRaw(head(0x3F))
			return nil
		}},
		{"unknown type after a request", func(fp *fakePeer) error {
			fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
			expect[*wire.RequestError](fs)
			fs.sendRaw(head(0x3F))
			return nil
		}},
		{"SUBSCRIBE on the control stream", func(fp *fakePeer) error {
			fp.ctrlMu.Lock()
			defer fp.ctrlMu.Unlock()
			_, err := fp.ctrl.Write(head(wire.MsgSubscribe))
			return err
		}},
		{"unknown type on the control stream", func(fp *fakePeer) error {
			fp.ctrlMu.Lock()
			defer fp.ctrlMu.Unlock()
			_, err := fp.ctrl.Write(head(0x3F))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				s, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{ControlMessageTimeout: time.Second})
				start := time.Now()
				require.NoError(t, tc.send(fp))
				fp.expectClose(wire.ProtocolViolation)
				expectSessionError(t, s, wire.ProtocolViolation)
				assert.Zero(t, time.Since(start), "closed when the type came, not when the message timed out")
			})
		})
	}
}
