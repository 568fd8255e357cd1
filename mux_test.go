package moqt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/moqt-go/moqt/wire"
)

// nsRequest is a request in a namespace, with no stream: it records the
// REQUEST_ERROR it gets.
type nsRequest struct {
	RequestCommon
	code wire.RequestErrorCode
}

func newNSRequest(fields ...string) *nsRequest {
	return &nsRequest{RequestCommon: RequestCommon{ns: wire.NewNamespace(fields...)}}
}

func (r *nsRequest) Reject(code wire.RequestErrorCode, _ string) error {
	r.code = code
	return nil
}

// named is a handler that records its name as the one that served.
func named(name string, served *string) Handler {
	return HandlerFunc(func(Request) { *served = name })
}

func TestServeMuxRouting(t *testing.T) {
	var served string
	mux := NewServeMux()
	mux.Handle(wire.NewNamespace("foo"), named("foo", &served))
	mux.Handle(wire.NewNamespace("foo", "bar"), named("foo,bar", &served))
	mux.HandleFunc(wire.NewNamespace("a", "b", "c"), func(Request) { served = "a,b,c" })
	for _, tc := range []struct {
		ns   []string
		want string // "" for DefaultHandler
	}{
		{[]string{"foo"}, "foo"},
		{[]string{"foo", "bar"}, "foo,bar"}, // the longest prefix wins
		{[]string{"foo", "bar", "baz"}, "foo,bar"},
		{[]string{"foo", "baz"}, "foo"},
		{[]string{"foobar"}, ""}, // field-wise, not byte-wise
		{[]string{"fo"}, ""},
		{[]string{"foo\x00bar"}, ""},
		{[]string{"a", "b"}, ""}, // shorter than every prefix of its branch
		{[]string{"a", "b", "c", "d"}, "a,b,c"},
		{[]string{"bar", "foo"}, ""},
		{nil, ""},
	} {
		served = ""
		r := newNSRequest(tc.ns...)
		mux.ServeMOQT(r)
		assert.Equal(t, tc.want, served, "%v", tc.ns)
		if tc.want == "" {
			assert.Equal(t, wire.ReqDoesNotExist, r.code, "%v: DefaultHandler's answer", tc.ns)
		} else {
			assert.Zero(t, r.code, "%v", tc.ns)
		}
	}

	// The empty prefix catches what nothing longer does.
	mux.Handle(wire.Namespace{}, named("all", &served))
	for ns, want := range map[string]string{"foobar": "all", "foo": "foo", "": "all"} {
		served = ""
		var r *nsRequest
		if ns == "" {
			r = newNSRequest()
		} else {
			r = newNSRequest(ns)
		}
		mux.ServeMOQT(r)
		assert.Equal(t, want, served, "%q", ns)
	}
}

// An empty ServeMux answers as DefaultHandler: PUBLISH gets NOT_SUPPORTED
// over a real session too (see TestServeMuxOverSession).
func TestServeMuxEmpty(t *testing.T) {
	r := newNSRequest("live")
	NewServeMux().ServeMOQT(r)
	assert.Equal(t, wire.ReqDoesNotExist, r.code)
}

func TestServeMuxPanics(t *testing.T) {
	h := HandlerFunc(func(Request) {})
	mux := NewServeMux()
	mux.Handle(wire.NewNamespace("foo", "bar"), h)
	mux.Handle(wire.Namespace{}, h)
	assert.PanicsWithValue(t, "moqt: multiple registrations for namespace prefix foo-bar",
		func() { mux.Handle(wire.NewNamespace("foo", "bar"), h) })
	assert.Panics(t, func() { mux.Handle(wire.Namespace{}, h) }, "a second catch-all")
	assert.Panics(t, func() { mux.Handle(wire.NewNamespace("x"), nil) })
	assert.Panics(t, func() { mux.HandleFunc(wire.NewNamespace("x"), nil) })
	assert.Panics(t, func() { mux.Handle(wire.Namespace{[]byte("x"), {}}, h) }, "an empty field")
	tooMany := make(wire.Namespace, wire.MaxNamespaceFields+1)
	for i := range tooMany {
		tooMany[i] = []byte("f")
	}
	assert.Panics(t, func() { mux.Handle(tooMany, h) })
	// A prefix that failed registers nothing.
	var served string
	mux.Handle(wire.NewNamespace("x"), named("x", &served))
	mux.ServeMOQT(newNSRequest("x"))
	assert.Equal(t, "x", served)
}

