package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// A prefix widened by REQUEST_UPDATE past MaxNamespaceMatches is refused
// with NAMESPACE_TOO_LARGE, for namespaces and for tracks, and no more
// than the limit is sent.
func TestPrefixUpdateTooLarge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := startNode(t, "moqt", Config{MaxNamespaceMatches: 2}, nil)
		pc, _ := n.dial("/pub", nil)
		for _, f := range []string{"a", "b", "c", "d", "e"} {
			announceNS(t, pc, wire.NewNamespace("live", f))
			name := wire.FullTrackName{Namespace: wire.NewNamespace("live", f), Name: []byte("v")}
			_, err := publishTo(t, pc, newTrack(t, name), wire.Params{})
			require.NoError(t, err)
		}
		sh := &tracksClient{}
		sc, _ := n.dial("/sub", sh)
		for _, tracks := range []bool{false, true} {
			sub, err := subscribeNS(t, sc, wire.NewNamespace("nothing"), tracks, wire.Params{})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err = sub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("live"))})
			cancel()
			var re *moqt.RequestError
			if assert.ErrorAs(t, err, &re, "tracks=%v", tracks) {
				assert.Equal(t, wire.ReqNamespaceTooLarge, re.Code)
			}
			got := 0
			for {
				c2, cl := context.WithTimeout(context.Background(), 500*time.Millisecond)
				ev, err := sub.Next(c2)
				cl()
				if err != nil {
					break
				}
				if !ev.Done {
					got++
				}
			}
			assert.Zero(t, got, "NAMESPACEs after a refused widening")
		}
		assert.Empty(t, sh.published(), "PUBLISHes after a refused widening")
	})
}

// Disjoint SUBSCRIBE_NAMESPACEs and SUBSCRIBE_TRACKS each take one of the
// shared upstream session's request streams: past MaxSessionDiscoveries
// for a session, or MaxDiscoveries for the relay, they are refused with
// EXCESSIVE_LOAD, unless an upstream request covers them already, and one
// client cannot starve the edge's upstream for everyone.
func TestDiscoveryLimits(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		origin := startNode(t, scheme, Config{}, nil)
		up := newLateUpstream()
		edge := startNode(t, scheme, Config{Upstream: up, MaxSessionDiscoveries: 4, MaxDiscoveries: 6}, nil)
		up.bind(t, origin, "/edge", edge.relay)
		pub := origin.newPublisher("/pub", testTrack, nil)
		announceNS(t, pub.client, testTrack.Namespace)

		refused := func(err error) bool {
			var re *moqt.RequestError
			return errors.As(err, &re) && re.Code == wire.ReqExcessiveLoad
		}
		ac, _ := edge.dial("/a", nil)
		var aSubs []*moqt.NamespaceSubscription
		for j := 0; j < 6; j++ {
			s, err := subscribeNS(t, ac, wire.NewNamespace(fmt.Sprintf("a%d", j)), j%2 == 1, wire.Params{})
			if j < 4 {
				require.NoError(t, err, "request %d within the session's limit", j)
				aSubs = append(aSubs, s)
			} else {
				assert.True(t, refused(err), "request %d past the session's limit: %v", j, err)
			}
		}
		bc, _ := edge.dial("/b", nil)
		for j := 0; j < 2; j++ {
			_, err := subscribeNS(t, bc, wire.NewNamespace(fmt.Sprintf("b%d", j)), false, wire.Params{})
			require.NoError(t, err, "within the relay's limit")
		}
		_, err := subscribeNS(t, bc, wire.NewNamespace("b2"), false, wire.Params{})
		assert.True(t, refused(err), "past the relay's limit: %v", err)
		_, err = subscribeNS(t, bc, wire.NewNamespace("a0", "x"), false, wire.Params{})
		assert.NoError(t, err, "covered by an upstream request made already")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var re *moqt.RequestError
		err = aSubs[1].Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("a9"))})
		assert.NoError(t, err, "the update frees the upstream request it leaves, its only user")
		err = aSubs[0].Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("a8"))})
		if assert.ErrorAs(t, err, &re, "a prefix update past the relay's limit (a0 is shared)") {
			assert.Equal(t, wire.ReqExcessiveLoad, re.Code)
		}
		require.NoError(t, aSubs[2].Close())
		settled(t, "a slot freed", func() bool {
			s, err := subscribeNS(t, bc, wire.NewNamespace("b3"), false, wire.Params{})
			if err == nil {
				_ = s.Close()
			}
			return err == nil
		})
		sc, _ := edge.dial("/victim", nil)
		_, err = subscribe(t, sc, testTrack, wire.Params{})
		assert.NoError(t, err, "the victim's SUBSCRIBE through the edge")
	})
}

