package wire

// Goaway is GOAWAY (§9.2). On the control stream it drains the session; on a
// request stream it migrates that one request. NewSessionURI is at most
// MaxURILen bytes; empty means reuse the current URI. Timeout is in
// milliseconds, 0 meaning no specific timeout. That only one GOAWAY arrives
// per stream is checked by the session.
type Goaway struct {
	NewSessionURI string
	Timeout       uint64
}

// Type returns MsgGoaway (§9.2).
func (*Goaway) Type() MessageType { return MsgGoaway }

// AppendBody appends the GOAWAY body (§9.2, Figure 6).
func (m *Goaway) AppendBody(_ Version, b []byte) ([]byte, error) {
	if len(m.NewSessionURI) > MaxURILen {
		return b, violation("GOAWAY new session URI is %d bytes, more than %d", len(m.NewSessionURI), MaxURILen)
	}
	b = appendLenString(b, m.NewSessionURI)
	return AppendVarint(b, m.Timeout), nil
}

// ParseBody decodes a GOAWAY body (§9.2). A New Session URI longer than
// MaxURILen is a PROTOCOL_VIOLATION.
func (m *Goaway) ParseBody(_ Version, body []byte) error {
	*m = Goaway{}
	c := cursor{body}
	uri, err := c.lenBytes("new session URI", MaxURILen)
	if err != nil {
		return err
	}
	m.NewSessionURI = string(uri)
	if m.Timeout, err = c.varint("timeout"); err != nil {
		return err
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
