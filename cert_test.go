package moqt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGenerateCertificateDefaults(t *testing.T) {
	cert, hash, err := GenerateCertificate()
	require.NoError(t, err)
	require.Len(t, cert.Certificate, 1)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)

	assert.Equal(t, sha256.Sum256(cert.Certificate[0]), hash)
	assert.Equal(t, leaf.Raw, cert.Leaf.Raw)

	validity := leaf.NotAfter.Sub(leaf.NotBefore)
	assert.LessOrEqual(t, validity, 14*24*time.Hour)
	now := time.Now()
	assert.True(t, leaf.NotBefore.Before(now), "not yet valid: %v", leaf.NotBefore)
	assert.True(t, leaf.NotAfter.After(now.Add(13*24*time.Hour)), "expires too soon: %v", leaf.NotAfter)

	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	require.True(t, ok, "private key is %T", cert.PrivateKey)
	assert.Equal(t, elliptic.P256(), key.Curve)
	assert.Equal(t, x509.ECDSA, leaf.PublicKeyAlgorithm)
	assert.Equal(t, x509.ECDSAWithSHA256, leaf.SignatureAlgorithm)
	assert.Contains(t, leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	assert.False(t, leaf.IsCA)

	assert.Equal(t, []string{"localhost"}, leaf.DNSNames)
	require.Len(t, leaf.IPAddresses, 2)
	assert.True(t, leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")))
	assert.True(t, leaf.IPAddresses[1].Equal(net.ParseIP("::1")))
}

func TestGenerateCertificateHosts(t *testing.T) {
	cert, _, err := GenerateCertificate("relay.example", "192.0.2.7", "2001:db8::1")
	require.NoError(t, err)
	assert.Equal(t, []string{"relay.example"}, cert.Leaf.DNSNames)
	require.Len(t, cert.Leaf.IPAddresses, 2)
	assert.True(t, cert.Leaf.IPAddresses[0].Equal(net.ParseIP("192.0.2.7")))
	assert.True(t, cert.Leaf.IPAddresses[1].Equal(net.ParseIP("2001:db8::1")))
	assert.NoError(t, cert.Leaf.VerifyHostname("relay.example"))
	assert.Error(t, cert.Leaf.VerifyHostname("localhost"))
}

func TestGenerateCertificateRejectsEmptyHost(t *testing.T) {
	_, _, err := GenerateCertificate("localhost", "")
	assert.Error(t, err)
}

func TestGenerateCertificateIsFresh(t *testing.T) {
	a, hashA, err := GenerateCertificate()
	require.NoError(t, err)
	b, hashB, err := GenerateCertificate()
	require.NoError(t, err)
	assert.NotEqual(t, hashA, hashB)
	assert.NotEqual(t, a.Leaf.SerialNumber, b.Leaf.SerialNumber)
}

// TestGenerateCertificateHandshake runs real TLS 1.3 handshakes against the
// certificate, trusting it as its own root, for each default name.
func TestGenerateCertificateHandshake(t *testing.T) {
	cert, hash, err := GenerateCertificate()
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(cert.Leaf)

	tests := []struct {
		serverName string
		ok         bool
	}{
		{"localhost", true},
		{"127.0.0.1", true},
		{"::1", true},
		{"example.com", false},
	}
	for _, tc := range tests {
		t.Run(tc.serverName, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
			require.NoError(t, err)
			defer ln.Close()
			serverErr := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					serverErr <- err
					return
				}
				defer c.Close()
				serverErr <- c.(*tls.Conn).Handshake()
			}()
			raw, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			client := tls.Client(raw, &tls.Config{
				RootCAs:    roots,
				ServerName: tc.serverName,
				MinVersion: tls.VersionTLS13,
			})
			err = client.Handshake()
			require.NoError(t, client.Close())
			srvErr := <-serverErr
			if !tc.ok {
				var verr *tls.CertificateVerificationError
				assert.ErrorAs(t, err, &verr)
				assert.Error(t, srvErr, "the client must abort the handshake")
				return
			}
			require.NoError(t, err)
			require.NoError(t, srvErr)
			state := client.ConnectionState()
			require.Len(t, state.PeerCertificates, 1)
			assert.Equal(t, hash, sha256.Sum256(state.PeerCertificates[0].Raw))
			assert.Equal(t, uint16(tls.VersionTLS13), state.Version)
		})
	}
}

// TestParseCertificateHash reads a SHA-256 in each form a server or a tool
// prints it, and refuses anything else with an error that says what was
// wrong.
func TestParseCertificateHash(t *testing.T) {
	var want [32]byte
	for i := range want {
		want[i] = byte(0xa0 + i)
	}
	lower := hex.EncodeToString(want[:])
	var pairs []string
	for i := 0; i < len(lower); i += 2 {
		pairs = append(pairs, strings.ToUpper(lower[i:i+2]))
	}
	colons := strings.Join(pairs, ":")
	b64 := base64.StdEncoding.EncodeToString(want[:])
	require.Len(t, b64, 44)

	for _, tc := range []struct{ name, in string }{
		{"hex", lower},
		{"upper-case hex", strings.ToUpper(lower)},
		{"openssl colons", colons},
		{"openssl line", "sha256 Fingerprint=" + colons},
		{"openssl 3 line", "SHA256 Fingerprint=" + colons + "\n"},
		{"base64", b64},
		{"base64 unpadded", strings.TrimRight(b64, "=")},
		{"surrounding space", "  " + lower + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCertificateHash(tc.in)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}

	for _, tc := range []struct{ name, in, why string }{
		{"empty", "", "empty"},
		{"short hex", lower[:62], "62 hex digits, want 64"},
		{"long hex", lower + "ab", "66 hex digits, want 64"},
		{"odd colons", colons[:len(colons)-1], "two digits between colons"},
		{"colons, not hex", strings.Replace(colons, "A0", "G0", 1), "not hex"},
		{"colons, short", colons[3:], "31 bytes, a SHA-256 has 32"},
		{"base64 of the wrong size", base64.StdEncoding.EncodeToString(want[:20]), "20 bytes"},
		{"garbage", "not a hash!", "neither 64 hex digits nor base64"},
		{"SHA-1 fingerprint", colons[:59], "20 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCertificateHash(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.why)
			assert.Contains(t, err.Error(), "moqt: certificate hash")
		})
	}

	// What GenerateCertificate returns, printed as the example relay prints it.
	_, sum, err := GenerateCertificate()
	require.NoError(t, err)
	got, err := ParseCertificateHash(hex.EncodeToString(sum[:]))
	require.NoError(t, err)
	assert.Equal(t, sum, got)
}
