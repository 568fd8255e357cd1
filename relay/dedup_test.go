package relay

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// duplicateCase has publisher a send objects 0-2 of group 0 on subgroup 0,
// which the subscriber reads, then b send them as dup writes them; it
// returns the relay, a, the subscription and the relay's counters. big,
// if set, is every payload of a.
func duplicateCase(t *testing.T, scheme string, sessCfg *moqt.Config, big []byte, dup func(t *testing.T, b *publisher)) (*node, *publisher, *moqt.Subscription, *countingMetrics) {
	m := &countingMetrics{requests: map[string]int{}, drops: map[string]int{}}
	n := startNode(t, scheme, Config{Metrics: m}, sessCfg)
	a, b, _, sub := n.twoPublishers(t)
	w := a.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
	for i := range uint64(3) {
		p := payload(0, i)
		if big != nil {
			p = big
		}
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: i}, Payload: p}))
	}
	require.NoError(t, w.Close())
	got := readAll(t, sub, 3)
	require.Len(t, got, 3)
	dup(t, b)
	return n, a, sub, m
}

// writeDup writes objects 0-2 of group 0 to tr on subgroup sg with opts,
// payloads from p.
func writeDup(t *testing.T, tr *moqt.LocalTrack, sg uint64, opts moqt.SubgroupOptions, p func(id uint64) []byte) {
	w := tr.OpenSubgroup(0, sg, opts)
	for i := range uint64(3) {
		require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: i}, SubgroupID: sg, Priority: opts.Priority, Payload: p(i)}))
	}
	require.NoError(t, w.Close())
}

// assertMalformed checks that the track ended downstream as Malformed,
// counted once, and left the relay.
func assertMalformed(t *testing.T, n *node, sub *moqt.Subscription, m *countingMetrics) {
	assert.Equal(t, wire.DoneMalformedTrack, doneCode(t, sub))
	settled(t, "the track left the relay", func() bool { return n.relay.trackCount() == 0 })
	m.mu.Lock()
	assert.Equal(t, 1, m.drops[DropMalformed], "the duplicate that revealed it")
	m.mu.Unlock()
}

func TestC041_DuplicateDifferentPayloadIsMalformed(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n, _, sub, m := duplicateCase(t, scheme, nil, nil, func(t *testing.T, b *publisher) {
			// Same lengths: the hash, not the length, tells them apart.
			writeDup(t, b.track, 0, moqt.SubgroupOptions{}, func(id uint64) []byte {
				if id == 1 {
					return []byte("0/X")
				}
				return payload(0, id)
			})
		})
		assertMalformed(t, n, sub, m)
	})
}

func TestC041_DuplicateDifferentPriorityIsMalformed(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n, _, sub, m := duplicateCase(t, scheme, nil, nil, func(t *testing.T, b *publisher) {
			writeDup(t, b.track, 0, moqt.SubgroupOptions{Priority: wire.Some[uint8](7)}, func(id uint64) []byte { return payload(0, id) })
		})
		assertMalformed(t, n, sub, m)
	})
}

func TestC041_DuplicateOnAnotherSubgroupIsMalformed(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		n, _, sub, m := duplicateCase(t, scheme, nil, nil, func(t *testing.T, b *publisher) {
			writeDup(t, b.track, 1, moqt.SubgroupOptions{}, func(id uint64) []byte { return payload(0, id) })
		})
		assertMalformed(t, n, sub, m)
	})
}

// TestC041_StreamedDuplicateDifferentPayloadIsMalformed: payloads past the
// relay's MaxObjectSize stream through, hashed as they go; a duplicate
// differing in one byte of 64 KiB is caught.
func TestC041_StreamedDuplicateDifferentPayloadIsMalformed(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	other := bytes.Clone(big)
	other[len(other)-1] ^= 1
	forSchemes(t, func(t *testing.T, scheme string) {
		n, _, sub, m := duplicateCase(t, scheme, &moqt.Config{MaxObjectSize: 4096}, big, func(t *testing.T, b *publisher) {
			writeDup(t, b.track, 0, moqt.SubgroupOptions{}, func(id uint64) []byte {
				if id == 2 {
					return other
				}
				return big
			})
		})
		assertMalformed(t, n, sub, m)
	})
}

