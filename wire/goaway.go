package wire

// Goaway is GOAWAY (§9.2). On the control stream it drains the session; on a
// request stream it migrates that one request. NewSessionURI is at most
// MaxURILen bytes; empty means reuse the current URI. Timeout is in
// milliseconds, 0 meaning no specific timeout. That only one GOAWAY arrives
// per stream is checked by the session.
//
// RequestID exists only in draft 18 (Profile.GoawayRequestID, 18 §10.4):
// on the control stream it is the smallest peer Request ID not processed,
// and on a request stream it is absent. Which stream requires it, and its
// parity (INVALID_REQUEST_ID), are the session's to check.
type Goaway struct {
	NewSessionURI string
	Timeout       uint64
	RequestID     Opt[uint64]
}

// Type returns MsgGoaway (§9.2).
func (*Goaway) Type() MessageType { return MsgGoaway }

// AppendBody appends the GOAWAY body (§9.2, Figure 6).
func (m *Goaway) AppendBody(v Version, b []byte) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	if m.RequestID.Set && !prof.GoawayRequestID {
		return b, prof.notIn("GOAWAY Request ID")
	}
	if len(m.NewSessionURI) > MaxURILen {
		return b, violation("GOAWAY new session URI is %d bytes, more than %d", len(m.NewSessionURI), MaxURILen)
	}
	b = appendLenString(b, m.NewSessionURI)
	b = AppendVarint(b, m.Timeout)
	if m.RequestID.Set {
		b = AppendVarint(b, m.RequestID.Value)
	}
	return b, nil
}

// ParseBody decodes a GOAWAY body (§9.2). A New Session URI longer than
// MaxURILen is a PROTOCOL_VIOLATION. In draft 18 a Request ID may follow
// the Timeout.
func (m *Goaway) ParseBody(v Version, body []byte) error {
	*m = Goaway{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	uri, err := c.lenBytes("new session URI", MaxURILen)
	if err != nil {
		return err
	}
	m.NewSessionURI = string(uri)
	if m.Timeout, err = c.varint("timeout"); err != nil {
		return err
	}
	if prof.GoawayRequestID && !c.empty() {
		id, err := c.varint("request ID")
		if err != nil {
			return err
		}
		m.RequestID = Some(id)
	}
	return c.done("GOAWAY")
}

// Check applies the rule of §9.2 that depends on the sender: a GOAWAY sent
// by the client (fromClient) must carry an empty New Session URI, else the
// server closes the session with PROTOCOL_VIOLATION.
func (m *Goaway) Check(fromClient bool) error {
	if fromClient && m.NewSessionURI != "" {
		return violation("client GOAWAY carries a new session URI")
	}
	return nil
}
