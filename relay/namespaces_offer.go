package relay

import "github.com/moqt-go/moqt/wire"

// A SUBSCRIBE_NAMESPACE subscriber is offered the namespaces under its
// current prefix only (NamespaceWriter.Publish), and told when one goes
// (Done); after a prefix update the relay withdraws what left the prefix
// and offers, from its table, what is under the new one. Each entry keeps
// the subscribers it is offered to, and the subscribers are indexed by the
// first field of their prefix, so that a namespace's change costs in
// proportion to the subscribers it concerns.

// subKey is the index key of a subscriber's prefix: its first field, or
// "" for the empty prefix, which every namespace falls under.
func subKey(p wire.Namespace) string {
	if len(p) == 0 {
		return ""
	}
	return "\x01" + string(p[0])
}

// indexLocked files sub under its current prefix.
func (st *nsState) indexLocked(sub *nsSub) {
	k := subKey(sub.ref.prefix)
	m := st.subIdx[k]
	if m == nil {
		m = map[*nsSub]struct{}{}
		st.subIdx[k] = m
	}
	m[sub] = struct{}{}
}

// unindexLocked takes sub out of the index.
func (st *nsState) unindexLocked(sub *nsSub) {
	k := subKey(sub.ref.prefix)
	if m := st.subIdx[k]; m != nil {
		delete(m, sub)
		if len(m) == 0 {
			delete(st.subIdx, k)
		}
	}
}

// changedLocked tells the SUBSCRIBE_NAMESPACE subscribers e concerns of
// its new state (NAMESPACE or NAMESPACE_DONE, §9.16, §9.17), starts or
// stops its forwarding upstream, and drops e once nothing offers it.
func (rl *Relay) changedLocked(e *nsEntry) {
	st := &rl.ns
	for sub := range e.subs {
		if !e.visibleTo(sub.s) {
			rl.withdrawLocked(sub, e)
		}
	}
	offer := func(subs map[*nsSub]struct{}) {
		for sub := range subs {
			if e.ns.HasPrefix(sub.ref.prefix) && e.visibleTo(sub.s) {
				rl.offerLocked(sub, e)
			}
		}
	}
	offer(st.subIdx[""])
	if len(e.ns) > 0 {
		offer(st.subIdx[subKey(e.ns)])
	}
	rl.syncForwardLocked(e)
	if len(e.local) == 0 && len(e.remote) == 0 && e.fwd == nil {
		if k := e.ns.Key(); st.entries[k] == e {
			delete(st.entries, k)
		}
	}
}

// offerLocked offers e, under sub's prefix, to sub, once. One that takes
// the subscription past Config.MaxNamespaceMatches ends it (§4.3.1): the
// stream is reset with EXCESSIVE_LOAD, there being no reset code for
// NAMESPACE_TOO_LARGE.
func (rl *Relay) offerLocked(sub *nsSub, e *nsEntry) {
	if _, ok := sub.offered[e]; ok {
		return
	}
	if len(sub.offered) >= sub.limit {
		sub.w.End(wire.ResetExcessiveLoad)
		rl.dropSubLocked(sub)
		return
	}
	sub.offered[e] = struct{}{}
	e.subs[sub] = struct{}{}
	// A writer that failed ended its request, whose end drops sub.
	_ = sub.w.Publish(e.ns)
}

// withdrawLocked takes back e's offer to sub: NAMESPACE_DONE if its
// NAMESPACE was sent.
func (rl *Relay) withdrawLocked(sub *nsSub, e *nsEntry) {
	delete(sub.offered, e)
	delete(e.subs, sub)
	_ = sub.w.Done(e.ns)
}

// offerAllLocked offers sub every namespace of the table under its
// prefix, while sub lasts.
func (rl *Relay) offerAllLocked(sub *nsSub) {
	st := &rl.ns
	for _, e := range st.entries {
		if e.ns.HasPrefix(sub.ref.prefix) && e.visibleTo(sub.s) {
			rl.offerLocked(sub, e)
			if _, ok := st.subs[sub]; !ok {
				return
			}
		}
	}
}

// movePrefixLocked follows an accepted prefix update of sub to p
// (§9.5.2): what is no longer under the prefix is no longer offered (its
// NAMESPACE the writer has forgotten already, so no NAMESPACE_DONE goes),
// and what is under p is offered.
func (rl *Relay) movePrefixLocked(sub *nsSub, p wire.Namespace) {
	st := &rl.ns
	st.unindexLocked(sub)
	sub.ref.prefix = p
	st.indexLocked(sub)
	for e := range sub.offered {
		if !e.ns.HasPrefix(p) {
			rl.withdrawLocked(sub, e)
		}
	}
	rl.offerAllLocked(sub)
}
