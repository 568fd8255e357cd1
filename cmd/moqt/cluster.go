package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/cluster"
	"github.com/moqt-go/moqt/internal/relayserve"
	"github.com/moqt-go/moqt/relay"
)

// devClusterToken is the token of a cluster started without
// -cluster-token or MOQT_CLUSTER_TOKEN: for a trial on one host only.
const devClusterToken = "moqt-dev-cluster"

// clusterFlags are `moqt relay`'s flags for joining a cluster.
type clusterFlags struct {
	nats     string
	embedded bool
	token    string
	ttl      time.Duration
	url      string
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.nats, "cluster", "", "`URL` of the NATS server(s) to join a cluster through, such as nats://127.0.0.1:4222")
	fs.BoolVar(&c.embedded, "nats-embedded", false, "run a NATS server (JetStream) inside this relay, listening on -cluster's address: a single-host trial")
	fs.StringVar(&c.token, "cluster-token", os.Getenv("MOQT_CLUSTER_TOKEN"), "the cluster's shared `secret`, which relays present to each other (default $MOQT_CLUSTER_TOKEN, else a development token)")
	fs.DurationVar(&c.ttl, "cluster-ttl", 10*time.Second, "how long a relay that died stays in the cluster's registry")
	fs.StringVar(&c.url, "cluster-url", "", "`URL` the other relays dial this one at (default moqt:// and -listen)")
}

// join sets o up to join the cluster, if asked; stop ends what it started.
func (c *clusterFlags) join(o *relayserve.Options, log *slog.Logger) (stop func(), err error) {
	if c.nats == "" {
		if c.embedded {
			return nil, usagef("-nats-embedded needs -cluster, the address to serve NATS on")
		}
		return func() {}, nil
	}
	if o.Upstream != "" {
		return nil, usagef("-cluster and -upstream do not go together")
	}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if c.embedded {
		ns, err := c.runNATS()
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { ns.Shutdown(); ns.WaitForShutdown() })
		log.Info("embedded NATS", "url", ns.ClientURL())
	}
	token := c.token
	if token == "" {
		token = devClusterToken
		log.Warn("cluster: no -cluster-token: using the development token, fit for one host only")
	}
	self := c.url
	if self == "" {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil || port == "0" {
			stop()
			return nil, usagef("-cluster needs -listen with a port, or -cluster-url")
		}
		if host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
			host = "127.0.0.1"
		}
		self = "moqt://" + net.JoinHostPort(host, port) + "/"
	}
	if err := checkURL(self); err != nil {
		stop()
		return nil, usagef("-cluster-url: %v", err)
	}
	var node *cluster.Node
	o.Join = func(cfg relay.Config, hash [32]byte) (relay.Config, func(*relay.Relay), error) {
		var err error
		node, err = cluster.New(cluster.Config{NATS: c.nats, TTL: c.ttl, URL: self, CertHash: hash, Token: []byte(token),
			MoQT: &moqt.Config{Versions: o.Versions, Logger: log.With("cluster", "peer")}, Logger: log})
		if err != nil {
			return cfg, nil, err
		}
		stops = append(stops, func() { _ = node.Close() })
		// Other relays each carry many subscribers' tracks on one session.
		cfg.MaxSessionTracks = 1 << 16
		log.Info("cluster: joining", "nats", c.nats, "node", node.ID(), "url", self)
		return node.RelayConfig(cfg), node.Start, nil
	}
	return stop, nil
}

// runNATS starts the embedded NATS server on -cluster's host and port.
func (c *clusterFlags) runNATS() (*server.Server, error) {
	u, err := url.Parse(c.nats)
	if err != nil || u.Scheme != "nats" || u.Port() == "" {
		return nil, usagef("-nats-embedded: -cluster must be nats://HOST:PORT, not %q", c.nats)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return nil, usagef("-cluster: bad port %q", u.Port())
	}
	dir, err := os.MkdirTemp("", "moqt-nats-")
	if err != nil {
		return nil, err
	}
	ns, err := cluster.RunNATS(u.Hostname(), port, dir)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("-nats-embedded: %w", err), os.RemoveAll(dir))
	}
	return ns, nil
}
