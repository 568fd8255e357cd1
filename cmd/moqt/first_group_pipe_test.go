package main

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/internal/testhook"
	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// TestFirstGroupKnownOrNot: firstGroup places the first group only when
// the FETCH of the groups before the first object's says where it is. A
// FETCH refused (a relay that let the ended track go while its objects were
// still on their way) or answered with a range the server does not know
// leaves it not known, where it used to be taken for the first object's.
func TestFirstGroupKnownOrNot(t *testing.T) {
	name := wire.FullTrackName{Namespace: wire.Namespace{[]byte("ns")}, Name: []byte("t")}
	const g = 3 // the first object to arrive is in group 3
	publish := func(t *testing.T, cached bool, groups ...uint64) *moqt.LocalTrack {
		track, err := moqt.NewLocalTrack(name, nil)
		require.NoError(t, err)
		if cached {
			track.SetCache(moqt.CacheLimits{Objects: 100})
		}
		for _, grp := range groups {
			w := track.OpenSubgroup(grp, 0, moqt.SubgroupOptions{EndOfGroup: true})
			require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: grp}, Payload: []byte("x")}))
			require.NoError(t, w.Close())
		}
		return track
	}
	for _, tc := range []struct {
		name  string
		serve func(t *testing.T) moqt.HandlerFunc
		first uint64
		known bool
	}{
		{"refused", func(*testing.T) moqt.HandlerFunc {
			return func(r moqt.Request) {
				_ = r.(*moqt.FetchRequest).Reject(wire.ReqDoesNotExist, "no publisher for the track")
			}
		}, g, false},
		{"unknown range", func(t *testing.T) moqt.HandlerFunc {
			track := publish(t, false) // keeps nothing: every range unknown
			track.SetLargest(wire.Location{Group: g})
			return func(r moqt.Request) { _ = track.Fetch(r.(*moqt.FetchRequest)) }
		}, g, false},
		{"earlier groups", func(t *testing.T) moqt.HandlerFunc {
			track := publish(t, true, 1, 2, 3)
			return func(r moqt.Request) { _ = track.Fetch(r.(*moqt.FetchRequest)) }
		}, 1, true},
		{"none before", func(t *testing.T) moqt.HandlerFunc {
			track := publish(t, true, 3)
			return func(r moqt.Request) { _ = track.Fetch(r.(*moqt.FetchRequest)) }
		}, g, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c, s, err := testhook.PipeSessions(ctx, transport.PipeConfig{}, "/", &moqt.Config{Handler: tc.serve(t), Logger: quietLog}, &moqt.Config{Logger: quietLog})
				require.NoError(t, err)
				client, server := c.(*moqt.Session), s.(*moqt.Session)
				defer func() {
					_ = client.Close()
					_ = server.Close()
					<-client.Context().Done()
					<-server.Context().Done()
				}()
				first, known := firstGroup(ctx, client, name, g)
				assert.Equal(t, tc.first, first, "first group")
				assert.Equal(t, tc.known, known, "known")
			})
		})
	}
}

var quietLog = slog.New(slog.DiscardHandler)
