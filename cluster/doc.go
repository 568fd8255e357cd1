// Package cluster makes relays on many hosts act as one, coordinated
// through NATS: a subscriber connects to any relay of the cluster (a node)
// and gets any track published at any other.
//
// Each node registers what is published at it (namespaces from
// PUBLISH_NAMESPACE, tracks from PUBLISH) in a JetStream key-value bucket,
// every entry carrying the node's MoQT URL and certificate pin under a TTL
// the node refreshes, and watches the bucket for the others' entries. A
// SUBSCRIBE for a track goes to every node that has it or its namespace
// (FETCH and TRACK_STATUS to one of them), as a relay asks every matching
// publisher, over one ordinary MoQT session per peer node (one inter-node
// subscription per track and node, shared by every subscriber of the
// node); a node that announces the namespace later is subscribed too, so
// a publisher moving between nodes carries its track on.
// SUBSCRIBE_NAMESPACE at any node sees the
// namespaces announced at every node. A request that came from a node is
// never routed on to another, so nothing loops. A node that dies drops out
// of the registry within the TTL, and its peers then close their sessions
// to it, which ends its tracks at every node with PUBLISH_DONE.
//
// Inter-node sessions present the cluster's token in their SETUP
// (AUTHORIZATION TOKEN, type 0) and pin the certificate the registry names.
//
//	node, err := cluster.New(cluster.Config{NATS: "nats://127.0.0.1:4222", URL: url, CertHash: pin, Token: token})
//	r := relay.New(node.RelayConfig(relay.Config{Authorize: authorize}))
//	node.Start(r)
//	defer node.Close()
//
// This package is a module of its own, so that programs using the moqt
// library pull no NATS code unless they import it.
package cluster
