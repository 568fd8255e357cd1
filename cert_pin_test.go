package moqt

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selfSigned makes a certificate for 127.0.0.1 valid from notBefore to
// notAfter, which GenerateCertificate cannot: expired, or valid too long.
func selfSigned(t *testing.T, notBefore, notAfter time.Time) (tls.Certificate, [32]byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "moqt test"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, sha256.Sum256(der)
}

// TestDialServerCertificateHashes dials servers over raw QUIC and
// WebTransport trusting them only by Config.ServerCertificateHashes: a
// matching, currently valid, short-lived certificate is accepted without
// any root; a mismatch, an expired certificate and one valid for longer
// than 14 days fail the dial with an error that says why.
func TestDialServerCertificateHashes(t *testing.T) {
	good, goodHash, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	_, otherHash, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	now := time.Now()
	expired, expiredHash := selfSigned(t, now.Add(-20*24*time.Hour), now.Add(-7*24*time.Hour))
	notYet, notYetHash := selfSigned(t, now.Add(time.Hour), now.Add(2*24*time.Hour))
	long, longHash := selfSigned(t, now.Add(-time.Hour), now.Add(maxCertificateValidity))

	tests := []struct {
		name    string
		cert    tls.Certificate
		hashes  [][32]byte
		wantErr string // empty: the dial succeeds
	}{
		{"match", good, [][32]byte{goodHash}, ""},
		{"one of several", good, [][32]byte{otherHash, goodHash}, ""},
		{"mismatch", good, [][32]byte{otherHash}, "matches none of Config.ServerCertificateHashes"},
		{"expired", expired, [][32]byte{expiredHash}, "not now"},
		{"not yet valid", notYet, [][32]byte{notYetHash}, "not now"},
		{"valid too long", long, [][32]byte{longHash}, "longer than the"},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					srv, err := Listen("127.0.0.1:0", quietConfig(&Config{
						TLSConfig: &tls.Config{Certificates: []tls.Certificate{tc.cert}},
					}), nil)
					require.NoError(t, err)
					defer srv.Close()
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					defer cancel()
					s, err := Dial(ctx, tr.scheme+"://"+srv.Addr().String()+"/live", quietConfig(&Config{
						// No root trusts the certificate: only its hash can.
						TLSConfig:               &tls.Config{RootCAs: x509.NewCertPool()},
						ServerCertificateHashes: tc.hashes,
					}))
					if tc.wantErr != "" {
						require.Error(t, err)
						assert.Contains(t, err.Error(), tc.wantErr)
						return
					}
					require.NoError(t, err)
					defer s.Close()
					accepted, err := srv.Accept(ctx)
					require.NoError(t, err)
					defer accepted.Close()
					assert.Equal(t, tr.scheme == "https", s.WebTransport())
					// Both ends know the authority the client asked for, on
					// either transport.
					assert.Equal(t, srv.Addr().String(), s.Authority())
					assert.Equal(t, srv.Addr().String(), accepted.Authority())
					assert.Equal(t, "/live", s.Path())
					assert.Equal(t, "/live", accepted.Path())
				})
			}
		})
	}
}

// TestDialServerCertificateHashesKeepsVerifyConnection: with hashes set,
// the application's own VerifyConnection still runs after the hash check
// and can refuse the server.
func TestDialServerCertificateHashesKeepsVerifyConnection(t *testing.T) {
	cert, hash, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	srv, err := Listen("127.0.0.1:0", quietConfig(&Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}), nil)
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	refused := errors.New("application refuses this server")
	var called bool
	base := &tls.Config{VerifyConnection: func(cs tls.ConnectionState) error {
		called = true
		assert.Equal(t, hash, sha256.Sum256(cs.PeerCertificates[0].Raw))
		return refused
	}}
	_, err = Dial(ctx, "moqt://"+srv.Addr().String()+"/live", quietConfig(&Config{TLSConfig: base, ServerCertificateHashes: [][32]byte{hash}}))
	assert.ErrorIs(t, err, refused)
	assert.True(t, called)
	assert.False(t, base.InsecureSkipVerify, "the caller's TLSConfig is not modified")
}

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
