package wire

// Field helpers shared by the control message bodies of §9.

// messageParams parses Number of Parameters and the Parameters (§9.20) into
// *p. A session-level error is returned as err and ends the parse. A
// request-level *RejectError is returned as rej with *p filled in, so the
// caller can finish the body and hand back the message with the rejection.
func (c *cursor) messageParams(prof *Profile, p *Params, ctx ParamContext) (rej *RejectError, err error) {
	params, err := c.params(prof, ctx)
	if err != nil && !asReject(err, &rej) {
		return nil, err
	}
	*p = params
	return rej, nil
}

// trackProperties parses the Track Properties that fill the rest of a
// message body (§8.4). Bytes fields alias the body.
func (c *cursor) trackProperties() (KVList, error) {
	l, err := ParseKVList(c.b)
	c.b = c.b[len(c.b):]
	return l, err
}

// finish reports a PROTOCOL_VIOLATION if bytes remain, because the Length
// then does not match the body (§9); otherwise it returns rej, if any.
func (c *cursor) finish(what string, rej *RejectError) error {
	if err := c.done(what); err != nil {
		return err
	}
	if rej != nil {
		return rej
	}
	return nil
}

// appendLenString appends a vi64 length followed by s.
func appendLenString(b []byte, s string) []byte {
	b = AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// trackRequest is the body of SUBSCRIBE, FETCH and TRACK_STATUS (§9.6,
// §9.11, §9.13). Those types share its fields, so each converts to it.
type trackRequest struct {
	RequestID      uint64
	TrackNamespace Namespace
	TrackName      []byte
	Parameters     Params
}

func (r *trackRequest) append(v Version, ctx ParamContext, b []byte) ([]byte, error) {
	if err := r.Parameters.permitFor(v, ctx); err != nil {
		return b, err
	}
	b = AppendVarint(b, r.RequestID)
	b, err := FullTrackName{Namespace: r.TrackNamespace, Name: r.TrackName}.Append(b)
	if err != nil {
		return b, err
	}
	return r.Parameters.AppendFor(v, ctx, b)
}

func (r *trackRequest) parse(v Version, body []byte, ctx ParamContext, what string) error {
	*r = trackRequest{}
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	c := cursor{body}
	if r.RequestID, err = c.varint("request ID"); err != nil {
		return err
	}
	name, err := c.fullTrackName()
	if err != nil {
		return err
	}
	r.TrackNamespace, r.TrackName = name.Namespace, name.Name
	rej, err := c.messageParams(prof, &r.Parameters, ctx)
	if err != nil {
		return err
	}
	return c.finish(what, rej)
}

// appendNamespaceRequest appends Request ID, a Track Namespace (or prefix)
// and Parameters, the body of PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE and
// SUBSCRIBE_TRACKS (§9.14, §9.15, §9.18).
func appendNamespaceRequest(v Version, ctx ParamContext, b []byte, id uint64, ns Namespace, p *Params) ([]byte, error) {
	if err := p.permitFor(v, ctx); err != nil {
		return b, err
	}
	b = AppendVarint(b, id)
	b, err := ns.Append(b)
	if err != nil {
		return b, err
	}
	return p.AppendFor(v, ctx, b)
}

// parseNamespaceRequest decodes the body appendNamespaceRequest writes. On a
// *RejectError every field is filled in.
func parseNamespaceRequest(v Version, body []byte, ctx ParamContext, what string) (id uint64, ns Namespace, p Params, err error) {
	prof, err := profileFor(v)
	if err != nil {
		return 0, nil, Params{}, err
	}
	c := cursor{body}
	if id, err = c.varint("request ID"); err != nil {
		return 0, nil, Params{}, err
	}
	if ns, err = c.namespace(); err != nil {
		return 0, nil, Params{}, err
	}
	rej, err := c.messageParams(prof, &p, ctx)
	if err != nil {
		return 0, nil, Params{}, err
	}
	return id, ns, p, c.finish(what, rej)
}

// permitFor checks, before anything is appended, that draft v can carry
// every parameter of p in a message of context ctx.
func (p *Params) permitFor(v Version, ctx ParamContext) error {
	prof, err := profileFor(v)
	if err != nil {
		return err
	}
	return p.permit(prof, ctx)
}
