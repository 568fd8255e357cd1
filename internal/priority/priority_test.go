package priority

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// fakePrioStream records the priorities set on it.
type fakePrioStream struct {
	name        string
	urgency     int8
	incremental bool
	sets        int
}

func (s *fakePrioStream) SetPriority(u int8, inc bool) {
	s.urgency, s.incremental = u, inc
	s.sets++
}

// TestPriorityRanking checks the mapping of §5.1.2 onto quic-go urgencies:
// subscriber priority first, then publisher priority, then group order and
// Subgroup ID within a subscription; levels are dense from 2 and the sixth
// and later keys share 7.
func TestPriorityRanking(t *testing.T) {
	type stream struct {
		name string
		p    Params
	}
	asc, desc := wire.GroupOrderAscending, wire.GroupOrderDescending
	cases := []struct {
		name    string
		streams []stream
		want    map[string]int8 // urgency by stream
		lead    []string        // streams that lead their subscription (incremental)
	}{
		{
			name: "subscriber priority before publisher priority",
			streams: []stream{
				{name: "a", p: Params{Owner: 1, Subscriber: 10, Publisher: 250, Order: asc}},
				{name: "b", p: Params{Owner: 2, Subscriber: 20, Publisher: 0, Order: asc}},
				{name: "c", p: Params{Owner: 3, Subscriber: 20, Publisher: 5, Order: asc}},
			},
			want: map[string]int8{"a": 2, "b": 3, "c": 4},
			lead: []string{"a", "b", "c"},
		},
		{
			name: "equal keys share a level round-robin",
			streams: []stream{
				{name: "a", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: asc}},
				{name: "b", p: Params{Owner: 2, Subscriber: 128, Publisher: 128, Order: asc}},
				{name: "c", p: Params{Owner: 3, Subscriber: 1, Publisher: 128, Order: asc}},
			},
			want: map[string]int8{"c": 2, "a": 3, "b": 3},
			lead: []string{"a", "b", "c"},
		},
		{
			name: "ascending: the oldest group leads",
			streams: []stream{
				{name: "g2", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: asc, Group: 2}},
				{name: "g1", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: asc, Group: 1}},
				{name: "g3", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: asc, Group: 3}},
			},
			want: map[string]int8{"g1": 2, "g2": 3, "g3": 3},
			lead: []string{"g1"},
		},
		{
			name: "descending: the newest group leads",
			streams: []stream{
				{name: "g1", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: desc, Group: 1}},
				{name: "g3", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: desc, Group: 3}},
				{name: "g2", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: desc, Group: 2}},
			},
			want: map[string]int8{"g3": 2, "g1": 3, "g2": 3},
			lead: []string{"g3"},
		},
		{
			name: "lowest subgroup leads within a group",
			streams: []stream{
				{name: "s1", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: asc, Group: 4, Subgroup: 1}},
				{name: "s0", p: Params{Owner: 1, Subscriber: 128, Publisher: 128, Order: asc, Group: 4, Subgroup: 0}},
			},
			want: map[string]int8{"s0": 2, "s1": 3},
			lead: []string{"s0"},
		},
		{
			name: "publisher priority splits a subscription",
			streams: []stream{
				{name: "base", p: Params{Owner: 1, Subscriber: 128, Publisher: 1, Order: asc, Group: 4, Subgroup: 1}},
				{name: "enh", p: Params{Owner: 1, Subscriber: 128, Publisher: 2, Order: asc, Group: 4, Subgroup: 0}},
			},
			want: map[string]int8{"base": 2, "enh": 3},
			lead: []string{"base", "enh"},
		},
		{
			name: "beyond six keys the rest share the last level",
			streams: []stream{
				{name: "p0", p: Params{Owner: 1, Subscriber: 0}},
				{name: "p1", p: Params{Owner: 2, Subscriber: 1}},
				{name: "p2", p: Params{Owner: 3, Subscriber: 2}},
				{name: "p3", p: Params{Owner: 4, Subscriber: 3}},
				{name: "p4", p: Params{Owner: 5, Subscriber: 4}},
				{name: "p5", p: Params{Owner: 6, Subscriber: 5}},
				{name: "p6", p: Params{Owner: 7, Subscriber: 6}},
			},
			want: map[string]int8{"p0": 2, "p1": 3, "p2": 4, "p3": 5, "p4": 6, "p5": 7, "p6": 7},
			lead: []string{"p0", "p1", "p2", "p3", "p4", "p5", "p6"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tbl := &Table{}
			fakes := map[string]*fakePrioStream{}
			for _, s := range c.streams {
				f := &fakePrioStream{name: s.name, urgency: -1}
				fakes[s.name] = f
				tbl.Add(f, s.p)
			}
			for name, want := range c.want {
				assert.Equal(t, want, fakes[name].urgency, "urgency of %s", name)
			}
			for name, f := range fakes {
				assert.Equal(t, contains(c.lead, name), f.incremental, "incremental of %s", name)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestPriorityRankingFollowsChanges: streams move up when others close
// and when a subscriber priority changes, and only streams whose level
// changed are touched.
func TestPriorityRankingFollowsChanges(t *testing.T) {
	tbl := &Table{}
	a := &fakePrioStream{name: "a"}
	b := &fakePrioStream{name: "b"}
	c := &fakePrioStream{name: "c"}
	tbl.Add(a, Params{Owner: 1, Subscriber: 10, Publisher: 128})
	tbl.Add(b, Params{Owner: 2, Subscriber: 20, Publisher: 128})
	tbl.Add(c, Params{Owner: 3, Subscriber: 30, Publisher: 128})
	require.Equal(t, []int8{2, 3, 4}, []int8{a.urgency, b.urgency, c.urgency})
	setsC := c.sets

	tbl.Remove(a)
	tbl.Remove(a) // twice is harmless
	assert.Equal(t, []int8{2, 3}, []int8{b.urgency, c.urgency}, "b and c move up")
	assert.Equal(t, setsC+1, c.sets)

	// A REQUEST_UPDATE makes the subscription of c the most important.
	tbl.SetSubscriber(3, 1)
	assert.Equal(t, []int8{3, 2}, []int8{b.urgency, c.urgency})
	setsB := b.sets
	tbl.SetSubscriber(3, 1) // no change, nothing touched
	assert.Equal(t, setsB, b.sets)
	assert.Len(t, tbl.Levels(), 2)

	var none *Table // WebTransport: no table, every call is a no-op
	none.Add(a, Params{})
	none.Remove(a)
	none.SetSubscriber(1, 1)
}

// TestPriorityRankingIncremental: the ranking kept as streams come and go
// equals the ranking of the streams open, recomputed from scratch (the
// sort this package did on each change until it was made incremental),
// after every change of a long random run: opens, closes and subscriber
// priority changes, over few owners and priorities so that keys collide
// and come and go.
func TestPriorityRankingIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tab Table
	open := map[*fakePrioStream]Params{}
	var list []*fakePrioStream
	group := uint64(0)
	for step := range 5000 {
		switch op := rng.IntN(10); {
		case len(list) < 40 && (op < 5 || len(list) == 0):
			group++ // unique, so that each subscription's order is total
			p := Params{Owner: uint64(rng.IntN(6)), Subscriber: uint8(rng.IntN(4)), Publisher: uint8(rng.IntN(5)),
				Order: wire.GroupOrder(1 + rng.IntN(2)), Group: group, Subgroup: uint64(rng.IntN(3))}
			for q := range open {
				if open[q].Owner == p.Owner {
					p.Subscriber = open[q].Subscriber // one priority per subscription
					p.Order = open[q].Order
					break
				}
			}
			s := &fakePrioStream{name: fmt.Sprint(step)}
			tab.Add(s, p)
			open[s] = p
			list = append(list, s)
		case op < 9 || len(list) >= 40:
			i := rng.IntN(len(list))
			s := list[i]
			list = slices.Delete(list, i, i+1)
			delete(open, s)
			tab.Remove(s)
		default:
			owner, prio := uint64(rng.IntN(6)), uint8(rng.IntN(4))
			for s, p := range open {
				if p.Owner == owner {
					p.Subscriber = prio
					open[s] = p
				}
			}
			tab.SetSubscriber(owner, prio)
		}
		want := referenceRank(open)
		for s := range open {
			require.Equal(t, want[s], [2]int8{s.urgency, boolInt(s.incremental)}, "step %d, stream %s", step, s.name)
		}
	}
}

func boolInt(b bool) int8 {
	if b {
		return 1
	}
	return 0
}

// referenceRank ranks the open streams from scratch: rules 3 and 4 within
// each subscription and publisher priority, then levels by distinct
// (subscriber, publisher, behind) keys from UrgencyDataMin, the sixth and
// later sharing UrgencyDataMax.
func referenceRank(open map[*fakePrioStream]Params) map[*fakePrioStream][2]int8 {
	type ref struct {
		s               *fakePrioStream
		owner           uint64
		sub, pub        uint8
		order, subgroup uint64
		behind          bool
	}
	var rs []*ref
	for s, p := range open {
		r := &ref{s: s, owner: p.Owner, sub: p.Subscriber, pub: p.Publisher, order: p.Group, subgroup: p.Subgroup}
		if p.Order == wire.GroupOrderDescending {
			r.order = ^p.Group
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b *ref) int {
		return cmp.Or(cmp.Compare(a.owner, b.owner), cmp.Compare(a.pub, b.pub), cmp.Compare(a.order, b.order), cmp.Compare(a.subgroup, b.subgroup))
	})
	for i, r := range rs {
		r.behind = i > 0 && rs[i-1].owner == r.owner && rs[i-1].pub == r.pub
	}
	rank := func(a, b *ref) int {
		return cmp.Or(cmp.Compare(a.sub, b.sub), cmp.Compare(a.pub, b.pub), compareBool(a.behind, b.behind))
	}
	slices.SortStableFunc(rs, rank)
	out := map[*fakePrioStream][2]int8{}
	level := transport.UrgencyDataMin
	for i, r := range rs {
		if i > 0 && rank(rs[i-1], r) != 0 && level < transport.UrgencyDataMax {
			level++
		}
		out[r.s] = [2]int8{level, boolInt(!r.behind)}
	}
	return out
}

// BenchmarkAddRemove: one stream opened and closed beside 1,000 open
// streams of 100 subscriptions (a subscriber of many tracks).
func BenchmarkAddRemove(b *testing.B) {
	var tab Table
	for i := range 1000 {
		tab.Add(&fakePrioStream{}, Params{Owner: uint64(i % 100), Subscriber: 128, Publisher: uint8(i % 3), Group: uint64(i)})
	}
	s := &fakePrioStream{}
	for i := 0; b.Loop(); i++ {
		tab.Add(s, Params{Owner: uint64(i % 100), Subscriber: 128, Publisher: 1, Group: uint64(5000 + i)})
		tab.Remove(s)
	}
}