// With the default limits, two clients asking many disjoint prefixes
// leave the edge's upstream session usable.
func TestDiscoveryStarvesUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin, edge := chain(t, "moqt")
		pub := origin.newPublisher("/pub", testTrack, nil)
		announceNS(t, pub.client, testTrack.Namespace)
		for i := 0; i < 2; i++ {
			hc, _ := edge.dial(fmt.Sprintf("/evil%d", i), nil)
			for j := 0; j < 60; j++ {
				_, err := subscribeNS(t, hc, wire.NewNamespace(fmt.Sprintf("x%d-%d", i, j)), false, wire.Params{})
				var re *moqt.RequestError
				if err != nil && !(errors.As(err, &re) && re.Code == wire.ReqExcessiveLoad) {
					require.NoError(t, err)
				}
			}
		}
		sc, _ := edge.dial("/victim", nil)
		start := time.Now()
		_, err := subscribe(t, sc, testTrack, wire.Params{})
		assert.NoError(t, err, "victim SUBSCRIBE via edge failed after %v", time.Since(start))
	})
}

// After TRACK_NAMESPACE_PREFIX, the edge's upstream discovery moves to the
// new prefix: the origin's namespaces under it come.
func TestPrefixUpdateDiscoveredUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin, edge := chain(t, "moqt")
		pub := origin.newPublisher("/pub", testTrack, nil)
		sport := wire.NewNamespace("sport", "x")
		announceNS(t, pub.client, sport)
		sc, _ := edge.dial("/sub", nil)
		sub, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, sub.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("sport"))}))
		c2, cl := context.WithTimeout(context.Background(), 3*time.Second)
		defer cl()
		ev, err := sub.Next(c2)
		require.NoError(t, err, "sport/x, announced at the origin, never reported")
		assert.Equal(t, sport, ev.Namespace)
	})
}

// Authorize refuses SUBSCRIBE_TRACKS/NAMESPACE outside "public"; a
// REQUEST_UPDATE of TRACK_NAMESPACE_PREFIX to (secret) is put to it,
// refused with UNAUTHORIZED, and nothing under (secret) is sent.
func TestPrefixUpdateAuthorized(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := func(r moqt.Request, u *wire.Params) error {
			ns, ok := r.(*moqt.SubscribeNamespaceRequest)
			if !ok {
				return nil
			}
			prefix := ns.Prefix
			if u != nil && u.TrackNamespacePrefix.Set {
				prefix = u.TrackNamespacePrefix.Value
			}
			if !prefix.HasPrefix(wire.NewNamespace("public")) {
				return errors.New("only public")
			}
			return nil
		}
		n := startNode(t, "moqt", Config{Authorize: auth}, nil)
		pc, _ := n.dial("/pub", nil)
		secret := wire.FullTrackName{Namespace: wire.NewNamespace("secret", "a"), Name: []byte("v")}
		_, err := publishTo(t, pc, newTrack(t, secret), wire.Params{})
		require.NoError(t, err)
		announceNS(t, pc, wire.NewNamespace("secret", "ns"))
		sh := &tracksClient{}
		sc, _ := n.dial("/sub", sh)
		_, err = subscribeNS(t, sc, wire.NewNamespace("secret"), true, wire.Params{})
		require.Error(t, err, "refused directly")
		req, err := subscribeNS(t, sc, wire.NewNamespace("public"), true, wire.Params{})
		require.NoError(t, err)
		nsr, err := subscribeNS(t, sc, wire.NewNamespace("public"), false, wire.Params{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var re *moqt.RequestError
		err = req.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("secret"))})
		if assert.ErrorAs(t, err, &re) {
			assert.Equal(t, wire.ReqUnauthorized, re.Code)
		}
		err = nsr.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("secret"))})
		if assert.ErrorAs(t, err, &re) {
			assert.Equal(t, wire.ReqUnauthorized, re.Code)
		}
		synctest.Wait()
		assert.Empty(t, sh.published(), "PUBLISH of an unauthorized track after a prefix update")
		c2, cl := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cl()
		ev, err := nsr.Next(c2)
		assert.Error(t, err, "NAMESPACE of an unauthorized namespace: %+v", ev)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the refused update ends the request")
	})
}

