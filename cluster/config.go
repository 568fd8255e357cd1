package cluster

import (
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/moqt-go/moqt"
)

// Config configures a Node. Zero fields mean the documented defaults.
type Config struct {
	// NATS is the URL (or comma-separated URLs) of the NATS servers, with
	// JetStream. Ignored when Conn is set.
	NATS string
	// Conn, if set, is the NATS connection to use, the caller's to close.
	Conn *nats.Conn
	// Bucket is the JetStream key-value bucket of the registry. Default
	// "moqt-cluster".
	Bucket string
	// TTL is how long a node's entries outlive its last refresh; the node
	// refreshes its node entry every TTL/3. The TTL of the node that
	// created the bucket wins over this one. Default 10 s.
	TTL time.Duration

	// URL is this node's moqt:// (or https://) URL, as the other nodes
	// dial it.
	URL string
	// CertHash is the SHA-256 of this node's certificate, which the other
	// nodes pin (moqt.Config.ServerCertificateHashes); zero: they verify
	// it by its chain instead.
	CertHash [32]byte
	// Token is the cluster's shared secret: inter-node sessions present it
	// in SETUP, and a session that does is served as a node. Required.
	Token []byte

	// MoQT is the base of the inter-node sessions' configuration
	// (Versions, TLSConfig roots, Logger, …); its Handler,
	// AuthorizationTokens and ServerCertificateHashes are set per peer.
	MoQT *moqt.Config
	// Logger receives the node's records. Default slog.Default().
	Logger *slog.Logger
}

const (
	defaultBucket = "moqt-cluster"
	defaultTTL    = 10 * time.Second
)

func (c Config) withDefaults() (Config, error) {
	if len(c.Token) == 0 {
		return c, errors.New("cluster: Config.Token is required")
	}
	if c.URL == "" {
		return c, errors.New("cluster: Config.URL is required")
	}
	if c.Conn == nil && c.NATS == "" {
		return c, errors.New("cluster: Config.NATS or Config.Conn is required")
	}
	if c.Bucket == "" {
		c.Bucket = defaultBucket
	}
	if c.TTL <= 0 {
		c.TTL = defaultTTL
	}
	if c.TTL < time.Second {
		c.TTL = time.Second // JetStream's per-message TTLs count in seconds
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MoQT == nil {
		c.MoQT = &moqt.Config{}
	}
	return c, nil
}
