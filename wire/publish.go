package wire

// Publish is PUBLISH (§9.8), the first message of a publisher-initiated
// subscription's request stream. Its Parameters carry the publisher's
// initial subscription settings. TrackNamespace, TrackName and
// TrackProperties alias the parsed body.
type Publish struct {
	RequestID       uint64
	TrackNamespace  Namespace
	TrackName       []byte
	TrackAlias      uint64
	Parameters      Params
	TrackProperties KVList
}

// Type returns MsgPublish (§9.8).
func (*Publish) Type() MessageType { return MsgPublish }

// AppendBody appends the PUBLISH body (§9.8, Figure 12).
func (m *Publish) AppendBody(v Version, b []byte) ([]byte, error) {
	if err := m.Parameters.permitFor(v, InPublish); err != nil {
		return b, err
	}
	b = AppendVarint(b, m.RequestID)
	b, err := FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}.Append(b)
	if err != nil {
		return b, err
	}
	b = AppendVarint(b, m.TrackAlias)
	if b, err = m.Parameters.AppendFor(v, InPublish, b); err != nil {
		return b, err
	}
	return m.TrackProperties.Append(b)
}

// ParseBody decodes a PUBLISH body (§9.8), allowing the parameters of
// InPublish.
func (m *Publish) ParseBody(v Version, body []byte) error {
	*m = Publish{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	if m.RequestID, err = c.varint("request ID"); err != nil {
		return err
	}
	name, err := c.fullTrackName()
	if err != nil {
		return err
	}
	m.TrackNamespace, m.TrackName = name.Namespace, name.Name
	if m.TrackAlias, err = c.varint("track alias"); err != nil {
		return err
	}
	rej, err := c.messageParams(prof, &m.Parameters, InPublish)
	if err != nil {
		return err
	}
	if m.TrackProperties, err = c.trackProperties(); err != nil {
		return err
	}
	return c.finish("PUBLISH", rej)
}

// PublishDone is PUBLISH_DONE (§9.9), the publisher's last message on a
// subscription's request stream. StreamCount uses the full 64-bit range;
// Profile.UnknownStreamCount (2^64-1 in 21, 2^62-1 in 18/19) means the
// publisher does not know the exact count. A StatusCode that only another
// draft defines (SUBSCRIPTION_ENDED outside 18/19) fails to encode with a
// *NotInDraftError. An
// unknown StatusCode decodes fine and is read as INTERNAL_ERROR (§13).
type PublishDone struct {
	StatusCode  PublishDoneCode
	StreamCount uint64
	ErrorReason string
}

// Type returns MsgPublishDone (§9.9).
func (*PublishDone) Type() MessageType { return MsgPublishDone }

// AppendBody appends the PUBLISH_DONE body (§9.9, Figure 13).
func (m *PublishDone) AppendBody(v Version, b []byte) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	if _, named := publishDoneNames[m.StatusCode]; named && !prof.HasPublishDoneCode(m.StatusCode) {
		return b, prof.notIn("PUBLISH_DONE code " + m.StatusCode.String())
	}
	b = AppendVarint(b, uint64(m.StatusCode))
	b = AppendVarint(b, m.StreamCount)
	return appendReason(b, m.ErrorReason)
}

// ParseBody decodes a PUBLISH_DONE body (§9.9).
func (m *PublishDone) ParseBody(_ Version, body []byte) error {
	*m = PublishDone{}
	c := cursor{body}
	code, err := c.varint("status code")
	if err != nil {
		return err
	}
	m.StatusCode = PublishDoneCode(code)
	if m.StreamCount, err = c.varint("stream count"); err != nil {
		return err
	}
	if m.ErrorReason, err = c.reason(); err != nil {
		return err
	}
	return c.done("PUBLISH_DONE")
}
