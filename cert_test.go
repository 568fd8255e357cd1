package moqt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"net"
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
