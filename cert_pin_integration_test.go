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
	"encoding/hex"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Dial's trust in a server's certificate over loopback QUIC and
// WebTransport, which carry the TLS handshake: pins
// (Config.ServerCertificateHashes), untrusted certificates, the
// application's VerifyConnection. The checks themselves are unit tested
// in cert_pin_test.go.

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
						assert.ErrorIs(t, err, ErrUntrustedCertificate)
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

// verifyConnectionAfterPin: with hashes set,
// the application's own VerifyConnection still runs after the hash check
// and can refuse the server.
func verifyConnectionAfterPin(t *testing.T) {
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
	assert.NotErrorIs(t, err, ErrUntrustedCertificate, "the application refused a certificate the pin trusts")
	assert.True(t, called)
	assert.False(t, base.InsecureSkipVerify, "the caller's TLSConfig is not modified")
}

// TestDialUntrustedCertificate: a client that neither pins a server's
// self-signed certificate nor trusts its CA gets an error that says so and
// what to do, over both transports, instead of a bare TLS alert code; with
// the pin, parsed from the hash as the server prints it, the same dial
// works. A name that does not fit is reported the same way, with its
// reason.
func TestDialUntrustedCertificate(t *testing.T) {
	cert, hash, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	srv, err := Listen("127.0.0.1:0", quietConfig(&Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}), nil)
	require.NoError(t, err)
	defer srv.Close()
	trusting := x509.NewCertPool()
	trusting.AddCert(cert.Leaf)

	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			url := tr.scheme + "://" + srv.Addr().String() + "/live"
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()

			// No pin, and roots that do not know it (nil would be the
			// system's: the same result, less certain).
			_, err := Dial(ctx, url, quietConfig(&Config{TLSConfig: &tls.Config{RootCAs: x509.NewCertPool()}}))
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrUntrustedCertificate)
			for _, want := range []string{"not trusted", "unknown authority", "Config.ServerCertificateHashes",
				"ParseCertificateHash", "Config.TLSConfig.RootCAs"} {
				assert.Contains(t, err.Error(), want)
			}
			var te *TransportError
			require.ErrorAs(t, err, &te, "the transport's error stays wrapped")
			assert.Equal(t, uint64(0x12a), te.Code, "CRYPTO_ERROR bad_certificate")
			assert.False(t, te.Remote)
			var cve *tls.CertificateVerificationError
			assert.ErrorAs(t, err, &cve)

			// The CA is trusted, the name is not the certificate's.
			_, err = Dial(ctx, url, quietConfig(&Config{TLSConfig: &tls.Config{RootCAs: trusting, ServerName: "example.com"}}))
			assert.ErrorIs(t, err, ErrUntrustedCertificate)
			assert.ErrorContains(t, err, "wanted to match example.com")

			// Pinned, as a client given the printed hash does.
			pin, err := ParseCertificateHash(hex.EncodeToString(hash[:]))
			require.NoError(t, err)
			s, err := Dial(ctx, url, quietConfig(&Config{TLSConfig: &tls.Config{RootCAs: x509.NewCertPool()},
				ServerCertificateHashes: [][32]byte{pin}}))
			require.NoError(t, err)
			accepted, err := srv.Accept(ctx)
			require.NoError(t, err)
			assert.NoError(t, s.Close())
			assert.NoError(t, accepted.Close())
		})
	}
}

// verifyConnectionWithoutPin: without pins, the application's own
// VerifyConnection refusing the server is reported as its error, not as an
// untrusted certificate whose advice would not apply.
func verifyConnectionWithoutPin(t *testing.T) {
	cert, _, err := GenerateCertificate("127.0.0.1")
	require.NoError(t, err)
	srv, err := Listen("127.0.0.1:0", quietConfig(&Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}), nil)
	require.NoError(t, err)
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)
	refused := errors.New("application refuses this server")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = Dial(ctx, "moqt://"+srv.Addr().String()+"/", quietConfig(&Config{TLSConfig: &tls.Config{RootCAs: roots,
		VerifyConnection: func(tls.ConnectionState) error { return refused }}}))
	assert.ErrorIs(t, err, refused)
	assert.NotErrorIs(t, err, ErrUntrustedCertificate)
}

// TestDialKeepsVerifyConnection: the application's VerifyConnection runs,
// and its refusal is reported as its own error, with pins and without.
func TestDialKeepsVerifyConnection(t *testing.T) {
	t.Run("pinned", verifyConnectionAfterPin)
	t.Run("unpinned", verifyConnectionWithoutPin)
}
