package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/moqt-go/moqt/wire"
)

var statusCommand = &command{
	name:  "status",
	args:  "URL NAMESPACE TRACK",
	short: "show a track's Largest Object and Track Properties (TRACK_STATUS)",
	long: `
Asks about the track NAMESPACE TRACK (TRACK_STATUS) and prints its Largest
Object, the latest object published (GROUP:OBJECT), and its Track
Properties.

Example:
  moqt status -sha256 PIN moqt://127.0.0.1:4443/ clock time`,
	minArgs: 3,
	maxArgs: 3,
	setup:   statusSetup,
}

func statusSetup(fs *flag.FlagSet) func(context.Context, *env, []string) error {
	var client clientFlags
	client.register(fs)
	return func(ctx context.Context, e *env, args []string) error {
		name, err := parseTrack(args[1], args[2])
		if err != nil {
			return err
		}
		sess, err := client.dial(ctx, e, args[0], nil)
		if err != nil {
			return err
		}
		defer sess.Close()
		st, err := sess.TrackStatus(ctx, name, wire.Params{})
		if err != nil {
			return fmt.Errorf("TRACK_STATUS for %s: %w", formatTrack(name), explainRequestError(err))
		}
		w := e.stdout
		fmt.Fprintf(w, "track:          %s\n", formatTrack(name))
		if st.Largest.Set {
			l := st.Largest.Value
			fmt.Fprintf(w, "largest object: %s (group %d, object %d)\n", loc(l), l.Group, l.Object)
		} else {
			fmt.Fprintf(w, "largest object: none (nothing published yet)\n")
		}
		if len(st.Properties) == 0 {
			fmt.Fprintf(w, "properties:     none\n")
		}
		for i, kv := range st.Properties {
			label := "properties:    "
			if i > 0 {
				label = "               "
			}
			fmt.Fprintf(w, "%s %s\n", label, describeProperty(kv))
		}
		return nil
	}
}

// describeProperty renders a Track Property for people (§10).
func describeProperty(kv wire.KeyValue) string {
	ms := func(v uint64) string { return (time.Duration(v) * time.Millisecond).String() }
	switch kv.Type {
	case wire.PropObjectDeliveryTimeout:
		return "object delivery timeout " + ms(kv.Value)
	case wire.PropSubgroupDeliveryTimeout:
		return "subgroup delivery timeout " + ms(kv.Value)
	case wire.PropMaxCacheDuration:
		return "max cache duration " + ms(kv.Value)
	case wire.PropDefaultPublisherPriority:
		return fmt.Sprintf("default publisher priority %d", kv.Value)
	case wire.PropDefaultPublisherGroupOrder:
		switch wire.GroupOrder(kv.Value) {
		case wire.GroupOrderAscending:
			return "default group order ascending"
		case wire.GroupOrderDescending:
			return "default group order descending"
		}
		return fmt.Sprintf("default group order %d", kv.Value)
	case wire.PropDynamicGroups:
		return fmt.Sprintf("dynamic groups %d", kv.Value)
	case wire.PropImmutableProperties:
		return fmt.Sprintf("immutable properties (%d bytes)", len(kv.Bytes))
	}
	if kv.Type%2 == 1 {
		return fmt.Sprintf("property 0x%x: %q", kv.Type, kv.Bytes)
	}
	return fmt.Sprintf("property 0x%x: %d", kv.Type, kv.Value)
}
