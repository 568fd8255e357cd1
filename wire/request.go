package wire

// TrackStatus is TRACK_STATUS (§9.13), the first and only message of a
// track status request stream. Its format is that of SUBSCRIBE, with the
// parameters of InTrackStatus. It is answered by REQUEST_OK
// (TRACK_STATUS_OK) or REQUEST_ERROR. TrackNamespace and TrackName alias the
// parsed body.
type TrackStatus struct {
	RequestID      uint64
	TrackNamespace Namespace
	TrackName      []byte
	Parameters     Params
}

// Type returns MsgTrackStatus (§9.13).
func (*TrackStatus) Type() MessageType { return MsgTrackStatus }

// AppendBody appends the TRACK_STATUS body (§9.13, §9.6 Figure 10).
func (m *TrackStatus) AppendBody(v Version, b []byte) ([]byte, error) {
	return (*trackRequest)(m).append(v, InTrackStatus, b)
}

// ParseBody decodes a TRACK_STATUS body (§9.13), allowing the parameters of
// InTrackStatus.
func (m *TrackStatus) ParseBody(v Version, body []byte) error {
	return (*trackRequest)(m).parse(v, body, InTrackStatus, "TRACK_STATUS")
}

// RequestUpdate is REQUEST_UPDATE (§9.5), sent on an existing request stream
// to change the request. RequestID is a new Request ID. Which parameters are
// allowed depends on the request being updated, which only the session
// knows: ParseBody accepts those of any REQUEST_UPDATE (InAnyUpdate), and
// the session then calls Check with the precise context.
type RequestUpdate struct {
	RequestID  uint64
	Parameters Params
}

// Type returns MsgRequestUpdate (§9.5).
func (*RequestUpdate) Type() MessageType { return MsgRequestUpdate }

// AppendBody appends the REQUEST_UPDATE body (§9.5, Figure 9).
func (m *RequestUpdate) AppendBody(v Version, b []byte) ([]byte, error) {
	if err := m.Parameters.permitFor(v, InAnyUpdate); err != nil {
		return b, err
	}
	b = AppendVarint(b, m.RequestID)
	return m.Parameters.AppendFor(v, InAnyUpdate, b)
}

