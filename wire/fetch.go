package wire

// Fetch is FETCH (§9.11), the first message of a fetch's request stream. The
// range to fetch is the LOCATION_FILTER parameter. TrackNamespace and
// TrackName alias the parsed body.
type Fetch struct {
	RequestID      uint64
	TrackNamespace Namespace
	TrackName      []byte
	Parameters     Params
}

// Type returns MsgFetch (§9.11).
func (*Fetch) Type() MessageType { return MsgFetch }

// AppendBody appends the FETCH body (§9.11, Figure 15).
func (m *Fetch) AppendBody(_ Version, b []byte) ([]byte, error) {
	return (*trackRequest)(m).append(b)
}

// ParseBody decodes a FETCH body (§9.11), allowing the parameters of InFetch.
// A bad range filter yields the whole message and a *RejectError.
func (m *Fetch) ParseBody(_ Version, body []byte) error {
	return (*trackRequest)(m).parse(body, InFetch, "FETCH")
}

// FetchOK is FETCH_OK (§9.12), the publisher's acceptance of a FETCH.
// TrackProperties fill the rest of the message and alias the parsed body.
//
// End Of Track is an 8-bit field whose text defines only 1 and 0; like the
// other 0/1 fields of §9.20, any other value is decoded as a
// PROTOCOL_VIOLATION. That End Location is not smaller than the FETCH's
// start (§9.12) needs the request and is checked by the session.
type FetchOK struct {
	EndOfTrack      bool
	EndLocation     Location
	Parameters      Params
	TrackProperties KVList
}

// Type returns MsgFetchOK (§9.12).
func (*FetchOK) Type() MessageType { return MsgFetchOK }

// AppendBody appends the FETCH_OK body (§9.12, Figure 16).
func (m *FetchOK) AppendBody(_ Version, b []byte) ([]byte, error) {
	b = append(b, boolByte(m.EndOfTrack))
	b = m.EndLocation.Append(b)
	b, err := m.Parameters.Append(b)
	if err != nil {
		return b, err
	}
	return m.TrackProperties.Append(b)
}

// ParseBody decodes a FETCH_OK body (§9.12), allowing the parameters of
// InFetchOK.
func (m *FetchOK) ParseBody(_ Version, body []byte) error {
	*m = FetchOK{}
	c := cursor{body}
	eot, err := c.uint8("end of track")
	if err != nil {
		return err
	}
	if eot > 1 {
		return violation("FETCH_OK end of track %d is not 0 or 1", eot)
	}
	m.EndOfTrack = eot == 1
	if m.EndLocation, err = c.location("end location"); err != nil {
		return err
	}
	rej, err := c.messageParams(&m.Parameters, InFetchOK)
	if err != nil {
		return err
	}
	if m.TrackProperties, err = c.trackProperties(); err != nil {
		return err
	}
	return c.finish("FETCH_OK", rej)
}