// TestC041_IdenticalDuplicatesDroppedSilently: the control case, the same
// objects from both publishers, streamed or not: dropped, and the track
// goes on.
func TestC041_IdenticalDuplicatesDroppedSilently(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16)
	for _, tc := range []struct {
		name string
		big  []byte
	}{{"small", nil}, {"streamed", big}} {
		t.Run(tc.name, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				_, a, sub, m := duplicateCase(t, scheme, &moqt.Config{MaxObjectSize: 4096}, tc.big, func(t *testing.T, b *publisher) {
					writeDup(t, b.track, 0, moqt.SubgroupOptions{}, func(id uint64) []byte {
						if tc.big != nil {
							return tc.big
						}
						return payload(0, id)
					})
				})
				settled(t, "duplicates dropped", func() bool {
					m.mu.Lock()
					defer m.mu.Unlock()
					return m.drops[DropDuplicate] == 3
				})
				// The track goes on: a later group comes through, and
				// nothing else.
				writeGroup(t, a.track, 1, 2)
				for _, o := range readAll(t, sub, 2) {
					assert.Equal(t, uint64(1), o.Location.Group, "no duplicate of group 0")
				}
				for _, o := range readFor(t, sub, 300*time.Millisecond) {
					t.Errorf("unexpected object %v", o.Location)
				}
				select {
				case <-sub.Done():
					t.Fatalf("the track ended: %v", sub.Err())
				default:
				}
				m.mu.Lock()
				assert.Zero(t, m.drops[DropMalformed])
				m.mu.Unlock()
			})
		})
	}
}

// TestC041_DuplicateAsDatagramIsMalformed: an object forwarded from a
// subgroup stream comes again as a datagram.
func TestC041_DuplicateAsDatagramIsMalformed(t *testing.T) {
	forSchemes(t, func(t *testing.T, scheme string) {
		var b *publisher
		n, _, sub, m := duplicateCase(t, scheme, nil, nil, func(_ *testing.T, pb *publisher) { b = pb })
		// Datagrams may be lost: sent until the track ends.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				_ = b.track.WriteDatagram(moqt.Object{Location: wire.Location{Object: 1}, Payload: payload(0, 1)})
				select {
				case <-sub.Done():
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		assertMalformed(t, n, sub, m)
		<-done
	})
}

// TestDatagramDuplicateWithFingerprintOverwritten: a datagram still
// remembered for deduplication whose fingerprint another object's took is
// dropped as a duplicate, not read as Malformed.
func TestDatagramDuplicateWithFingerprintOverwritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := &outputs{dgSeen: map[wire.Location]struct{}{}, seed: maphash.MakeSeed()}
		obj := moqt.Object{Location: wire.Location{Object: 0}, Priority: wire.Some[uint8](128), Datagram: true, Payload: []byte("dg")}
		fp := fingerprintOf(&obj, 2, o.hashPayload(obj.Payload))
		seen, conflict := o.note(fp, true, true)
		require.False(t, seen)
		require.Empty(t, conflict)
		other := moqt.Object{Location: wire.Location{Object: maxFingerprints}, Priority: wire.Some[uint8](128), Payload: []byte("x")}
		require.Equal(t, slot(obj.Location), slot(other.Location), "the same slot")
		_, conflict = o.note(fingerprintOf(&other, 1, o.hashPayload(other.Payload)), true, true)
		require.Empty(t, conflict)
		seen, conflict = o.note(fp, true, true)
		assert.True(t, seen, "still known as a datagram")
		assert.Empty(t, conflict)
		obj.Datagram = false
		_, conflict = o.note(fingerprintOf(&obj, 2, fp.hash), true, true)
		assert.NotEmpty(t, conflict, "the same Location on a subgroup stream")
	})
}

