package moqt

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/moqt-go/moqt/internal/transport"
)

// The certificate checks Dial and Listen make, without a connection; the
// dials are in cert_pin_integration_test.go.

// TestCheckPinnedValidityBounds checks the validity rules at their edges:
// a period of exactly 14 days is accepted, one second more
// is not; the first and last instants of the period are valid.
func TestCheckPinnedValidityBounds(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf := func(validity time.Duration) (*x509.Certificate, [32]byte) {
		raw := []byte(validity.String())
		return &x509.Certificate{Raw: raw, NotBefore: start, NotAfter: start.Add(validity)}, sha256.Sum256(raw)
	}
	c, h := leaf(maxCertificateValidity)
	assert.NoError(t, checkPinned([]*x509.Certificate{c}, [][32]byte{h}, start))
	assert.NoError(t, checkPinned([]*x509.Certificate{c}, [][32]byte{h}, c.NotAfter))
	assert.Error(t, checkPinned([]*x509.Certificate{c}, [][32]byte{h}, c.NotAfter.Add(time.Second)))
	assert.Error(t, checkPinned([]*x509.Certificate{c}, [][32]byte{h}, start.Add(-time.Second)))
	c, h = leaf(maxCertificateValidity + time.Second)
	assert.Error(t, checkPinned([]*x509.Certificate{c}, [][32]byte{h}, start.Add(time.Hour)))
	assert.Error(t, checkPinned(nil, [][32]byte{h}, start), "no certificate")
}

// TestListenNeedsCertificate: a server without a certificate in
// Config.TLSConfig is refused at Listen, not at each client's handshake.
func TestListenNeedsCertificate(t *testing.T) {
	for _, cfg := range []*Config{nil, {}, {TLSConfig: &tls.Config{}}} {
		_, err := Listen("127.0.0.1:0", cfg, nil)
		assert.ErrorContains(t, err, "Config.TLSConfig")
	}
}

// TestUntrustedCertificateFromAlert: a refusal that reaches Dial as a bare
// CRYPTO_ERROR, without crypto/tls's error, is recognized by its alert when
// this end sent one that refuses a certificate, and only then.
func TestUntrustedCertificateFromAlert(t *testing.T) {
	closed := func(code uint64, remote bool) error {
		return transportError(&transport.ConnError{Kind: transport.ConnTransportClose, Code: code, Remote: remote,
			Err: errors.New("crypto error")})
	}
	for _, tc := range []struct {
		name      string
		err       error
		untrusted bool
		why       string
	}{
		{"unknown_ca", closed(0x130, false), true, "unknown certificate authority"},
		{"certificate_expired", closed(0x12d, false), true, "expired certificate"},
		{"bad_certificate", closed(0x12a, false), true, "bad certificate"},
		{"handshake_failure", closed(0x128, false), false, ""},
		{"the peer refused ours", closed(0x12a, true), false, ""},
		{"not a crypto error", closed(0x2, false), false, ""},
		{"idle timeout", transportError(&transport.ConnError{Kind: transport.ConnIdleTimeout, Err: errors.New("idle")}), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := untrustedCertificate(tc.err)
			if !tc.untrusted {
				assert.Same(t, tc.err, got)
				return
			}
			assert.ErrorIs(t, got, ErrUntrustedCertificate)
			assert.ErrorIs(t, got, tc.err)
			assert.Contains(t, got.Error(), tc.why)
		})
	}
}