// Handle and ServeMOQT may run concurrently (run with -race).
func TestServeMuxConcurrent(t *testing.T) {
	mux := NewServeMux()
	var mu sync.Mutex
	count := map[string]int{}
	handler := func(name string) Handler {
		return HandlerFunc(func(Request) {
			mu.Lock()
			count[name]++
			mu.Unlock()
		})
	}
	mux.Handle(wire.NewNamespace("live"), handler("live"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			mux.Handle(wire.NewNamespace("live", string(rune('a'+i))), handler(string(rune('a'+i))))
		})
		wg.Go(func() {
			for range 100 {
				mux.ServeMOQT(newNSRequest("live", string(rune('a'+i)), "x"))
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range count {
		total += n
	}
	assert.Equal(t, 800, total, "every request was served by a registered Handler")
	before := count["live"]
	for i := range 8 {
		mux.ServeMOQT(newNSRequest("live", string(rune('a'+i)), "x"))
	}
	assert.Equal(t, before, count["live"], "once registered, each (live, x) serves its own")
}

// Over a real session: SUBSCRIBE, TRACK_STATUS and PUBLISH are routed by
// their namespace; what matches nothing gets the spec's default answer.
func TestServeMuxOverSession(t *testing.T) {
	live := wire.FullTrackName{Namespace: wire.NewNamespace("live"), Name: []byte("v")}
	cam := wire.FullTrackName{Namespace: wire.NewNamespace("live", "cam", "1"), Name: []byte("v")}
	other := wire.FullTrackName{Namespace: wire.NewNamespace("livestream"), Name: []byte("v")}
	forTransports(t, func(t *testing.T, connect connector) {
		camTrack, err := NewLocalTrack(cam, nil)
		require.NoError(t, err)
		mux := NewServeMux()
		mux.HandleFunc(wire.NewNamespace("live"), func(r Request) {
			_ = r.Reject(wire.ReqUnauthorized, "live")
		})
		mux.HandleFunc(wire.NewNamespace("live", "cam"), func(r Request) {
			switch r := r.(type) {
			case *SubscribeRequest:
				_, _ = camTrack.Accept(r, AcceptOptions{})
			case *TrackStatusRequest:
				_ = camTrack.Status(r)
			case *PublishRequest:
				_, _ = r.Accept(wire.Params{})
			}
		})
		p := connect(t, &Config{Handler: mux}, &Config{Handler: mux})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()

		sub, err := p.client.Subscribe(ctx, cam, wire.Params{})
		require.NoError(t, err, "(live, cam) serves (live, cam, 1)")
		assert.Equal(t, stateEstablished, sub.current())
		_, err = p.client.TrackStatus(ctx, cam, wire.Params{})
		assert.NoError(t, err)

		var re *RequestError
		_, err = p.client.Subscribe(ctx, live, wire.Params{})
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqUnauthorized, re.Code, "(live) serves (live)")
		_, err = p.client.TrackStatus(ctx, other, wire.Params{})
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqDoesNotExist, re.Code, "(livestream) matches nothing")

		// The client's mux routes the server's PUBLISH the same way.
		camPub, err := NewLocalTrack(wire.FullTrackName{Namespace: cam.Namespace, Name: []byte("audio")}, nil)
		require.NoError(t, err)
		ss, err := camPub.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
		require.NoError(t, err)
		assert.Equal(t, stateEstablished, ss.current())
		otherPub, err := NewLocalTrack(other, nil)
		require.NoError(t, err)
		_, err = otherPub.Publish(ctx, p.server, wire.Params{}, AcceptOptions{})
		require.ErrorAs(t, err, &re)
		assert.Equal(t, wire.ReqNotSupported, re.Code, "DefaultHandler's answer to PUBLISH")
	})
}
