package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/wire"
)

// FetchObjects and FetchSize are the FETCH benchmark's shape: one FETCH
// answers FetchObjects cached objects of FetchSize bytes, the late joiner's
// catch-up of issue 9, and the raw path moves the same objects on one
// quic-go stream.
const (
	FetchObjects = 1000
	FetchSize    = 1 << 10
)

// MoQTFetch answers FETCHes from a LocalTrack's cache: New publishes
// FetchObjects objects of FetchSize bytes into it once, and each Move is
// one FETCH of all of them, read with Fetch.ReadObject until io.EOF.
type MoQTFetch struct {
	moqtPair
	scr []byte
}

// NewMoQTFetch sets up a session whose publisher caches FetchObjects
// objects of FetchSize bytes in group 0.
func NewMoQTFetch(ctx context.Context) (*MoQTFetch, error) {
	pair, err := newMoQTPair(ctx, nil, func(track *moqt.LocalTrack) error {
		track.SetCache(moqt.CacheLimits{Objects: FetchObjects, Bytes: 4 * FetchObjects * FetchSize})
		return publishCached(track)
	})
	if err != nil {
		return nil, err
	}
	return &MoQTFetch{moqtPair: pair}, nil
}

// publishCached writes the objects the FETCHes read: object i of group 0
// carries the pattern stamped with i.
func publishCached(track *moqt.LocalTrack) error {
	var pay payload
	body := pay.get(0, FetchSize)
	w := track.OpenSubgroup(0, 0, moqt.SubgroupOptions{})
	for i := range FetchObjects {
		stamp(body, i)
		if err := w.WriteObject(moqt.Object{Location: wire.Location{Object: uint64(i)}, Payload: body}); err != nil {
			w.Reset(wire.ResetCancelled)
			return err
		}
	}
	return w.Close()
}

// Move fetches the cached objects n/FetchObjects times (n must be a
// multiple of FetchObjects, size FetchSize) and checks each FETCH returns
// them all, in order, and then its end.
func (p *MoQTFetch) Move(ctx context.Context, n, size int, check bool) error {
	if size != FetchSize || n%FetchObjects != 0 {
		return fmt.Errorf("bench: fetch path moves multiples of %d objects of %d bytes", FetchObjects, FetchSize)
	}
	if p.scr == nil {
		p.scr = make([]byte, FetchSize)
	}
	rng := wire.RangeFilterToObject(wire.Location{}, wire.Location{Object: FetchObjects - 1})
	for range n / FetchObjects {
		f, err := p.client.Fetch(ctx, benchTrack, wire.Params{LocationFilter: wire.Some(rng)})
		if err != nil {
			return err
		}
		if err := readFetch(ctx, f, check, p.scr); err != nil {
			_ = f.Close()
			return err
		}
	}
	return nil
}

func readFetch(ctx context.Context, f *moqt.Fetch, check bool, scr []byte) error {
	for i := range FetchObjects {
		o, err := f.ReadObject(ctx)
		if err != nil {
			return fmt.Errorf("bench: fetched object %d: %w", i, err)
		}
		if o.EndOfRange != 0 || o.Location != (wire.Location{Object: uint64(i)}) || len(o.Payload) != FetchSize {
			return fmt.Errorf("bench: fetched entry %d is %v %v with %d bytes", i, o.EndOfRange, o.Location, len(o.Payload))
		}
		if check {
			if err := verify(o.Payload, scr, i); err != nil {
				return err
			}
		}
	}
	if o, err := f.ReadObject(ctx); err != io.EOF {
		return fmt.Errorf("bench: fetch did not end after %d objects: %v %v", FetchObjects, o.Location, err)
	}
	return nil
}