// TestC077_PublishersContradictingGapsMalformed: objects of two publishers
// of a track that contradict each other, as one's Prior Group ID Gap and
// the other's object inside it (§10.8), make the track malformed, and the
// relay ends its downstream subscriptions with MALFORMED_TRACK (§12.1),
// on streams and datagrams alike.
func TestC077_PublishersContradictingGapsMalformed(t *testing.T) {
	for _, datagram := range []bool{false, true} {
		t.Run(fmt.Sprintf("datagram=%v", datagram), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &countingMetrics{drops: map[string]int{}, requests: map[string]int{}}
				n := startNode(t, "moqt", Config{Metrics: m}, nil)
				a, b, _, sub := n.twoPublishers(t)
				gap, err := wire.KVList{{Type: wire.PropPriorGroupIDGap, Value: 2}}.Append(nil)
				require.NoError(t, err)
				w := a.track.OpenSubgroup(10, 0, moqt.SubgroupOptions{Properties: true})
				require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Group: 10}, Properties: gap, Payload: []byte("g10")}))
				require.NoError(t, w.Close())
				_, err = readSubgroup(t, sub)
				require.NoError(t, err)
				synctest.Wait()
				// Group 9 is in the gap group 10 announced.
				nine := moqt.Object{Location: wire.Location{Group: 9}, Payload: []byte("g9")}
				if datagram {
					require.NoError(t, b.track.WriteDatagram(nine))
				} else {
					w := b.track.OpenSubgroup(9, 0, moqt.SubgroupOptions{})
					require.NoError(t, w.WriteObject(nine))
					require.NoError(t, w.Close())
				}
				assertMalformed(t, n, sub, m)
			})
		})
	}
}

// TestTwoPublishersOneStopsMidSubgroup: two publishers feed one subgroup
// with the same objects, and one stops mid-group: with a FIN, or with an
// End of Group object and a FIN (as `moqt clock` stops). Whether the other
// goes on or its stream is reset, the subscriber gets one stream that ends
// with a FIN: every object when the other went on after a mere FIN, and up
// to the End of Group otherwise, the other's later objects being dropped,
// and the track goes on. Before, the first FIN closed the downstream
// stream, or the End of Group was followed by the other's next object,
// which every subscriber then took for a Malformed Track (two `moqt clock`s
// of one track, one stopped).
func TestTwoPublishersOneStopsMidSubgroup(t *testing.T) {
	for _, tc := range []struct {
		name               string
		endOfGroup, goesOn bool
		want               []string
	}{
		{"fin/other goes on", false, true, []string{"0/0", "0/1", "0/2", "0/3", "0/4"}},
		{"fin/other reset", false, false, []string{"0/0", "0/1", "0/2"}},
		{"end of group/other goes on", true, true, []string{"0/0", "0/1", "0/2", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forSchemes(t, func(t *testing.T, scheme string) {
				n := startNode(t, scheme, Config{}, nil)
				a, b, _, sub := n.twoPublishers(t)
				wa := a.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
				wb := b.track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
				write := func(w *moqt.SubgroupWriter, id uint64) {
					require.NoError(t, w.WriteObject(moqt.Object{Location: wire.Location{Object: id}, Payload: payload(0, id)}))
				}
				for id := range uint64(3) {
					write(wa, id)
					write(wb, id)
				}
				synctest.Wait()
				if tc.endOfGroup {
					require.NoError(t, wa.WriteObject(moqt.Object{Location: wire.Location{Object: 3}, Status: wire.ObjectEndOfGroup}))
				}
				require.NoError(t, wa.Close()) // a stops mid-group
				synctest.Wait()
				if tc.goesOn {
					write(wb, 3)
					write(wb, 4)
					require.NoError(t, wb.Close())
				} else {
					wb.Reset(wire.ResetCancelled)
				}

				objs, err := readSubgroup(t, sub)
				require.NoError(t, err, "the subgroup ends with a FIN")
				var got []string
				for _, o := range objs {
					got = append(got, string(o.Payload))
				}
				assert.Equal(t, tc.want, got, "one stream")
				writeGroup(t, b.track, 1, 2)
				objs, err = readSubgroup(t, sub)
				require.NoError(t, err)
				assert.Len(t, objs, 2, "the track goes on")
				synctest.Wait()
				select {
				case <-sub.Done():
					t.Fatalf("the subscription ended: %v", sub.Err())
				default:
				}
			})
		})
	}
}
