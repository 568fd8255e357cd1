package wire

// Fetch is FETCH (§9.11), the first message of a fetch's request stream.
// TrackNamespace and TrackName alias the parsed body.
//
// In draft 21 the range to fetch is the LOCATION_FILTER parameter and the
// fields below Parameters stay zero. Drafts 18 and 19 (Profile.JoiningFetch,
// 18/19 §10.12) carry a Fetch Type: a Standalone FETCH names the track and
// its StartLocation and EndLocation, where EndLocation is the last Object
// plus one and Object 0 means the whole End Group; a Relative or Absolute
// Joining FETCH names no track, only JoiningRequestID (the subscription
// joined) and JoiningStart. A zero FetchType encodes as Standalone.
type Fetch struct {
	RequestID      uint64
	TrackNamespace Namespace
	TrackName      []byte
	Parameters     Params

	FetchType        FetchType
	StartLocation    Location
	EndLocation      Location
	JoiningRequestID uint64
	JoiningStart     uint64
}

// FetchType is the Fetch Type of drafts 18 and 19 (§10.12).
type FetchType uint64

// Fetch Types (18/19 §10.12).
const (
	FetchStandalone      FetchType = 0x1
	FetchRelativeJoining FetchType = 0x2
	FetchAbsoluteJoining FetchType = 0x3
)

// Joining reports whether t is one of the Joining forms.
func (t FetchType) Joining() bool { return t == FetchRelativeJoining || t == FetchAbsoluteJoining }

// Type returns MsgFetch (§9.11).
func (*Fetch) Type() MessageType { return MsgFetch }

// AppendBody appends the FETCH body of draft v (21 §9.11 Figure 15; 18/19
// §10.12.3). A Joining FETCH, or Start/End Location fields, on draft 21
// fail with a *NotInDraftError.
func (m *Fetch) AppendBody(v Version, b []byte) ([]byte, error) {
	prof, err := profileFor(v)
	if err != nil {
		return b, err
	}
	if !prof.JoiningFetch {
		switch {
		case m.FetchType.Joining():
			return b, prof.notIn("a joining FETCH")
		case m.FetchType > FetchStandalone:
			return b, violation("FETCH type 0x%x", uint64(m.FetchType))
		case m.StartLocation != (Location{}) || m.EndLocation != (Location{}) || m.JoiningRequestID != 0 || m.JoiningStart != 0:
			return b, prof.notIn("FETCH Start/End Location or Joining fields")
		}
		r := trackRequest{m.RequestID, m.TrackNamespace, m.TrackName, m.Parameters}
		return r.append(v, InFetch, b)
	}
	if err := m.Parameters.permit(prof, InFetch); err != nil {
		return b, err
	}
	typ := m.FetchType
	if typ == 0 {
		typ = FetchStandalone
	}
	b = AppendVarint(b, m.RequestID)
	b = AppendVarint(b, uint64(typ))
	switch {
	case typ == FetchStandalone:
		if m.JoiningRequestID != 0 || m.JoiningStart != 0 {
			return b, violation("standalone FETCH with joining fields")
		}
		if b, err = (FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}).Append(b); err != nil {
			return b, err
		}
		b = m.EndLocation.Append(m.StartLocation.Append(b))
	case typ.Joining():
		if len(m.TrackNamespace) > 0 || len(m.TrackName) > 0 || m.StartLocation != (Location{}) || m.EndLocation != (Location{}) {
			return b, violation("joining FETCH with a track or locations")
		}
		b = AppendVarint(AppendVarint(b, m.JoiningRequestID), m.JoiningStart)
	default:
		return b, violation("FETCH type 0x%x", uint64(typ))
	}
	return m.Parameters.appendIn(prof, b)
}

// ParseBody decodes a FETCH body of draft v, allowing the parameters of
// InFetch. In 18/19 a Fetch Type other than 0x1–0x3 is a PROTOCOL_VIOLATION.
// A bad range filter yields the whole message and a *RejectError.
func (m *Fetch) ParseBody(v Version, body []byte) error {
	*m = Fetch{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	if !prof.JoiningFetch {
		var r trackRequest
		err := r.parse(v, body, InFetch, "FETCH")
		m.RequestID, m.TrackNamespace, m.TrackName, m.Parameters = r.RequestID, r.TrackNamespace, r.TrackName, r.Parameters
		return err
	}
	c := cursor{body}
	if m.RequestID, err = c.varint("request ID"); err != nil {
		return err
	}
	typ, err := c.varint("fetch type")
	if err != nil {
		return err
	}
	m.FetchType = FetchType(typ)
	switch {
	case m.FetchType == FetchStandalone:
		name, err := c.fullTrackName()
		if err != nil {
			return err
		}
		m.TrackNamespace, m.TrackName = name.Namespace, name.Name
		if m.StartLocation, err = c.location("start location"); err != nil {
			return err
		}
		if m.EndLocation, err = c.location("end location"); err != nil {
			return err
		}
	case m.FetchType.Joining():
		if m.JoiningRequestID, err = c.varint("joining request ID"); err != nil {
			return err
		}
		if m.JoiningStart, err = c.varint("joining start"); err != nil {
			return err
		}
	default:
		return violation("FETCH type 0x%x", typ)
	}
	rej, err := c.messageParams(prof, &m.Parameters, InFetch)
	if err != nil {
		return err
	}
	return c.finish("FETCH", rej)
}

// FetchOK is FETCH_OK (§9.12), the publisher's acceptance of a FETCH.
// TrackProperties fill the rest of the message and alias the parsed body.
//
// EndLocation is inclusive in draft 21. In 18 and 19
// (Profile.FetchEndPlusOne) it is the last Object plus one, Object 0 meaning
// the whole group, as in FETCH; the codec carries it unconverted.
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
func (m *FetchOK) AppendBody(v Version, b []byte) ([]byte, error) {
	if err := m.Parameters.permitFor(v, InFetchOK); err != nil {
		return b, err
	}
	b = append(b, boolByte(m.EndOfTrack))
	b = m.EndLocation.Append(b)
	b, err := m.Parameters.AppendFor(v, InFetchOK, b)
	if err != nil {
		return b, err
	}
	return m.TrackProperties.Append(b)
}

// ParseBody decodes a FETCH_OK body (§9.12), allowing the parameters of
// InFetchOK.
func (m *FetchOK) ParseBody(v Version, body []byte) error {
	*m = FetchOK{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
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
	rej, err := c.messageParams(prof, &m.Parameters, InFetchOK)
	if err != nil {
		return err
	}
	if m.TrackProperties, err = c.trackProperties(); err != nil {
		return err
	}
	return c.finish("FETCH_OK", rej)
}