// ParseBody decodes a REQUEST_UPDATE body (§9.5), allowing the parameters of
// InAnyUpdate. A bad range filter yields the whole message and a
// *RejectError.
func (m *RequestUpdate) ParseBody(v Version, body []byte) error {
	*m = RequestUpdate{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	if m.RequestID, err = c.varint("request ID"); err != nil {
		return err
	}
	rej, err := c.messageParams(prof, &m.Parameters, InAnyUpdate)
	if err != nil {
		return err
	}
	return c.finish("REQUEST_UPDATE", rej)
}

// Check reports a PROTOCOL_VIOLATION if the parameters are not allowed in
// ctx, the one update context of the request being updated, such as
// InUpdateSubscription (§9.20.1).
func (m *RequestUpdate) Check(ctx ParamContext) error {
	return m.Parameters.Check(ctx)
}

// RequestOK is REQUEST_OK (§9.3), the success response to PUBLISH
// (PUBLISH_OK), REQUEST_UPDATE, TRACK_STATUS, SUBSCRIBE_NAMESPACE,
// SUBSCRIBE_TRACKS and PUBLISH_NAMESPACE. ParseBody accepts the parameters of
// any of them (InAnyRequestOK) and any Track Properties; the session then
// calls Check with the precise context. TrackProperties alias the parsed
// body.
type RequestOK struct {
	Parameters      Params
	TrackProperties KVList
}

// Type returns MsgRequestOK (§9.3).
func (*RequestOK) Type() MessageType { return MsgRequestOK }

// AppendBody appends the REQUEST_OK body (§9.3, Figure 7).
func (m *RequestOK) AppendBody(v Version, b []byte) ([]byte, error) {
	b, err := m.Parameters.AppendFor(v, InAnyRequestOK, b)
	if err != nil {
		return b, err
	}
	return m.TrackProperties.Append(b)
}

// ParseBody decodes a REQUEST_OK body (§9.3), allowing the parameters of
// InAnyRequestOK.
func (m *RequestOK) ParseBody(v Version, body []byte) error {
	*m = RequestOK{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	rej, err := c.messageParams(prof, &m.Parameters, InAnyRequestOK)
	if err != nil {
		return err
	}
	if m.TrackProperties, err = c.trackProperties(); err != nil {
		return err
	}
	return c.finish("REQUEST_OK", rej)
}

// Check reports a PROTOCOL_VIOLATION if m is not valid as the response named
// by ctx, one of InPublishOK, InUpdateOK, InTrackStatusOK,
// InSubscribeNamespaceOK, InSubscribeTracksOK and InPublishNamespaceOK: a
// parameter that ctx does not allow (§9.20.1), or Track Properties in any
// response but TRACK_STATUS_OK (§9.3).
//
// §9.3 lists PUBLISH_OK, REQUEST_UPDATE_OK, SUBSCRIBE_NAMESPACE_OK and
// PUBLISH_NAMESPACE_OK as carrying empty Track Properties but omits
// SUBSCRIBE_TRACKS_OK; since it also says Track Properties are populated
// only in TRACK_STATUS_OK, SUBSCRIBE_TRACKS_OK is held to the same rule.
func (m *RequestOK) Check(ctx ParamContext) error {
	if err := m.Parameters.Check(ctx); err != nil {
		return err
	}
	if len(m.TrackProperties) > 0 && ctx != InTrackStatusOK {
		return violation("REQUEST_OK carries Track Properties outside TRACK_STATUS_OK")
	}
	return nil
}

// Redirect is the Redirect structure of REQUEST_ERROR (§9.4.1): retry the
// request at ConnectURI (empty: the current session) for the Full Track Name
// TrackNamespace and TrackName. TrackNamespace and TrackName alias the
// parsed body. The Connect URI has no length limit of its own beyond the
// message size.
type Redirect struct {
	ConnectURI     string
	TrackNamespace Namespace
	TrackName      []byte
}

func (r *Redirect) append(b []byte) ([]byte, error) {
	b = appendLenString(b, r.ConnectURI)
	return FullTrackName{Namespace: r.TrackNamespace, Name: r.TrackName}.Append(b)
}

func (c *cursor) redirect() (Redirect, error) {
	uri, err := c.lenBytes("connect URI", MaxMessageBody)
	if err != nil {
		return Redirect{}, err
	}
	name, err := c.fullTrackName()
	if err != nil {
		return Redirect{}, err
	}
	return Redirect{ConnectURI: string(uri), TrackNamespace: name.Namespace, TrackName: name.Name}, nil
}

// RequestError is REQUEST_ERROR (§9.4), the failure response to any request.
// RetryInterval is the minimum retry delay in milliseconds plus one; 0 means
// do not retry. Redirect is present exactly when ErrorCode is REDIRECT. An
// unknown ErrorCode decodes fine and is read as INTERNAL_ERROR (§13); a code
// that only another draft defines fails to encode with a *NotInDraftError.
type RequestError struct {
	ErrorCode     RequestErrorCode
	RetryInterval uint64
	ErrorReason   string
	Redirect      Opt[Redirect]
}

// Type returns MsgRequestError (§9.4.2).
func (*RequestError) Type() MessageType { return MsgRequestError }

// AppendBody appends the REQUEST_ERROR body (§9.4.2, Figure 8). It fails if
// Redirect is set without the REDIRECT code or missing with it.
func (m *RequestError) AppendBody(v Version, b []byte) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	if _, named := requestErrorNames[m.ErrorCode]; named && !prof.HasRequestError(m.ErrorCode) {
		return b, prof.notIn("REQUEST_ERROR code " + m.ErrorCode.String())
	}
	if redirect := m.ErrorCode == ReqRedirect; redirect != m.Redirect.Set {
		return b, violation("REQUEST_ERROR %s: Redirect present is %t", m.ErrorCode, m.Redirect.Set)
	}
	b = AppendVarint(b, uint64(m.ErrorCode))
	b = AppendVarint(b, m.RetryInterval)
	b, err = appendReason(b, m.ErrorReason)
	if err != nil || !m.Redirect.Set {
		return b, err
	}
	return m.Redirect.Value.append(b)
}

// ParseBody decodes a REQUEST_ERROR body (§9.4.2). A Redirect follows the
// reason only for REDIRECT (0x34); for any other code bytes after the reason
// are trailing bytes and a PROTOCOL_VIOLATION.
func (m *RequestError) ParseBody(_ Version, body []byte) error {
	*m = RequestError{}
	c := cursor{body}
	code, err := c.varint("error code")
	if err != nil {
		return err
	}
	m.ErrorCode = RequestErrorCode(code)
	if m.RetryInterval, err = c.varint("retry interval"); err != nil {
		return err
	}
	if m.ErrorReason, err = c.reason(); err != nil {
		return err
	}
	if m.ErrorCode == ReqRedirect {
		r, err := c.redirect()
		if err != nil {
			return err
		}
		m.Redirect = Some(r)
	}
	return c.done("REQUEST_ERROR")
}

// Check applies the rules of §9.4.1 that depend on the session: fromClient
// reports that the REQUEST_ERROR was sent by the client (so the receiver is
// the server), and request is the type of the request it answers (for an
// answer to REQUEST_UPDATE, the type of the updated request). A server must
// not receive a non-empty Connect URI, and a Redirect answering a
// namespace-scoped request (SUBSCRIBE_NAMESPACE, PUBLISH_NAMESPACE,
// SUBSCRIBE_TRACKS) must have an empty Track Name. Both are
// PROTOCOL_VIOLATION.
func (m *RequestError) Check(fromClient bool, request MessageType) error {
	if !m.Redirect.Set {
		return nil
	}
	r := &m.Redirect.Value
	if fromClient && r.ConnectURI != "" {
		return violation("server received a Redirect with a Connect URI")
	}
	switch request {
	case MsgSubscribeNamespace, MsgPublishNamespace, MsgSubscribeTracks:
		if len(r.TrackName) > 0 {
			return violation("Redirect for %s carries a Track Name", request)
		}
	}
	return nil
}
