package moqt

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/filter"
	"github.com/moqt-go/moqt/internal/mono"
	"github.com/moqt-go/moqt/wire"
)

// A served fetch holds the entries it writes back to back for fewer
// Writes, but not while its cursor waits: what is ready reaches the
// subscriber before the wait ends.
func TestFetchHeldEntriesFlushedBeforeWait(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h, errs := fetchHandler(pubTrack(t, wire.Some(pl(0, 2))))
		// The cursor waits until released, not for a FILL_TIMEOUT budget.
		s, fp := serverSession(t, &Config{Handler: h, FillTimeout: time.Hour})
		release := make(chan struct{})
		pubUseCursor(s, func(filter.Window, bool) fetchCursor {
			return &pubBlockedCursor{first: []Object{pobj(0, 0, "a"), pobj(0, 1, "b")}, release: release}
		})
		fs := fp.open(pubFetchMsg(t, 0, trackA, wire.Params{}))
		expect[*wire.FetchOK](fs)
		d := fp.acceptPubFetch(false)
		got := make(chan []pubEntry, 1)
		go func() {
			var es []pubEntry
			for range 2 {
				e, err := d.next()
				if err != nil {
					break
				}
				es = append(es, e)
			}
			got <- es
		}()
		es := recvOrFail(t, got) // the cursor still waits
		require.Len(t, es, 2)
		assert.Equal(t, []wire.Location{pl(0, 0), pl(0, 1)}, pubLocs(es))
		assert.Equal(t, "b", string(es[1].Payload))
		close(release)
		assert.Empty(t, d.all(), "FIN after the entries")
		require.NoError(t, recvOrFail(t, errs))
	})
}

// The write watchdog gives a Write it finds overdue a past stream
// deadline. When that Write ends meanwhile, the deadline stays on the
// stream: the next Write, well within its grace, must not fail for it.
func TestFetchWriterStaleWatchdogDeadline(t *testing.T) {
	forTransports(t, func(t *testing.T, connect connector) {
		h, served := fetchServedBy(serveWithStaleDeadline)
		p := connect(t, &Config{Handler: h}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f, err := p.client.Fetch(ctx, testTrack, wire.Params{})
		require.NoError(t, err)
		for i, want := range []string{"a", "b"} {
			o, err := f.ReadObject(ctx)
			require.NoError(t, err, "entry %d", i)
			assert.Equal(t, pl(0, uint64(i)), o.Location)
			assert.Equal(t, want, string(o.Payload))
		}
		_, err = f.ReadObject(ctx)
		assert.Equal(t, io.EOF, err)
		require.NoError(t, recvOrFail(t, served))
	})
}

// fetchServedBy is a Handler that answers each FETCH with serve, whose
// result goes to the channel it returns, and every other request as
// DefaultHandler does.
func fetchServedBy(serve func(*FetchRequest) error) (Handler, <-chan error) {
	served := make(chan error, 1)
	return HandlerFunc(func(r Request) {
		fr, ok := r.(*FetchRequest)
		if !ok {
			DefaultHandler.ServeMOQT(r)
			return
		}
		served <- serve(fr)
	}), served
}

// serveWithStaleDeadline answers r with two objects, the watchdog firing
// between them for the first, as if it had read that Write's bound just
// before the Write returned.
func serveWithStaleDeadline(r *FetchRequest) error {
	if err := r.Accept(false, pl(0, 1), nil); err != nil {
		return err
	}
	w := r.Objects()
	if err := w.WriteObject(pobj(0, 0, "a")); err != nil {
		return err
	}
	w.dog.Begin(mono.Now() - 1)
	w.dog.Fire()
	w.dog.End()
	if err := w.WriteObject(pobj(0, 1, "b")); err != nil {
		return err
	}
	return w.Close()
}
