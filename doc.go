// Package moqt implements Media over QUIC Transport (MoQT),
// draft-ietf-moq-transport-21 (ALPN "moqt-21"; "moqt-20" shares its wire
// format and is negotiated too), over raw QUIC (quic-go) and WebTransport
// (webtransport-go).
//
// The codec for every control message and data-plane format lives in the
// wire subpackage, which imports only the standard library. The session
// layer (setup, request streams, subscriptions, publishing, filters and track
// aliases) is built on top of it in this package.
package moqt
