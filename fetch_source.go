package moqt

import (
	"context"
	"io"

	"github.com/moqt-go/moqt/internal/cache"
	"github.com/moqt-go/moqt/wire"
)

// fetchCursor yields the entries a LocalTrack answers a FETCH or a fill
// fetch stream with (§9.11, §3.4): the objects of one window, groups in the
// requested order and objects by Object ID within a group, and End of Range
// markers (Object.EndOfRange) for the ranges it cannot serve. next returns
// io.EOF after the last entry. A cursor waits for an object whose
// publication has begun but is not complete; if ctx ends meanwhile, it
// reports that object as timed out (EndOfTimedOutRange) and goes on without
// waiting again, so the caller bounds the wait with ctx (FILL_TIMEOUT,
// §9.20.6). Entries' slices are shared with the store and must not be
// modified.
type fetchCursor interface {
	next(ctx context.Context) (Object, error)
}

// cachedCursor is the cursor of a track with a cache.
type cachedCursor struct{ cu *cache.Cursor }

func (c cachedCursor) next(ctx context.Context) (Object, error) {
	o, err := c.cu.Next(ctx)
	if err != nil {
		return Object{}, err
	}
	if o.EndOfRange != 0 {
		return Object{Location: o.Location, EndOfRange: o.EndOfRange}, nil
	}
	return Object{Location: o.Location, SubgroupID: o.SubgroupID, Priority: wire.Some(o.Priority),
		Properties: o.Properties, Payload: o.Payload, Datagram: o.Datagram}, nil
}

// unknownCursor is the cursor of a track that keeps nothing: one End of
// Unknown Range marker over the whole window.
type unknownCursor struct {
	end  wire.Location
	done bool
}

func (c *unknownCursor) next(context.Context) (Object, error) {
	if c.done {
		return Object{}, io.EOF
	}
	c.done = true
	return Object{Location: c.end, EndOfRange: wire.EndOfUnknownRange}, nil
}
