package wire

// Request is a message that opens a request stream (§6.4.2, "Request,
// First" in Table 5): *Subscribe, *Publish, *Fetch, *TrackStatus,
// *PublishNamespace, *SubscribeNamespace or *SubscribeTracks. ParseMessage
// returns one of them for every t with t.IsRequest().
type Request interface {
	Message
	// ID is the request's Request ID (§6.4.2.1).
	ID() uint64
	// Params are the request's parameters, to read or change in place.
	Params() *Params
	// Namespace is the namespace the request names: the Track Namespace of
	// a request for one track and of PUBLISH_NAMESPACE, the Track Namespace
	// Prefix of SUBSCRIBE_NAMESPACE and SUBSCRIBE_TRACKS. Like the
	// message's own fields it may alias a parsed body.
	Namespace() Namespace
	// Track is the Full Track Name of a request for one track (SUBSCRIBE,
	// PUBLISH, FETCH, TRACK_STATUS); ok is false for a namespace request.
	Track() (t FullTrackName, ok bool)
}

// ID returns the Request ID.
func (m *Subscribe) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *Subscribe) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace.
func (m *Subscribe) Namespace() Namespace { return m.TrackNamespace }

// Track returns the Full Track Name.
func (m *Subscribe) Track() (FullTrackName, bool) {
	return FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
}

// ID returns the Request ID.
func (m *Publish) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *Publish) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace.
func (m *Publish) Namespace() Namespace { return m.TrackNamespace }

// Track returns the Full Track Name.
func (m *Publish) Track() (FullTrackName, bool) {
	return FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
}

// ID returns the Request ID.
func (m *Fetch) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *Fetch) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace.
func (m *Fetch) Namespace() Namespace { return m.TrackNamespace }

// Track returns the Full Track Name.
func (m *Fetch) Track() (FullTrackName, bool) {
	return FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
}

// ID returns the Request ID.
func (m *TrackStatus) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *TrackStatus) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace.
func (m *TrackStatus) Namespace() Namespace { return m.TrackNamespace }

// Track returns the Full Track Name.
func (m *TrackStatus) Track() (FullTrackName, bool) {
	return FullTrackName{Namespace: m.TrackNamespace, Name: m.TrackName}, true
}

// ID returns the Request ID.
func (m *PublishNamespace) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *PublishNamespace) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace.
func (m *PublishNamespace) Namespace() Namespace { return m.TrackNamespace }

// Track reports false: PUBLISH_NAMESPACE names no track.
func (m *PublishNamespace) Track() (FullTrackName, bool) { return FullTrackName{}, false }

// ID returns the Request ID.
func (m *SubscribeNamespace) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *SubscribeNamespace) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace Prefix.
func (m *SubscribeNamespace) Namespace() Namespace { return m.TrackNamespacePrefix }

// Track reports false: SUBSCRIBE_NAMESPACE names no track.
func (m *SubscribeNamespace) Track() (FullTrackName, bool) { return FullTrackName{}, false }

// ID returns the Request ID.
func (m *SubscribeTracks) ID() uint64 { return m.RequestID }

// Params returns the parameters.
func (m *SubscribeTracks) Params() *Params { return &m.Parameters }

// Namespace returns the Track Namespace Prefix.
func (m *SubscribeTracks) Namespace() Namespace { return m.TrackNamespacePrefix }

// Track reports false: SUBSCRIBE_TRACKS names no track.
func (m *SubscribeTracks) Track() (FullTrackName, bool) { return FullTrackName{}, false }
