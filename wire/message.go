package wire

import (
	"encoding/binary"
	"errors"
	"io"
)

// MessageType is the Type of a control message (§9, Table 5).
type MessageType uint64

// Control message types (§9, Table 5).
const (
	MsgRequestUpdate      MessageType = 0x02
	MsgSubscribe          MessageType = 0x03
	MsgSubscribeOK        MessageType = 0x04
	MsgRequestError       MessageType = 0x05
	MsgPublishNamespace   MessageType = 0x06
	MsgRequestOK          MessageType = 0x07
	MsgNamespace          MessageType = 0x08
	MsgPublishDone        MessageType = 0x0B
	MsgTrackStatus        MessageType = 0x0D
	MsgNamespaceDone      MessageType = 0x0E
	MsgPublishSkipped     MessageType = 0x0F
	MsgGoaway             MessageType = 0x10
	MsgFetch              MessageType = 0x16
	MsgFetchOK            MessageType = 0x18
	MsgPublish            MessageType = 0x1D
	MsgPublishStateNotify MessageType = 0x22
	MsgSubscribeNamespace MessageType = 0x50
	MsgSubscribeTracks    MessageType = 0x51
	MsgSetup              MessageType = 0x2F00
)

var messageNames = map[MessageType]string{
	MsgRequestUpdate:      "REQUEST_UPDATE",
	MsgSubscribe:          "SUBSCRIBE",
	MsgSubscribeOK:        "SUBSCRIBE_OK",
	MsgRequestError:       "REQUEST_ERROR",
	MsgPublishNamespace:   "PUBLISH_NAMESPACE",
	MsgRequestOK:          "REQUEST_OK",
	MsgNamespace:          "NAMESPACE",
	MsgPublishDone:        "PUBLISH_DONE",
	MsgTrackStatus:        "TRACK_STATUS",
	MsgNamespaceDone:      "NAMESPACE_DONE",
	MsgPublishSkipped:     "PUBLISH_SKIPPED",
	MsgGoaway:             "GOAWAY",
	MsgFetch:              "FETCH",
	MsgFetchOK:            "FETCH_OK",
	MsgPublish:            "PUBLISH",
	MsgPublishStateNotify: "PUBLISH_STATE_NOTIFY",
	MsgSubscribeNamespace: "SUBSCRIBE_NAMESPACE",
	MsgSubscribeTracks:    "SUBSCRIBE_TRACKS",
	MsgSetup:              "SETUP",
}

func (t MessageType) String() string { return codeName(messageNames, t) }

// Known reports whether t is a control message type of draft 21. A session
// of another draft asks its Profile (HasMessage).
func (t MessageType) Known() bool { return profile21.HasMessage(t) }

// IsRequest reports whether t is one of the seven messages that may open a
// request stream (§6.4.2, "Request, First" in Table 5).
func (t MessageType) IsRequest() bool {
	switch t {
	case MsgSubscribe, MsgPublish, MsgFetch, MsgTrackStatus,
		MsgPublishNamespace, MsgSubscribeNamespace, MsgSubscribeTracks:
		return true
	}
	return false
}

// MaxMessageBody is the largest control message body: the Length field is 16
// bits (§9).
const MaxMessageBody = 1<<16 - 1

// Message is a control message body. AppendBody and ParseBody handle only the
// body; AppendMessage and MessageReader add and strip the Type and Length.
type Message interface {
	Type() MessageType
	// AppendBody appends the encoded body to b.
	AppendBody(v Version, b []byte) ([]byte, error)
	// ParseBody decodes a whole body. Byte slices in the result alias body.
	ParseBody(v Version, body []byte) error
}

// AppendMessage appends m framed as Type (vi64), Length (16), Body (§9). The
// length is reserved, the body appended in place, then the length filled in,
// so a reused buffer needs no copy and no allocation.
//
// A message type that draft v does not define fails with a
// *NotInDraftError.
func AppendMessage(v Version, b []byte, m Message) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	if !prof.HasMessage(m.Type()) {
		return b, prof.notIn(m.Type().String())
	}
	start := len(b)
	b = AppendVarint(b, uint64(m.Type()))
	lenAt := len(b)
	b = append(b, 0, 0)
	b, err = m.AppendBody(v, b)
	if err != nil {
		return b[:start], err
	}
	n := len(b) - lenAt - 2
	if n > MaxMessageBody {
		return b[:start], violation("%s body is %d bytes, more than %d", m.Type(), n, MaxMessageBody)
	}
	binary.BigEndian.PutUint16(b[lenAt:], uint16(n))
	return b, nil
}

// NewMessage returns an empty message of type t, or a PROTOCOL_VIOLATION for
// a type no draft defines: an unknown message type closes the session (§9).
// ParseMessage also refuses the types the negotiated draft lacks.
func NewMessage(t MessageType) (Message, error) {
	switch t {
	case MsgSetup:
		return new(Setup), nil
	case MsgGoaway:
		return new(Goaway), nil
	case MsgSubscribe:
		return new(Subscribe), nil
	case MsgSubscribeOK:
		return new(SubscribeOK), nil
	case MsgPublishStateNotify:
		return new(PublishStateNotify), nil
	case MsgPublish:
		return new(Publish), nil
	case MsgPublishDone:
		return new(PublishDone), nil
	case MsgFetch:
		return new(Fetch), nil
	case MsgFetchOK:
		return new(FetchOK), nil
	case MsgTrackStatus:
		return new(TrackStatus), nil
	case MsgPublishNamespace:
		return new(PublishNamespace), nil
	case MsgSubscribeNamespace:
		return new(SubscribeNamespace), nil
	case MsgSubscribeTracks:
		return new(SubscribeTracks), nil
	case MsgNamespace:
		return new(NamespaceMsg), nil
	case MsgNamespaceDone:
		return new(NamespaceDone), nil
	case MsgPublishSkipped:
		return new(PublishSkipped), nil
	case MsgRequestUpdate:
		return new(RequestUpdate), nil
	case MsgRequestOK:
		return new(RequestOK), nil
	case MsgRequestError:
		return new(RequestError), nil
	}
	return nil, violation("unknown control message type 0x%x", uint64(t))
}