// A SUBSCRIBE_NAMESPACE subscriber is offered the namespaces under its
// current prefix only, not the relay's whole table; after a prefix update
// those under the new prefix come from the table and those outside it are
// no longer offered.
func TestNamespaceOffersUnderPrefixOnly(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n := startNode(t, scheme, Config{}, nil)
		pc, _ := n.dial("/pub", nil)
		la := announceNS(t, pc, wire.NewNamespace("live", "a"))
		announceNS(t, pc, wire.NewNamespace("live", "b"))
		announceNS(t, pc, wire.NewNamespace("sport", "c"))
		sc, _ := n.dial("/sub", nil)
		live, err := subscribeNS(t, sc, wire.NewNamespace("live"), false, wire.Params{})
		require.NoError(t, err)
		news, err := subscribeNS(t, sc, wire.NewNamespace("news"), false, wire.Params{})
		require.NoError(t, err)
		got := map[string]bool{}
		for i := 0; i < 2; i++ {
			got[nextEvent(t, live).Namespace.String()] = true
		}
		assert.Len(t, got, 2)
		offered := func() map[string]int {
			n.relay.ns.mu.Lock()
			defer n.relay.ns.mu.Unlock()
			out := map[string]int{}
			for sub := range n.relay.ns.subs {
				for e := range sub.offered {
					assert.True(t, e.ns.HasPrefix(sub.ref.prefix), "%v offered under %v", e.ns, sub.ref.prefix)
					_, ok := e.subs[sub]
					assert.True(t, ok)
				}
				out[sub.ref.prefix.String()] = len(sub.offered)
			}
			return out
		}
		// A request is registered just after its REQUEST_OK goes
		// (acceptLocked).
		settled(t, "both registered", func() bool {
			return assert.ObjectsAreEqual(map[string]int{
				wire.NewNamespace("live").String(): 2, wire.NewNamespace("news").String(): 0}, offered())
		})

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, news.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("sport"))}))
		assert.Equal(t, published(wire.NewNamespace("sport", "c")), nextEvent(t, news), "offered from the table")
		require.NoError(t, live.Update(ctx, wire.Params{TrackNamespacePrefix: wire.Some(wire.NewNamespace("live", "a"))}))
		settled(t, "the offers follow the prefixes", func() bool {
			return assert.ObjectsAreEqual(map[string]int{
				wire.NewNamespace("live", "a").String(): 1, wire.NewNamespace("sport").String(): 1}, offered())
		})
		assert.Equal(t, withdrawn(wire.NewNamespace("live", "b")), nextEvent(t, live), "left the prefix")
		require.NoError(t, la.Close())
		assert.Equal(t, withdrawn(wire.NewNamespace("live", "a")), nextEvent(t, live))
		settled(t, "withdrawn", func() bool {
			return assert.ObjectsAreEqual(map[string]int{
				wire.NewNamespace("live", "a").String(): 0, wire.NewNamespace("sport").String(): 1}, offered())
		})
	})
}

