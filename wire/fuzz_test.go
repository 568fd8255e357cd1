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
// that encoding is stable.
func requireRoundTrip(t *testing.T, m Message) {
	t.Helper()
	enc, err := m.AppendBody(Draft21, nil)
	require.NoError(t, err, "a decoded %s must re-encode", m.Type())
	again, err := ParseMessage(Draft21, m.Type(), enc)
	require.NoError(t, err, "re-encoded %s must decode", m.Type())
	require.Equal(t, m, again)
	enc2, err := again.AppendBody(Draft21, nil)
	require.NoError(t, err)
	require.Equal(t, enc, enc2, "encoding is canonical")
}

// fuzzSeedMessages returns the golden messages plus encoder-built ones.
func fuzzSeedMessages() []Message {
	out := []Message{loadedSubscribe()}
	for _, name := range sortedNames(controlGolden) {
		out = append(out, controlGolden[name])
	}
	return out
}

func FuzzMessage(f *testing.F) {
	for _, vec := range loadVectors(f, "control.txt") {
		typ, body, err := NewMessageReader(bytes.NewReader(vec.Bytes)).ReadFrame()
		require.NoError(f, err)
		f.Add(uint64(typ), bytes.Clone(body))
	}
	for _, m := range fuzzSeedMessages() {
		b, err := m.AppendBody(Draft21, nil)
		require.NoError(f, err)
		f.Add(uint64(m.Type()), b)
	}
	f.Fuzz(func(t *testing.T, typ uint64, body []byte) {
		m, err := ParseMessage(Draft21, MessageType(typ), body)
		if err != nil {
			_, re := requireTypedError(t, err)
			if re != nil {
				require.NotNil(t, m, "a rejected request still decodes")
				assert.Equal(t, MessageType(typ), m.Type())
			}
			return
		}
		requireRoundTrip(t, m)
		if len(body) <= MaxMessageBody {
			framed, err := AppendMessage(Draft21, nil, m)
			require.NoError(t, err)
			got, err := NewMessageReader(bytes.NewReader(framed)).ReadMessage(Draft21)
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
			f.Add(uint32(ctx), b)
		}
	}
	f.Fuzz(func(t *testing.T, ctx uint32, b []byte) {
		p, err := ParseParams(b, ParamContext(ctx))
		if err != nil {
			requireTypedError(t, err)
			return
		}
		require.NoError(t, p.Check(ParamContext(ctx)), "parsing and Check agree")
		enc, err := p.Append(nil)
		require.NoError(t, err)
		again, err := ParseParams(enc, ParamContext(ctx))
		require.NoError(t, err)
		require.Equal(t, p, again)
	})
}

func FuzzMessageReader(f *testing.F) {
	vecs := loadVectors(f, "control.txt")
	var all []byte
	for _, name := range sortedNames(vecs) {
		f.Add(vecs[name].Bytes)
		all = append(all, vecs[name].Bytes...)
	}
	f.Add(all)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, stream []byte) {
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
			m, err := ParseMessage(Draft21, typ, body)
			if err != nil {
				requireTypedError(t, err)
				continue
			}
			requireRoundTrip(t, m)
		}
	})
}
