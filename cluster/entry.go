package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"

	"github.com/moqt-go/moqt/wire"
)

// Kinds of registry entries, the first token of their keys.
const (
	kindNode      = "n" // a node is alive: its URL and pin
	kindNamespace = "s" // a namespace announced at a node
	kindTrack     = "t" // a track PUBLISHed at a node
)

// entry is the value of one registry key.
type entry struct {
	Node      string   `json:"node"`
	URL       string   `json:"url"`
	Pin       string   `json:"pin,omitempty"` // hex SHA-256 of the node's certificate
	Namespace [][]byte `json:"ns,omitempty"`
	Name      []byte   `json:"name,omitempty"`
}

// keyOf is the registry key of an entry of kind about name at node:
// "kind.node.hash", a valid subject whatever bytes the name holds.
func keyOf(kind, node string, name wire.FullTrackName) string {
	if kind == kindNode {
		return kindNode + "." + node
	}
	h := sha256.New()
	b, _ := name.Namespace.Append(nil) // a name the relay accepted encodes
	h.Write(b)
	h.Write([]byte{0})
	h.Write(name.Name)
	return kind + "." + node + "." + hex.EncodeToString(h.Sum(nil)[:16])
}

// parseKey splits a registry key into its kind and node.
func parseKey(key string) (kind, node string, ok bool) {
	parts := strings.SplitN(key, ".", 3)
	if len(parts) < 2 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func (e *entry) namespace() wire.Namespace { return wire.Namespace(e.Namespace) }

func (e *entry) track() wire.FullTrackName {
	return wire.FullTrackName{Namespace: e.namespace(), Name: e.Name}
}

// pin is the entry's certificate pin, if any.
func (e *entry) pin() ([][32]byte, error) {
	if e.Pin == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(e.Pin)
	if err != nil || len(b) != 32 {
		return nil, errors.New("cluster: bad certificate pin in the registry")
	}
	var h [32]byte
	copy(h[:], b)
	return [][32]byte{h}, nil
}

func decodeEntry(b []byte) (*entry, error) {
	var e entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e.Node == "" || e.URL == "" {
		return nil, errors.New("cluster: registry entry without node or URL")
	}
	return &e, nil
}
