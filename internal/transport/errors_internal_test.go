package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

func TestFromQUIC(t *testing.T) {
	idle := &quic.IdleTimeoutError{}
	tests := []struct {
		name string
		in   error
		want error // compared with assert.Equal; nil means "check below"
	}{
		{"nil", nil, nil},
		{"EOF", io.EOF, io.EOF},
		{"remote reset", &quic.StreamError{StreamID: 4, ErrorCode: 7, Remote: true}, &StreamError{Code: 7, Remote: true}},
		{"local reset", &quic.StreamError{StreamID: 4, ErrorCode: 7}, &StreamError{Code: 7}},
		{"wrapped reset", fmt.Errorf("ctx: %w", &quic.StreamError{ErrorCode: 9, Remote: true}), &StreamError{Code: 9, Remote: true}},
		{"remote close", &quic.ApplicationError{ErrorCode: 0x10, ErrorMessage: "bye", Remote: true}, &CloseError{Code: 0x10, Reason: "bye", Remote: true}},
		{"local close", &quic.ApplicationError{ErrorCode: 0x3}, &CloseError{Code: 0x3}},
		{"canceled", context.Canceled, context.Canceled},
		{"deadline", context.DeadlineExceeded, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, fromQUIC(tc.in))
		})
	}

	t.Run("idle timeout is a ConnError", func(t *testing.T) {
		err := fromQUIC(idle)
		require.Error(t, err)
		assert.NotErrorAs(t, err, new(*CloseError))
		var ce *ConnError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, ConnIdleTimeout, ce.Kind)
		assert.Equal(t, "moqt transport: idle timeout", err.Error())
		assert.ErrorIs(t, err, net.ErrClosed)
		var nerr net.Error
		require.ErrorAs(t, err, &nerr)
		assert.True(t, nerr.Timeout())
		assert.True(t, strings.HasPrefix(err.Error(), "moqt transport: "), err.Error())
	})
	t.Run("transport error is a ConnError", func(t *testing.T) {
		in := &quic.TransportError{ErrorCode: quic.ConnectionRefused, ErrorMessage: "busy", Remote: true}
		err := fromQUIC(in)
		assert.ErrorIs(t, err, in)
		assert.NotErrorAs(t, err, new(*CloseError))
		assert.Equal(t, &ConnError{Kind: ConnTransportClose, Code: 0x2, Reason: "busy", Remote: true, Err: in}, err)
		assert.Equal(t, "moqt transport: connection closed with a transport error by peer, code 0x2: busy", err.Error())
	})
	t.Run("other connection ends are ConnErrors", func(t *testing.T) {
		for in, kind := range map[error]ConnErrorKind{
			&quic.HandshakeTimeoutError{}:   ConnHandshakeTimeout,
			&quic.StatelessResetError{}:     ConnStatelessReset,
			&quic.VersionNegotiationError{}: ConnLost,
		} {
			var ce *ConnError
			require.ErrorAs(t, fromQUIC(in), &ce, "%T", in)
			assert.Equal(t, kind, ce.Kind, "%T", in)
			assert.ErrorIs(t, ce, in)
		}
	})
}