// The REQUEST_UPDATEs of a SUBSCRIBE and of a PUBLISH_NAMESPACE the relay
// serves are put to Authorize with their refreshed tokens: one it refuses
// gets UNAUTHORIZED and ends the request; one it allows applies.
func TestUpdateTokensAuthorized(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		var updates []string
		var mu sync.Mutex
		auth := func(r moqt.Request, u *wire.Params) error {
			if u == nil {
				return nil
			}
			for _, tok := range u.AuthorizationTokens {
				mu.Lock()
				updates = append(updates, requestKind(r)+":"+string(tok.Value))
				mu.Unlock()
				if string(tok.Value) == "revoked" {
					return errors.New("token revoked")
				}
			}
			return nil
		}
		n := startNode(t, scheme, Config{Authorize: auth}, nil)
		pub := n.newPublisher("/pub", testTrack, nil)
		n.announce(pub, testTrack.Namespace)
		ann := announceNS(t, pub.client, wire.NewNamespace("other"))
		sc, _ := n.dial("/sub", nil)
		sub, err := subscribe(t, sc, testTrack, wire.Params{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, sub.Update(ctx, wire.Params{AuthorizationTokens: token("fresh")}))
		err = sub.Update(ctx, wire.Params{AuthorizationTokens: token("revoked")})
		assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err))
		err = ann.Update(ctx, wire.Params{AuthorizationTokens: token("revoked")})
		assert.Equal(t, wire.ReqUnauthorized, requestCode(t, err))
		select {
		case <-ann.Done():
		case <-ctx.Done():
			t.Fatal("the refused update did not end the announcement")
		}
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{KindSubscribe + ":fresh", KindSubscribe + ":revoked", KindPublishNamespace + ":revoked"}, updates)
	})
}

// A request admitted because an upstream request covers it is one of that
// request's users at once, before it is registered: its requester has its
// REQUEST_OK first, and a prefix update of the request's other user
// meanwhile must not take that user for the only one, free the upstream
// request's place and so pass Config.MaxDiscoveries.
func TestDiscoveryCoveredSharesAtAdmission(t *testing.T) {
	rt := &router{env: env{cfg: Config{MaxSessionDiscoveries: 4, MaxDiscoveries: 2}}}
	rt.initLocked()
	owner, other := &moqt.Session{}, &moqt.Session{}
	a0 := &upDisc{prefix: wire.NewNamespace("a0"), users: 1, cancel: func() {}}
	a1 := &upDisc{prefix: wire.NewNamespace("a1"), users: 1, cancel: func() {}}
	rt.discs[a0], rt.discs[a1] = struct{}{}, struct{}{}
	first := &discRef{prefix: a0.prefix, disc: a0, owner: owner}
	rt.discBy[owner] = 1

	covered := &discRef{prefix: wire.NewNamespace("a0", "x")}
	require.Nil(t, rt.admitDiscLocked(covered, other, false), "covered by a0: within the limit")
	assert.Same(t, a0, covered.disc)
	assert.Equal(t, 2, a0.users)
	err := rt.admitMoveLocked(first, wire.NewNamespace("a8"), false)
	var re *moqt.RequestError
	require.ErrorAs(t, err, &re, "a0 is shared: leaving it frees no place")
	assert.Equal(t, wire.ReqExcessiveLoad, re.Code)

	rt.unadmit(covered)
	assert.Nil(t, covered.disc)
	assert.Equal(t, 1, a0.users, "a request admitted and then not served gives its share back")
	assert.NoError(t, rt.admitMoveLocked(first, wire.NewNamespace("a8"), false), "now the only user's")
}
