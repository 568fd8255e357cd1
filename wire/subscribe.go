package wire

// Subscribe is SUBSCRIBE (§9.6), the first message of a subscription's
// request stream. Its filters, priority, forward state and fill request are
// all Parameters. TrackNamespace and TrackName alias the parsed body.
type Subscribe struct {
	RequestID      uint64
	TrackNamespace Namespace
	TrackName      []byte
	Parameters     Params
}

// Type returns MsgSubscribe (§9.6).
func (*Subscribe) Type() MessageType { return MsgSubscribe }

// AppendBody appends the SUBSCRIBE body (§9.6, Figure 10).
func (m *Subscribe) AppendBody(v Version, b []byte) ([]byte, error) {
	return (*trackRequest)(m).append(v, InSubscribe, b)
}

// ParseBody decodes a SUBSCRIBE body (§9.6), allowing the parameters of
// InSubscribe. A bad range filter yields the whole message and a
// *RejectError (INVALID_FILTER, §3.3.2).
func (m *Subscribe) ParseBody(v Version, body []byte) error {
	return (*trackRequest)(m).parse(v, body, InSubscribe, "SUBSCRIBE")
}

// SubscribeOK is SUBSCRIBE_OK (§9.7), the publisher's acceptance of a
// SUBSCRIBE. TrackProperties fill the rest of the message (§8.4) and alias
// the parsed body.
type SubscribeOK struct {
	TrackAlias      uint64
	Parameters      Params
	TrackProperties KVList
}

// Type returns MsgSubscribeOK (§9.7).
func (*SubscribeOK) Type() MessageType { return MsgSubscribeOK }

// AppendBody appends the SUBSCRIBE_OK body (§9.7, Figure 11).
func (m *SubscribeOK) AppendBody(v Version, b []byte) ([]byte, error) {
	if err := m.Parameters.permitFor(v, InSubscribeOK); err != nil {
		return b, err
	}
	b = AppendVarint(b, m.TrackAlias)
	b, err := m.Parameters.AppendFor(v, InSubscribeOK, b)
	if err != nil {
		return b, err
	}
	return m.TrackProperties.Append(b)
}

// ParseBody decodes a SUBSCRIBE_OK body (§9.7), allowing the parameters of
// InSubscribeOK.
func (m *SubscribeOK) ParseBody(v Version, body []byte) error {
	*m = SubscribeOK{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	if m.TrackAlias, err = c.varint("track alias"); err != nil {
		return err
	}
	rej, err := c.messageParams(prof, &m.Parameters, InSubscribeOK)
	if err != nil {
		return err
	}
	if m.TrackProperties, err = c.trackProperties(); err != nil {
		return err
	}
	return c.finish("SUBSCRIBE_OK", rej)
}

// PublishStateNotify is PUBLISH_STATE_NOTIFY (§9.10): the publisher's
// unilateral report of the parameters of a subscription that changed. It
// has no response. That it arrives only from the publisher of a subscription
// is checked by the session.
type PublishStateNotify struct {
	Parameters Params
}

// Type returns MsgPublishStateNotify (§9.10).
func (*PublishStateNotify) Type() MessageType { return MsgPublishStateNotify }

// AppendBody appends the PUBLISH_STATE_NOTIFY body (§9.10, Figure 14).
func (m *PublishStateNotify) AppendBody(v Version, b []byte) ([]byte, error) {
	return m.Parameters.AppendFor(v, InPublishStateNotify, b)
}

// ParseBody decodes a PUBLISH_STATE_NOTIFY body (§9.10), allowing the
// parameters of InPublishStateNotify.
func (m *PublishStateNotify) ParseBody(v Version, body []byte) error {
	*m = PublishStateNotify{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	rej, err := c.messageParams(prof, &m.Parameters, InPublishStateNotify)
	if err != nil {
		return err
	}
	return c.finish("PUBLISH_STATE_NOTIFY", rej)
}
