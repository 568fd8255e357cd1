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

	"github.com/moqt-go/moqt/internal/transport"
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
// included or not), or base64 (standard or URL-safe), padded or not, as browsers'
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
	raw := strings.TrimRight(s, "=")
	if strings.ContainsAny(raw, "-_") { // the URL-safe alphabet, as in a URL
		raw = strings.NewReplacer("-", "+", "_", "/").Replace(raw)
	}
	b, err := base64.RawStdEncoding.DecodeString(raw)
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
// VerifyConnection, hashes or not) refuse the server, if one did: the QUIC
// handshake reports only a TLS alert code.
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
	next := c.VerifyConnection
	verify := next
	if len(hashes) > 0 {
		hashes = slices.Clone(hashes)
		now := time.Now
		if c.Time != nil {
			now = c.Time
		}
		// The check replaces chain and name verification, which
		// crypto/tls does only when InsecureSkipVerify is off.
		c.InsecureSkipVerify = true
		verify = func(cs tls.ConnectionState) error {
			err := checkPinned(cs.PeerCertificates, hashes, now())
			if err == nil && next != nil {
				err = next(cs)
			}
			return err
		}
	}
	if verify != nil {
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			err := verify(cs)
			if err != nil {
				verifyErr.Store(&err)
			}
			return err
		}
	}
	return c, refused
}

// checkPinned checks the server's certificates against hashes at time now.
// Its errors wrap ErrUntrustedCertificate.
func checkPinned(certs []*x509.Certificate, hashes [][32]byte, now time.Time) error {
	if len(certs) == 0 {
		return fmt.Errorf("%w: the server sent no certificate", ErrUntrustedCertificate)
	}
	leaf := certs[0]
	sum := sha256.Sum256(leaf.Raw)
	if !slices.Contains(hashes, sum) {
		return fmt.Errorf("%w: its SHA-256 %x matches none of Config.ServerCertificateHashes", ErrUntrustedCertificate, sum)
	}
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return fmt.Errorf("%w: pinned, it is valid from %s to %s, not now (%s)", ErrUntrustedCertificate,
			leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if leaf.NotAfter.Sub(leaf.NotBefore) > maxCertificateValidity {
		return fmt.Errorf("%w: pinned, it is valid for %s, longer than the %s a browser accepts", ErrUntrustedCertificate,
			leaf.NotAfter.Sub(leaf.NotBefore), maxCertificateValidity)
	}
	return nil
}

// untrustedCertificate returns err, the error of a dial that failed, as an
// error wrapping ErrUntrustedCertificate when this end refused the
// server's certificate in TLS verification; otherwise err unchanged.
func untrustedCertificate(err error) error {
	var why string
	if cve, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		why = cve.Err.Error()
	} else if alert, ok := certificateAlert(err); ok {
		// A refusal without crypto/tls's error in the chain: the
		// alert's name says what was wrong.
		why = alert.Error()
	} else {
		return err
	}
	return fmt.Errorf("%w (%s): pin it with Config.ServerCertificateHashes (ParseCertificateHash of the SHA-256 "+
		"the server prints) or trust its CA with Config.TLSConfig.RootCAs: %w", ErrUntrustedCertificate, why, err)
}

// certificateAlert reports the TLS alert with which this end closed the
// connection, if err is such a close and the alert refuses a certificate.
// QUIC carries a TLS alert as the CRYPTO_ERROR 0x100 plus the alert
// (RFC 9001 §4.8).
func certificateAlert(err error) (tls.AlertError, bool) {
	te, ok := errors.AsType[*TransportError](err)
	if !ok || te.Remote || te.kind != transport.ConnTransportClose || te.Code < 0x100 || te.Code > 0x1ff {
		return 0, false
	}
	alert := tls.AlertError(te.Code - 0x100)
	switch alert {
	case 42, // bad_certificate
		43, // unsupported_certificate
		44, // certificate_revoked
		45, // certificate_expired
		46, // certificate_unknown
		48: // unknown_ca (RFC 8446 §6.2)
		return alert, true
	}
	return 0, false
}
