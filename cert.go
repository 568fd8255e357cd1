package moqt

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// maxCertificateValidity is the longest validity period a browser accepts
// for a certificate pinned with WebTransport's serverCertificateHashes
// option (W3C WebTransport, "custom certificate requirements"), and Dial
// for one pinned with Config.ServerCertificateHashes.
const maxCertificateValidity = 14 * 24 * time.Hour

// certBackdate is how far before now a generated certificate becomes
// valid, to tolerate clocks that run a little behind ours.
const certBackdate = time.Hour

// GenerateCertificate makes a fresh self-signed ECDSA P-256 certificate for
// hosts (DNS names or IP addresses; default 127.0.0.1, ::1 and localhost),
// valid from an hour ago for less than 14 days in total. It
// returns the certificate and the SHA-256 hash of its DER encoding, which is
// what a browser passes in serverCertificateHashes, and a Dial in
// Config.ServerCertificateHashes, to trust it without a CA.
//
// Such a certificate suits development, tests and pinned deployments; a new
// one is needed at least every two weeks.
func GenerateCertificate(hosts ...string) (tls.Certificate, [32]byte, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "::1", "localhost"}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("moqt: generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("moqt: generating serial number: %w", err)
	}
	notBefore := time.Now().Add(-certBackdate).Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "moqt self-signed"},
		NotBefore:    notBefore,
		// An hour short of the limit, so that rounding by the encoder or
		// the verifier can never push it over.
		NotAfter:              notBefore.Add(maxCertificateValidity - time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		if h == "" {
			return tls.Certificate{}, [32]byte{}, errors.New("moqt: GenerateCertificate: empty host")
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("moqt: creating certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, [32]byte{}, fmt.Errorf("moqt: parsing certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return cert, sha256.Sum256(der), nil
}

// ParseCertificateHash parses the SHA-256 of a certificate, as a server
// prints it for clients to pin with Config.ServerCertificateHashes: 64 hex
// digits, upper or lower case, bare or with a colon between bytes as
// openssl prints fingerprints (AB:CD:…, its "sha256 Fingerprint=" label
// included or not), or standard base64, padded or not, as browsers'
// serverCertificateHashes take it. Surrounding space is ignored.
func ParseCertificateHash(s string) ([32]byte, error) {
	var sum [32]byte
	s = strings.TrimSpace(s)
	if i := strings.Index(strings.ToLower(s), "fingerprint="); i >= 0 {
		s = strings.TrimSpace(s[i+len("fingerprint="):])
	}
	b, err := decodeHash(s)
	if err != nil {
		return sum, fmt.Errorf("moqt: certificate hash %q: %w", s, err)
	}
	if len(b) != len(sum) {
		return sum, fmt.Errorf("moqt: certificate hash %q: %d bytes, a SHA-256 has %d", s, len(b), len(sum))
	}
	copy(sum[:], b)
	return sum, nil
}

// decodeHash decodes s as hex (bare or colon-separated) or base64, the
// forms being told apart by their alphabets: hex has no letter past f,
// base64 no colon.
func decodeHash(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("empty; want 64 hex digits or base64")
	}
	if strings.Contains(s, ":") {
		parts := strings.Split(s, ":")
		for _, p := range parts {
			if len(p) != 2 {
				return nil, errors.New("colon-separated hex needs two digits between colons")
			}
		}
		s = strings.Join(parts, "")
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, errors.New("not hex")
		}
		return b, nil
	}
	if isHex(s) && len(s) != base64Len && len(s) != base64Len-1 {
		// Only base64 of a SHA-256's length could be all hex digits.
		if len(s) != 2*sha256.Size {
			return nil, fmt.Errorf("%d hex digits, want %d", len(s), 2*sha256.Size)
		}
		return hex.DecodeString(s)
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, errors.New("neither 64 hex digits nor base64")
	}
	return b, nil
}

// base64Len is the length of a SHA-256 in padded standard base64.
var base64Len = base64.StdEncoding.EncodedLen(sha256.Size)

func isHex(s string) bool {
	for i := range len(s) {
		if !strings.ContainsRune("0123456789abcdefABCDEF", rune(s[i])) {
			return false
		}
	}
	return true
}

// pinCertificates returns a clone of base (nil means an empty one) that
// trusts the server by its leaf certificate's hash instead of a chain, as
// WebTransport's serverCertificateHashes does (W3C WebTransport, "custom
// certificate requirements"). Without hashes, base is cloned unchanged.
// refused returns the error that made the check (or base's own
// VerifyConnection) refuse the server, if one did: the QUIC handshake
// reports only a TLS alert code.
func pinCertificates(base *tls.Config, hashes [][32]byte) (c *tls.Config, refused func() error) {
	c = &tls.Config{}
	if base != nil {
		c = base.Clone()
	}
	var verifyErr atomic.Pointer[error]
	refused = func() error {
		if p := verifyErr.Load(); p != nil {
			return *p
		}
		return nil
	}
	if len(hashes) == 0 {
		return c, refused
	}
	hashes = slices.Clone(hashes)
	next := c.VerifyConnection
	now := time.Now
	if c.Time != nil {
		now = c.Time
	}
	// The check replaces chain and name verification, which crypto/tls
	// does only when InsecureSkipVerify is off.
	c.InsecureSkipVerify = true
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		err := checkPinned(cs.PeerCertificates, hashes, now())
		if err == nil && next != nil {
			err = next(cs)
		}
		if err != nil {
			verifyErr.Store(&err)
		}
		return err
	}
	return c, refused
}

// checkPinned checks the server's certificates against hashes at time now.
func checkPinned(certs []*x509.Certificate, hashes [][32]byte, now time.Time) error {
	if len(certs) == 0 {
		return errors.New("moqt: server sent no certificate")
	}
	leaf := certs[0]
	sum := sha256.Sum256(leaf.Raw)
	if !slices.Contains(hashes, sum) {
		return fmt.Errorf("moqt: server certificate SHA-256 %x matches none of Config.ServerCertificateHashes", sum)
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("moqt: pinned server certificate is valid from %s to %s, not now (%s)",
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if leaf.NotAfter.Sub(leaf.NotBefore) > maxCertificateValidity {
		return fmt.Errorf("moqt: pinned server certificate is valid for %s, longer than the %s a browser accepts",
			leaf.NotAfter.Sub(leaf.NotBefore), maxCertificateValidity)
	}
	return nil
}