func TestFromWebTransport(t *testing.T) {
	tests := []struct {
		name string
		in   error
		want error
		ok   bool
	}{
		{"stream", &webtransport.StreamError{ErrorCode: 0xffffffff, Remote: true}, &StreamError{Code: 0xffffffff, Remote: true}, true},
		{"session", &webtransport.SessionError{ErrorCode: 5, Message: "m", Remote: true}, &CloseError{Code: 5, Reason: "m", Remote: true}, true},
		{"wrapped session", fmt.Errorf("x: %w", &webtransport.SessionError{ErrorCode: 5}), &CloseError{Code: 5}, true},
		{"other", errors.New("other"), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := fromWebTransport(tc.in)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestErrorTypes(t *testing.T) {
	ce := &CloseError{Code: 0x10, Reason: "goaway", Remote: true}
	assert.ErrorIs(t, ce, net.ErrClosed)
	assert.Equal(t, "moqt transport: session closed by peer with code 0x10: goaway", ce.Error())
	assert.Equal(t, "moqt transport: session closed locally with code 0x0", (&CloseError{}).Error())
	assert.Equal(t, "moqt transport: stream reset by peer with code 0x2", (&StreamError{Code: 2, Remote: true}).Error())
	assert.ErrorIs(t, ErrListenerClosed, net.ErrClosed)
}

func TestCodeClamping(t *testing.T) {
	assert.Equal(t, uint64(5), quicCode(5))
	assert.Equal(t, uint64(MaxQUICCode), quicCode(MaxQUICCode))
	assert.Equal(t, uint64(MaxQUICCode), quicCode(1<<63))
	assert.Equal(t, uint32(5), wtCode(5))
	assert.Equal(t, uint32(MaxWebTransportCode), wtCode(MaxWebTransportCode))
	assert.Equal(t, uint32(MaxWebTransportCode), wtCode(MaxWebTransportCode+1))
	assert.Equal(t, uint32(MaxWebTransportCode), wtCode(1<<62))
}

func TestCloseReason(t *testing.T) {
	assert.Equal(t, "short", closeReason("short"))
	exact := strings.Repeat("a", wire.MaxReasonLen)
	assert.Equal(t, exact, closeReason(exact))
	assert.Equal(t, exact, closeReason(exact+"b"))
	// A three-byte rune straddling the limit is dropped whole.
	straddle := strings.Repeat("a", wire.MaxReasonLen-1) + "€"
	got := closeReason(straddle)
	assert.Equal(t, strings.Repeat("a", wire.MaxReasonLen-1), got)
	assert.True(t, utf8.ValidString(got))
}

func TestSelectProtocol(t *testing.T) {
	ours := []string{"moqt-21", "moqt-20"}
	tests := []struct {
		name  string
		field []string
		want  string
	}{
		{"absent", nil, ""},
		{"client order wins", []string{`"moqt-20", "moqt-21"`}, "moqt-20"},
		{"skips unknown", []string{`"moqt-99", "moqt-21"`}, "moqt-21"},
		{"split fields", []string{`"moqt-99"`, `"moqt-20"`}, "moqt-20"},
		{"parameters ignored", []string{`"moqt-21";q=1`}, "moqt-21"},
		{"none of ours", []string{`"moqt-99"`}, ""},
		{"token, not string", []string{`moqt`}, ""},
		{"non-string member", []string{`"moqt-21", 7`}, ""},
		{"inner list", []string{`("moqt-21")`}, ""},
		{"malformed", []string{`"moqt-21`}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, selectProtocol(tc.field, ours))
		})
	}
}

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		origin, host string
		ok           bool
	}{
		{"", "relay.example:443", true},
		{"https://relay.example:443", "relay.example:443", true},
		{"https://RELAY.example:443", "relay.example:443", true},
		{"https://relay.example", "relay.example:443", false},
		{"https://evil.example:443", "relay.example:443", false},
		{"null", "relay.example:443", false},
		{"://bad", "relay.example:443", false},
	}
	for _, tc := range tests {
		t.Run(tc.origin, func(t *testing.T) {
			r := &http.Request{Host: tc.host, Header: http.Header{}}
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			assert.Equal(t, tc.ok, sameOrigin(r))
		})
	}
}

func TestParseURL(t *testing.T) {
	tests := []struct {
		raw     string
		ok      bool
		dial    string
		errText string
	}{
		{"moqt://relay.example/live?x=1", true, "relay.example:443", ""},
		{"moqt://relay.example:4443", true, "relay.example:4443", ""},
		{"MOQT://relay.example:4443/a#frag:1", true, "relay.example:4443", ""},
		{"https://[::1]:8443/wt", true, "[::1]:8443", ""},
		{"https://127.0.0.1/", true, "127.0.0.1:443", ""},
		{"http://relay.example/", false, "", "scheme"},
		{"wss://relay.example/", false, "", "scheme"},
		{"relay.example:443", false, "", "scheme"},
		{"moqt:///path", false, "", "empty host"},
		{"moqt://:443/path", false, "", "empty host"},
		{"https://", false, "", "empty host"},
		{"moqt:relay.example", false, "", "empty host"},
		{"moqt://relay.example:port/", false, "", "port"},
		{"moqt://relay.example/live?a b", false, "", "RFC 3986"},
		{"moqt://relay.example/live?a%zz", false, "", "RFC 3986"},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			u, err := ParseURL(tc.raw)
			if !tc.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.errText)
				_, derr := Dial(t.Context(), tc.raw, nil, nil)
				assert.Error(t, derr, "Dial must reject what ParseURL rejects")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.dial, hostPort(u))
		})
	}
}

// The AUTHORITY and PATH Setup Options are the URI's authority, userinfo
// included (§9.1.1), and its path-abempty with "?" and the query whenever
// a query is present, an empty one too (§9.1.2).
func TestSetupOptions(t *testing.T) {
	for _, tc := range []struct{ raw, authority, path string }{
		{"moqt://relay.example/live?x=1", "relay.example", "/live?x=1"},
		{"moqt://relay.example:4443", "relay.example:4443", ""},
		{"moqt://user@relay.example:4443/p?", "user@relay.example:4443", "/p?"},
		{"moqt://relay.example/a%20b#frag:1", "relay.example", "/a%20b"},
		{"moqt://[::1]:4443/", "[::1]:4443", "/"},
	} {
		u, err := ParseURL(tc.raw)
		require.NoError(t, err, tc.raw)
		authority, path := SetupOptions(u)
		assert.Equal(t, tc.authority, authority, tc.raw)
		assert.Equal(t, tc.path, path, tc.raw)
	}
}

func TestListenRejectsBadConfig(t *testing.T) {
	_, err := Listen("127.0.0.1:0", nil, nil)
	assert.Error(t, err)
	_, err = Listen("127.0.0.1:0", nil, &ListenConfig{Protocols: []string{"h3"}})
	assert.Error(t, err)
	_, err = Listen("127.0.0.1:0", &tls.Config{}, &ListenConfig{Protocols: []string{"moqt-21", "h3"}})
	assert.ErrorContains(t, err, "h3")
}
