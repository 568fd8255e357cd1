package relay

import (
	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// This file is a placeholder until the namespace requests are routed
// (helper "ns-relay" takes it over): they are refused as not supported.

// nsState is what the namespace routing keeps.
type nsState struct{}

// serveNamespaceRequest answers the namespace requests; there are none yet.
func (rl *Relay) serveNamespaceRequest(moqt.Request) bool { return false }

// namespaceKind names the kind of a namespace request for Metrics.
func namespaceKind(moqt.Request) string { return KindOther }

// onTrackPublished would offer the track to SUBSCRIBE_TRACKS subscribers.
func (rl *Relay) onTrackPublished(_ wire.FullTrackName, _ func(*moqt.Session) bool) {}

// closeNamespaces ends what the namespace routing holds.
func (rl *Relay) closeNamespaces() {}

// namespacesEmpty reports that no namespace state is left.
func (rl *Relay) namespacesEmpty() bool { return true }