// ParseMessage decodes a body of type t in draft v. A type v does not
// define is an unknown message type there: PROTOCOL_VIOLATION (18/19 §10,
// 21 §9).
func ParseMessage(v Version, t MessageType, body []byte) (Message, error) {
	prof, err := profileFor(v)
	if err != nil {
		return nil, err
	}
	if !prof.HasMessage(t) {
		return nil, unknownMessage(t, v)
	}
	m, err := NewMessage(t)
	if err != nil {
		return nil, err
	}
	if err := m.ParseBody(v, body); err != nil {
		return m, err
	}
	return m, nil
}

// unknownMessage is the PROTOCOL_VIOLATION for a type v does not define.
func unknownMessage(t MessageType, v Version) error {
	return violation("unknown control message type 0x%x in %s", uint64(t), v)
}

// MessageReader reads framed control messages from a stream. It never reads
// past the end of a message, so the same stream can be handed on after any
// message. The returned body aliases an internal buffer that the next call
// reuses.
//
// The buffer grows with the bytes that actually arrive, never ahead of
// them: a peer that declares a 64 KiB message and sends three bytes costs
// a few hundred. A buffer grown past keepBuffer for one large message is
// dropped when the next read starts, so an idle reader holds little.
type MessageReader struct {
	r   io.Reader
	buf []byte
	hdr [maxVarintLen + 2]byte // the Type and Length fields
}

const (
	// minBuffer is the first size the body buffer takes: most control
	// messages fit.
	minBuffer = 256
	// keepBuffer is the largest buffer kept between messages.
	keepBuffer = 2048
	// maxVarintLen is the longest vi64 (§8.1).
	maxVarintLen = 9
)

// NewMessageReader returns a MessageReader over r.
func NewMessageReader(r io.Reader) *MessageReader { return &MessageReader{r: r} }

// ReadFrame reads one message's Type and Body. A clean end of stream before
// the first byte is io.EOF; an end inside a message is a PROTOCOL_VIOLATION
// that wraps ErrTruncated.
func (mr *MessageReader) ReadFrame() (MessageType, []byte, error) { return mr.ReadFrameOf(nil) }

// ReadFrameOf reads one message as ReadFrame does, and hands its Type to
// check, when check is not nil, as soon as the Type has arrived: an error
// from check is returned then, before the Length and Body are waited for.
// A stream's rule on the types it may carry (§6.3, §9: an unknown type
// closes the session) so holds for a message whose body never comes.
func (mr *MessageReader) ReadFrameOf(check func(MessageType) error) (MessageType, []byte, error) {
	if cap(mr.buf) > keepBuffer {
		mr.buf = nil // the previous body is no longer in use (see ReadMessage)
	}
	// Read the vi64 type: its first byte gives its length. The rest of it
	// and the 16-bit length follow in one read, unless the type is checked
	// first.
	if _, err := io.ReadFull(mr.r, mr.hdr[:1]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		return 0, nil, err
	}
	n := varintSize(mr.hdr[0])
	typeEnd := 1
	if check != nil {
		if err := mr.readFull(mr.hdr[1:n], 0, "message type"); err != nil {
			return 0, nil, err
		}
		t, _ := ParseVarint(mr.hdr[:n])
		if err := check(MessageType(t)); err != nil {
			return MessageType(t), nil, err
		}
		typeEnd = n
	}
	if err := mr.readFull(mr.hdr[typeEnd:n+2], 0, "message type and length"); err != nil {
		return 0, nil, err
	}
	t, _ := ParseVarint(mr.hdr[:n])
	l := int(binary.BigEndian.Uint16(mr.hdr[n:]))
	body := mr.buf[:0]
	for len(body) < l {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(l, max(2*cap(body), minBuffer)))
			copy(grown, body)
			body = grown
		}
		chunk := body[len(body):min(cap(body), l)]
		if err := mr.readFull(chunk, MessageType(t), " body"); err != nil {
			return 0, nil, err
		}
		body = body[:len(body)+len(chunk)]
	}
	mr.buf = body[:0]
	return MessageType(t), body, nil
}

// ReadMessage reads and decodes one message. Byte slices in the message alias
// the reader's buffer until the next call.
// A type v does not define is reported as soon as it is read, as
// ParseMessage reports it.
func (mr *MessageReader) ReadMessage(v Version) (Message, error) {
	prof, err := profileFor(v)
	if err != nil {
		return nil, err
	}
	t, body, err := mr.ReadFrameOf(func(t MessageType) error {
		if !prof.HasMessage(t) {
			return unknownMessage(t, v)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ParseMessage(v, t, body)
}

// readFull fills b. A truncation names what was being read: the message
// type t followed by what, or what alone when t is 0. The name is built
// only then, so reading costs no allocation.
func (mr *MessageReader) readFull(b []byte, t MessageType, what string) error {
	if _, err := io.ReadFull(mr.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if t != 0 {
				what = t.String() + what
			}
			return truncated(what)
		}
		return err
	}
	return nil
}
