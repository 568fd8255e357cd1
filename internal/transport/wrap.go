package transport

import (
	"errors"
	"fmt"
	"slices"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"
)

// WrapQUIC returns a Conn over qconn, a raw QUIC connection the
// application established itself. qconn must have negotiated one of
// protocols by ALPN, and QUIC DATAGRAM; otherwise WrapQUIC returns an
// error and leaves qconn as it is. The Conn owns qconn: its
// CloseWithError closes it.
func WrapQUIC(qconn *quic.Conn, protocols []string) (Conn, error) {
	if _, err := checkQUIC(qconn, protocols); err != nil {
		return nil, err
	}
	return newQUICConn(qconn), nil
}

// WrapWebTransport returns a Conn over sess, a WebTransport session the
// application established itself. sess must have negotiated one of
// protocols (WT-Protocol); otherwise WrapWebTransport returns an error and
// leaves sess as it is. The Conn owns sess but not the QUIC connection
// under it, which may carry other sessions: its CloseWithError closes the
// session only, and returns once WT_CLOSE_SESSION is queued on the
// CONNECT stream.
func WrapWebTransport(sess *webtransport.Session, protocols []string) (Conn, error) {
	if err := checkWebTransport(sess, protocols); err != nil {
		return nil, err
	}
	return newWTConn(sess, nil), nil
}

// checkQUIC refuses a raw QUIC connection that cannot carry MoQT: it
// returns the reason to close it with, and the error to report.
func checkQUIC(qconn *quic.Conn, protocols []string) (string, error) {
	state := qconn.ConnectionState()
	if !state.SupportsDatagrams.Remote {
		const reason = "QUIC DATAGRAM not negotiated"
		return reason, errors.New("moqt transport: " + reason)
	}
	if p := state.TLS.NegotiatedProtocol; !slices.Contains(protocols, p) {
		return "no protocol negotiated", fmt.Errorf("moqt transport: connection negotiated ALPN %q, not one of %q", p, protocols)
	}
	return "", nil
}

// checkWebTransport refuses a WebTransport session whose WT-Protocol is
// not one of protocols (§6.2).
func checkWebTransport(sess *webtransport.Session, protocols []string) error {
	if p := sess.SessionState().ApplicationProtocol; !slices.Contains(protocols, p) {
		if p == "" {
			return fmt.Errorf("moqt transport: WebTransport session negotiated no protocol, not one of %q", protocols)
		}
		return fmt.Errorf("moqt transport: WebTransport session negotiated protocol %q, not one of %q", p, protocols)
	}
	return nil
}
