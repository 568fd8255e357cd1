package wire

// PublishNamespace is PUBLISH_NAMESPACE (§9.14), the first message of a
// request stream advertising tracks under TrackNamespace. TrackNamespace
// aliases the parsed body.
type PublishNamespace struct {
	RequestID      uint64
	TrackNamespace Namespace
	Parameters     Params
}

// Type returns MsgPublishNamespace (§9.14).
func (*PublishNamespace) Type() MessageType { return MsgPublishNamespace }

// AppendBody appends the PUBLISH_NAMESPACE body (§9.14, Figure 17).
func (m *PublishNamespace) AppendBody(v Version, b []byte) ([]byte, error) {
	return appendNamespaceRequest(v, InPublishNamespace, b, m.RequestID, m.TrackNamespace, &m.Parameters)
}

// ParseBody decodes a PUBLISH_NAMESPACE body (§9.14), allowing the parameters
// of InPublishNamespace.
func (m *PublishNamespace) ParseBody(v Version, body []byte) error {
	var err error
	m.RequestID, m.TrackNamespace, m.Parameters, err = parseNamespaceRequest(v, body, InPublishNamespace, "PUBLISH_NAMESPACE")
	return err
}

// SubscribeNamespace is SUBSCRIBE_NAMESPACE (§9.15), the first message of a
// namespace discovery request stream. A prefix of 0 fields matches every
// namespace. TrackNamespacePrefix aliases the parsed body.
type SubscribeNamespace struct {
	RequestID            uint64
	TrackNamespacePrefix Namespace
	Parameters           Params
}

// Type returns MsgSubscribeNamespace (§9.15).
func (*SubscribeNamespace) Type() MessageType { return MsgSubscribeNamespace }

// AppendBody appends the SUBSCRIBE_NAMESPACE body (§9.15, Figure 18).
func (m *SubscribeNamespace) AppendBody(v Version, b []byte) ([]byte, error) {
	return appendNamespaceRequest(v, InSubscribeNamespace, b, m.RequestID, m.TrackNamespacePrefix, &m.Parameters)
}

// ParseBody decodes a SUBSCRIBE_NAMESPACE body (§9.15), allowing the
// parameters of InSubscribeNamespace.
func (m *SubscribeNamespace) ParseBody(v Version, body []byte) error {
	var err error
	m.RequestID, m.TrackNamespacePrefix, m.Parameters, err = parseNamespaceRequest(v, body, InSubscribeNamespace, "SUBSCRIBE_NAMESPACE")
	return err
}

// SubscribeTracks is SUBSCRIBE_TRACKS (§9.18), the first message of a
// request stream asking for PUBLISH of every track under
// TrackNamespacePrefix. TrackNamespacePrefix aliases the parsed body.
type SubscribeTracks struct {
	RequestID            uint64
	TrackNamespacePrefix Namespace
	Parameters           Params
}

// Type returns MsgSubscribeTracks (§9.18).
func (*SubscribeTracks) Type() MessageType { return MsgSubscribeTracks }

// AppendBody appends the SUBSCRIBE_TRACKS body (§9.18, Figure 21).
func (m *SubscribeTracks) AppendBody(v Version, b []byte) ([]byte, error) {
	return appendNamespaceRequest(v, InSubscribeTracks, b, m.RequestID, m.TrackNamespacePrefix, &m.Parameters)
}

// ParseBody decodes a SUBSCRIBE_TRACKS body (§9.18), allowing the parameters
// of InSubscribeTracks. A bad range filter yields the whole message and a
// *RejectError.
func (m *SubscribeTracks) ParseBody(v Version, body []byte) error {
	var err error
	m.RequestID, m.TrackNamespacePrefix, m.Parameters, err = parseNamespaceRequest(v, body, InSubscribeTracks, "SUBSCRIBE_TRACKS")
	return err
}

// NamespaceMsg is NAMESPACE (§9.16), sent on a SUBSCRIBE_NAMESPACE response
// stream: the namespace made of the request's prefix and
// TrackNamespaceSuffix is published. TrackNamespaceSuffix aliases the parsed
// body. (The name avoids the Namespace tuple type.)
type NamespaceMsg struct {
	TrackNamespaceSuffix Namespace
}

// Type returns MsgNamespace (§9.16).
func (*NamespaceMsg) Type() MessageType { return MsgNamespace }

// AppendBody appends the NAMESPACE body (§9.16, Figure 19).
func (m *NamespaceMsg) AppendBody(_ Version, b []byte) ([]byte, error) {
	return m.TrackNamespaceSuffix.Append(b)
}

// ParseBody decodes a NAMESPACE body (§9.16).
func (m *NamespaceMsg) ParseBody(_ Version, body []byte) error {
	ns, err := parseSuffix(body, "NAMESPACE")
	*m = NamespaceMsg{TrackNamespaceSuffix: ns}
	return err
}

// NamespaceDone is NAMESPACE_DONE (§9.17), sent on a SUBSCRIBE_NAMESPACE
// response stream: the namespace made of the request's prefix and
// TrackNamespaceSuffix is withdrawn. That it follows the matching NAMESPACE
// is checked by the session. TrackNamespaceSuffix aliases the parsed body.
type NamespaceDone struct {
	TrackNamespaceSuffix Namespace
}

// Type returns MsgNamespaceDone (§9.17).
func (*NamespaceDone) Type() MessageType { return MsgNamespaceDone }

// AppendBody appends the NAMESPACE_DONE body (§9.17, Figure 20).
func (m *NamespaceDone) AppendBody(_ Version, b []byte) ([]byte, error) {
	return m.TrackNamespaceSuffix.Append(b)
}

// ParseBody decodes a NAMESPACE_DONE body (§9.17).
func (m *NamespaceDone) ParseBody(_ Version, body []byte) error {
	ns, err := parseSuffix(body, "NAMESPACE_DONE")
	*m = NamespaceDone{TrackNamespaceSuffix: ns}
	return err
}

func parseSuffix(body []byte, what string) (Namespace, error) {
	c := cursor{body}
	ns, err := c.namespace()
	if err != nil {
		return nil, err
	}
	return ns, c.done(what)
}

// PublishSkipped is PUBLISH_SKIPPED (§9.19), sent on a SUBSCRIBE_TRACKS
// response stream: no PUBLISH will be sent for the track named by the
// request's prefix, TrackNamespaceSuffix and TrackName. Both fields alias
// the parsed body.
type PublishSkipped struct {
	TrackNamespaceSuffix Namespace
	TrackName            []byte
}

// Type returns MsgPublishSkipped (§9.19).
func (*PublishSkipped) Type() MessageType { return MsgPublishSkipped }

// AppendBody appends the PUBLISH_SKIPPED body (§9.19, Figure 22).
func (m *PublishSkipped) AppendBody(_ Version, b []byte) ([]byte, error) {
	return FullTrackName{Namespace: m.TrackNamespaceSuffix, Name: m.TrackName}.Append(b)
}

// ParseBody decodes a PUBLISH_SKIPPED body (§9.19).
func (m *PublishSkipped) ParseBody(_ Version, body []byte) error {
	*m = PublishSkipped{}
	c := cursor{body}
	name, err := c.fullTrackName()
	if err != nil {
		return err
	}
	m.TrackNamespaceSuffix, m.TrackName = name.Namespace, name.Name
	return c.done("PUBLISH_SKIPPED")
}
