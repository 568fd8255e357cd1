package wire

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireTypedError fails unless err is one of the package's two error
// kinds.
func requireTypedError(t *testing.T, err error) (*ProtocolError, *RejectError) {
	t.Helper()
	var pe *ProtocolError
	var re *RejectError
	errors.As(err, &pe)
	errors.As(err, &re)
	require.True(t, pe != nil || re != nil, "untyped error %T: %v", err, err)
	require.False(t, pe != nil && re != nil, "error of both kinds: %v", err)
	return pe, re
}

// requireRoundTrip encodes m, decodes the result and checks it equals m and
// that encoding is stable, in draft 21.
func requireRoundTrip(t *testing.T, m Message) { requireRoundTripIn(t, Draft21, m) }

// requireRoundTripIn is requireRoundTrip in draft v. It returns false for a
// message that v decodes but does not send.
func requireRoundTripIn(t *testing.T, v Version, m Message) bool {
	t.Helper()
	enc, err := m.AppendBody(v, nil)
	if errors.Is(err, ErrNotInDraft) {
		// A received code of another draft decodes (it is read as
		// INTERNAL_ERROR) but is not sent back on this draft.
		switch m := m.(type) {
		case *RequestError:
			require.False(t, v.Profile().HasRequestError(m.ErrorCode), "%v", err)
			return false
		case *PublishDone:
			require.False(t, v.Profile().HasPublishDoneCode(m.StatusCode), "%v", err)
			return false
		}
	}
	require.NoError(t, err, "a decoded %s must re-encode in %s", m.Type(), v)
	again, err := ParseMessage(v, m.Type(), enc)
	require.NoError(t, err, "re-encoded %s must decode", m.Type())
	require.Equal(t, m, again)
	enc2, err := again.AppendBody(v, nil)
	require.NoError(t, err)
	require.Equal(t, enc, enc2, "encoding is canonical")
	return true
}

// fuzzSeedMessages returns the golden messages plus encoder-built ones.
func fuzzSeedMessages() []Message {
	out := []Message{loadedSubscribe()}
	for _, name := range sortedNames(controlGolden) {
		out = append(out, controlGolden[name])
	}
	return out
}

// fuzzVersion maps a fuzz input byte to one of Versions, so every target
// runs all four drafts.
func fuzzVersion(b byte) Version { return Versions[int(b)%len(Versions)] }

// draftVectorFiles are the control vectors of each draft, by the index of
// the draft in Versions; 20 shares 21's.
var draftVectorFiles = map[Version]string{Draft21: "control.txt", Draft20: "control.txt",
	Draft19: "control19.txt", Draft18: "control18.txt"}

func FuzzMessage(f *testing.F) {
	for i, v := range Versions {
		for _, vec := range loadVectors(f, draftVectorFiles[v]) {
			typ, body, err := NewMessageReader(bytes.NewReader(vec.Bytes)).ReadFrame()
			require.NoError(f, err)
			f.Add(byte(i), uint64(typ), bytes.Clone(body))
		}
	}
	for _, m := range fuzzSeedMessages() {
		b, err := m.AppendBody(Draft21, nil)
		require.NoError(f, err)
		for i := range Versions {
			f.Add(byte(i), uint64(m.Type()), b)
		}
	}
	f.Fuzz(func(t *testing.T, vi byte, typ uint64, body []byte) {
		v := fuzzVersion(vi)
		m, err := ParseMessage(v, MessageType(typ), body)
		if err != nil {
			_, re := requireTypedError(t, err)
			if re != nil {
				require.NotNil(t, m, "a rejected request still decodes")
				assert.Equal(t, MessageType(typ), m.Type())
			}
			return
		}
		if requireRoundTripIn(t, v, m) && len(body) <= MaxMessageBody {
			framed, err := AppendMessage(v, nil, m)
			require.NoError(t, err)
			got, err := NewMessageReader(bytes.NewReader(framed)).ReadMessage(v)
			require.NoError(t, err)
			require.Equal(t, m, got)
		}
	})
}

func FuzzParams(f *testing.F) {
	contexts := []ParamContext{InSubscribe, InSubscribeOK, InPublish, InPublishOK, InFetch, InFetchOK,
		InTrackStatus, InTrackStatusOK, InSubscribeTracks, InPublishStateNotify, InFillParameters,
		InAnyUpdate, InAnyRequestOK}
	for _, m := range fuzzSeedMessages() {
		var p *Params
		switch m := m.(type) {
		case *Subscribe:
			p = &m.Parameters
		case *SubscribeOK:
			p = &m.Parameters
		case *Fetch:
			p = &m.Parameters
		case *RequestUpdate:
			p = &m.Parameters
		case *SubscribeTracks:
			p = &m.Parameters
		case *Publish:
			p = &m.Parameters
		default:
			continue
		}
		b, err := p.Append(nil)
		require.NoError(f, err)
		for _, ctx := range contexts {
			for i := range Versions {
				f.Add(byte(i), uint32(ctx), b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, vi byte, ctx uint32, b []byte) {
		v := fuzzVersion(vi)
		p, err := ParseParamsFor(v, b, ParamContext(ctx))
		if err != nil {
			requireTypedError(t, err)
			return
		}
		require.NoError(t, p.CheckFor(v, ParamContext(ctx)), "parsing and Check agree")
		enc, err := p.AppendFor(v, ParamContext(ctx), nil)
		require.NoError(t, err)
		again, err := ParseParamsFor(v, enc, ParamContext(ctx))
		require.NoError(t, err)
		require.Equal(t, p, again)
	})
}

func FuzzMessageReader(f *testing.F) {
	for i, v := range Versions {
		vecs := loadVectors(f, draftVectorFiles[v])
		var all []byte
		for _, name := range sortedNames(vecs) {
			f.Add(byte(i), vecs[name].Bytes)
			all = append(all, vecs[name].Bytes...)
		}
		f.Add(byte(i), all)
		f.Add(byte(i), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00})
	}
	f.Fuzz(func(t *testing.T, vi byte, stream []byte) {
		v := fuzzVersion(vi)
		r := bytes.NewReader(stream)
		mr := NewMessageReader(r)
		off := 0
		for {
			typ, body, err := mr.ReadFrame()
			if err == io.EOF {
				require.Equal(t, len(stream), off, "clean EOF only between messages")
				return
			}
			if err != nil {
				requireTypedError(t, err)
				require.ErrorIs(t, err, ErrTruncated)
				return
			}
			// The reader consumed exactly this message and no more.
			_, n := ParseVarint(stream[off:])
			off += n + 2 + len(body)
			require.Equal(t, off, len(stream)-r.Len())
			m, err := ParseMessage(v, typ, body)
			if err != nil {
				requireTypedError(t, err)
				continue
			}
			requireRoundTripIn(t, v, m)
		}
	})
}
