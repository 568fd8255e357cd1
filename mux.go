package moqt

import (
	"sync"

	"github.com/moqt-go/moqt/wire"
)

// ServeMux routes requests by namespace, in the manner of net/http's
// ServeMux: each Handler is registered for a namespace prefix, and a
// request goes to the one whose prefix is the longest that matches the
// namespace it names (its track's namespace). Prefixes match field by field
// (§2.4.1): (live, cam) matches the requests in (live, cam) and in
// (live, cam, 1), not those in (live, camera) or in (live). The empty
// prefix matches every request. A request no prefix matches gets
// DefaultHandler's answer.
//
// A relay registers, say, one Handler per upstream; an application with
// many tracks one per part of its namespace. ServeMux is safe for
// concurrent use: Handle may be called while it serves.
type ServeMux struct {
	mu   sync.RWMutex
	root muxNode
}

// muxNode is a prefix's place in the tree of registered prefixes: one
// level per namespace field.
type muxNode struct {
	h        Handler // nil when no prefix ends here
	children map[string]*muxNode
}

// NewServeMux returns an empty ServeMux, which answers every request as
// DefaultHandler does.
func NewServeMux() *ServeMux { return new(ServeMux) }

// Handle registers h for the requests in namespace prefix and below. It
// panics, as net/http's does, if h is nil, if prefix is not a valid
// namespace (no empty field, at most 32 fields, §2.4.1), or if a Handler
// is registered for prefix already.
func (mux *ServeMux) Handle(prefix wire.Namespace, h Handler) {
	if h == nil {
		panic("moqt: nil Handler for namespace prefix " + prefix.String())
	}
	if err := prefix.Validate(0); err != nil {
		panic("moqt: invalid namespace prefix " + prefix.String() + ": " + err.Error())
	}
	mux.mu.Lock()
	defer mux.mu.Unlock()
	n := &mux.root
	for _, f := range prefix {
		next := n.children[string(f)]
		if next == nil {
			if n.children == nil {
				n.children = make(map[string]*muxNode)
			}
			next = new(muxNode)
			n.children[string(f)] = next
		}
		n = next
	}
	if n.h != nil {
		panic("moqt: multiple registrations for namespace prefix " + prefix.String())
	}
	n.h = h
}

// HandleFunc registers f for the requests in namespace prefix and below,
// as Handle does.
func (mux *ServeMux) HandleFunc(prefix wire.Namespace, f func(Request)) {
	if f == nil {
		panic("moqt: nil handler function for namespace prefix " + prefix.String())
	}
	mux.Handle(prefix, HandlerFunc(f))
}

// ServeMOQT hands r to the Handler of the longest registered prefix of its
// namespace, or to DefaultHandler when there is none.
func (mux *ServeMux) ServeMOQT(r Request) {
	mux.handler(r.base().namespace()).ServeMOQT(r)
}

// handler returns the Handler for requests in ns.
func (mux *ServeMux) handler(ns wire.Namespace) Handler {
	mux.mu.RLock()
	defer mux.mu.RUnlock()
	n := &mux.root
	h := n.h
	for _, f := range ns {
		if n = n.children[string(f)]; n == nil {
			break
		}
		if n.h != nil {
			h = n.h
		}
	}
	if h == nil {
		return DefaultHandler
	}
	return h
}
