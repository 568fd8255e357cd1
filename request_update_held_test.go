package moqt

import (
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// bigUpdate is a REQUEST_UPDATE carrying an AUTHORIZATION_TOKEN of n bytes.
func bigUpdate(id uint64, n int) *wire.RequestUpdate {
	return &wire.RequestUpdate{RequestID: id, Parameters: wire.Params{AuthorizationTokens: []wire.Token{
		{AliasType: wire.TokenUseValue, Type: 1, Value: make([]byte, n)},
	}}}
}

// updateSize is what each bigUpdate(_, 15000) counts: 4 fit under
// maxHeldUpdateBytes, 5 do not.
const updateSize = 15000

// heldSubscribes is a Handler that answers each SUBSCRIBE for trackA from
// its LocalTrack once release is closed, and each SUBSCRIBE_NAMESPACE
// likewise.
func heldSubscribes(t *testing.T, release <-chan struct{}) Handler {
	track, err := NewLocalTrack(trackA, nil)
	require.NoError(t, err)
	return HandlerFunc(func(r Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		switch r := r.(type) {
		case *SubscribeRequest:
			_, _ = track.Accept(r, AcceptOptions{})
		case *SubscribeNamespaceRequest:
			_, _ = r.Accept(wire.Params{})
		default:
			DefaultHandler.ServeMOQT(r)
		}
	})
}

func liveHeapNow() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestHeldUpdatesByteBound: REQUEST_UPDATEs sent before the SUBSCRIBE is
// answered are held, counted, up to maxHeldUpdateBytes per request; the
// one past it is refused with EXCESSIVE_LOAD in its turn, after the
// answers to those before it, and the subscription ends with PUBLISH_DONE
// UPDATE_FAILED (§9.5.1). The session goes on, and the bytes are released.
func TestHeldUpdatesByteBound(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				release := make(chan struct{})
				s, fp := pipeServerSession(t, transport.PipeConfig{WebTransport: tr.wt}, &Config{Handler: heldSubscribes(t, release)})
				fs := fp.open(subscribeMsg(0, trackA, wire.Params{}))
				for i := range 6 {
					fs.send(bigUpdate(uint64(2+2*i), updateSize))
				}
				synctest.Wait()
				held := s.backlog.Used()
				assert.Greater(t, held, int64(4*updateSize), "the held updates are counted")
				assert.LessOrEqual(t, held, int64(maxHeldUpdateBytes), "within the request's bound")
				close(release)
				expect[*wire.SubscribeOK](fs)
				for range 4 {
					expect[*wire.RequestOK](fs)
				}
				re := expect[*wire.RequestError](fs)
				assert.Equal(t, wire.ReqExcessiveLoad, re.ErrorCode, re.ErrorReason)
				assertLoadRetry(t, re.RetryInterval)
				d := expect[*wire.PublishDone](fs)
				assert.Equal(t, wire.DoneUpdateFailed, d.StatusCode)
				fs.expectFIN()
				settle(t, func() bool { return s.backlog.Used() == 0 }, "the held bytes are released")
				assert.NoError(t, s.Context().Err(), "the session goes on")
			})
		})
	}
}

// TestHeldUpdatesSessionBound: many requests each within their own bound
// hold, together, at most the session's MaxSessionBacklog; the updates
// past it are refused, and the heap they make the session hold stays
// within the bound. 40 SUBSCRIBEs left unanswered with 8 updates of 15 KB
// each: 4.6 MiB held before the bound (the heap grew by 5 MiB and more).
func TestHeldUpdatesSessionBound(t *testing.T) {
	const (
		requests = 40
		each     = 8
		budget   = 512 << 10
	)
	inBubble(t, func(t *testing.T) {
		release := make(chan struct{})
		s, fp := pipeServerSession(t, transport.PipeConfig{}, &Config{Handler: heldSubscribes(t, release), MaxSessionBacklog: budget})
		streams := make([]*fakeStream, requests)
		for i := range streams {
			streams[i] = fp.open(subscribeMsg(uint64(2*i*(each+1)), trackA, wire.Params{}))
		}
		synctest.Wait()
		base := liveHeapNow()
		for i, fs := range streams {
			for j := range each {
				fs.send(bigUpdate(uint64(2*(i*(each+1)+j+1)), updateSize))
			}
		}
		synctest.Wait()
		grown := liveHeapNow() - base
		held := s.backlog.Used()
		t.Logf("held %d KiB counted, heap grown by %d KiB", held>>10, grown>>10)
		assert.LessOrEqual(t, held, int64(budget), "the session's bound")
		assert.Greater(t, held, int64(budget-maxHeldUpdateBytes), "the bound is used")
		assert.Less(t, grown, int64(2*budget), "the heap the updates hold")

		close(release)
		answered, refused := 0, 0
		for _, fs := range streams {
			expect[*wire.SubscribeOK](fs)
			for range each {
				m := fs.read()
				if _, ok := m.(*wire.RequestOK); ok {
					answered++
					continue
				}
				re, ok := m.(*wire.RequestError)
				require.True(t, ok, "%T", m)
				assert.Equal(t, wire.ReqExcessiveLoad, re.ErrorCode)
				refused++
				d := expect[*wire.PublishDone](fs)
				assert.Equal(t, wire.DoneUpdateFailed, d.StatusCode)
				break
			}
		}
		assert.LessOrEqual(t, answered*updateSize, budget, "only what the budget held was answered")
		assert.Positive(t, refused)
		settle(t, func() bool { return s.backlog.Used() == 0 }, "the held bytes are released")
		assert.NoError(t, s.Context().Err(), "the session goes on")
	})
}

// TestHeldNamespaceUpdatesByteBound: a SUBSCRIBE_NAMESPACE's updates held
// before its answer are bounded as a subscription's; the one past the
// bound is refused with EXCESSIVE_LOAD after the others' answers, and the
// responder closes the stream (§9.5.1).
func TestHeldNamespaceUpdatesByteBound(t *testing.T) {
	for _, tr := range pipeTransports {
		t.Run(tr.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				release := make(chan struct{})
				s, fp := pipeServerSession(t, transport.PipeConfig{WebTransport: tr.wt}, &Config{Handler: heldSubscribes(t, release)})
				fs := fp.open(&wire.SubscribeNamespace{RequestID: 0, TrackNamespacePrefix: wire.NewNamespace("live")})
				for i := range 6 {
					fs.send(bigUpdate(uint64(2+2*i), updateSize))
				}
				synctest.Wait()
				held := s.backlog.Used()
				assert.Greater(t, held, int64(4*updateSize), "the held updates are counted")
				assert.LessOrEqual(t, held, int64(maxHeldUpdateBytes), "within the request's bound")
				close(release)
				expect[*wire.RequestOK](fs) // the request's answer
				for range 4 {
					expect[*wire.RequestOK](fs)
				}
				re := expect[*wire.RequestError](fs)
				assert.Equal(t, wire.ReqExcessiveLoad, re.ErrorCode, re.ErrorReason)
				assertLoadRetry(t, re.RetryInterval)
				fs.expectFIN()
				settle(t, func() bool { return s.backlog.Used() == 0 }, "the held bytes are released")
				assert.NoError(t, s.Context().Err(), "the session goes on")
			})
		})
	}
}
