package relay

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// TestFillAfterBurstThroughRelay: a subscriber joining through the relay
// with a fill of the whole track, right after a burst of small groups,
// gets every object below the Largest Object once, in order, with no
// marker, though some had not reached the relay when it joined: a group
// whose stream had not come yet (the relay cannot tell it from one that
// does not exist, §2.1, so it asks the publisher, C070, whose own cache
// waits for the subgroup still open), and a subgroup lagging behind later
// groups (the relay waits for the rest of it).
func TestFillAfterBurstThroughRelay(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		const groups, per = 30, 5
		const missing, lagging = 25, 27 // not begun, and one object only, when the subscriber joins
		n := startNode(t, scheme, Config{}, nil)
		asked := make(chan struct{}, 1)
		var pub *fetchPub
		pub = newFetchPub(n, "/pub", func(r *moqt.FetchRequest) {
			lf := r.Params.LocationFilter.Value
			if lf.StartGroup <= missing && lf.EndGroup >= missing {
				select {
				case asked <- struct{}{}:
				default:
				}
			}
			_ = pub.track.Fetch(r)
		})
		c, _ := n.dial("/live", nil)
		ctx := fetchCtx(t)
		live, err := c.Subscribe(ctx, testTrack, wire.Params{LocationFilter: wire.Some(wire.NextObjectFilter())})
		require.NoError(t, err)

		write := func(w *moqt.SubgroupWriter, g uint64, from, to int) {
			for i := from; i < to; i++ {
				require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: g, Object: uint64(i)}, Payload: payload(g, uint64(i))}))
			}
		}
		var late, lag *moqt.SubgroupWriter
		sent := 0
		for g := range uint64(groups) {
			w := pub.track.OpenSubgroup(g, 0, moqt.SubgroupOptions{})
			switch g {
			case missing:
				late = w // no stream opens before its first object
				continue
			case lagging:
				lag = w
				write(w, g, 0, 1)
				sent++
				continue
			}
			write(w, g, 0, per)
			sent += per
			require.NoError(t, w.Close())
		}
		// Everything written so far reached the relay's track.
		for range sent {
			_, err := live.ReadObject(ctx)
			require.NoError(t, err)
		}

		joiner, _ := n.dial("/joiner", nil)
		sub, err := joiner.Subscribe(ctx, testTrack, wire.Params{
			LocationFilter: wire.Some(wire.NextObjectFilter()),
			FillParameters: &wire.Params{LocationFilter: wire.Some(wire.NoLocationFilter()), FillTimeout: wire.Some[uint64](10_000)},
		})
		require.NoError(t, err)
		largest, ok := sub.Largest()
		require.True(t, ok)
		require.Equal(t, wire.Location{Group: groups - 1, Object: per - 1}, largest)

		type entry struct {
			o   moqt.Object
			err error
		}
		entries := make(chan entry, groups*per)
		go func() {
			for range groups * per {
				o, err := sub.ReadObject(ctx)
				entries <- entry{o, err}
				if err != nil {
					return
				}
			}
		}()
		want := groupsWant(0, groups, per, false)
		var got []wire.Location
		take := func(e entry) {
			require.NoError(t, e.err)
			require.Zero(t, e.o.EndOfRange, "a marker at %v", e.o.Location)
			require.Nil(t, e.o.Incomplete, "incomplete at %v", e.o.Location)
			require.Equal(t, want[len(got)], e.o.Location, "in order, none missing, through %s", scheme)
			assert.Equal(t, payload(e.o.Location.Group, e.o.Location.Object), e.o.Payload)
			got = append(got, e.o.Location)
		}
		// The fill reaches group 25 and asks the publisher for it; until the
		// publisher writes it, nothing past it may come.
	wait:
		for {
			select {
			case <-asked:
				break wait
			case e := <-entries:
				require.Less(t, e.o.Location.Group, uint64(missing), "the fill went past group %d without it", missing)
				take(e)
			case <-ctx.Done():
				t.Fatal("the relay never asked the publisher for group 25")
			}
		}
		write(late, missing, 0, per)
		require.NoError(t, late.Close())
		write(lag, lagging, 1, per)
		require.NoError(t, lag.Close())
		for len(got) < groups*per {
			select {
			case e := <-entries:
				take(e)
			case <-ctx.Done():
				t.Fatalf("%d of %d objects", len(got), groups*per)
			}
		}
		assert.Equal(t, want, got)
	})
}
