package wire

// The tables of each draft. Draft 20 and 21 share a wire format; 19 and 18
// differ as docs/drafts.md lists. Section numbers of 18 and 19 are counted
// from their kramdown headings.

var profile21 = Profile{
	Version:            Draft21,
	FillStreams:        true,
	RangeFilters:       true,
	LocationFilter:     FilterFieldCount,
	TimedOutRange:      true,
	UnknownStreamCount: MaxVarint, // §9.9
	messages:           messageNames,
	params:             params21,
	setupOptions:       setOf(SetupPath, SetupAuthorizationToken, SetupMaxAuthTokenCacheSize, SetupAuthority, SetupMaxFilterRanges, SetupMoqtImplementation, SetupMaxRequestUpdates),
	sessionErrors:      sessionErrors21,
	requestErrors:      requestErrors21,
	publishDone:        publishDone21,
}

var profile20 = func() Profile { p := profile21; p.Version = Draft20; return p }()

var profile19 = Profile{
	Version:            Draft19,
	JoiningFetch:       true,
	FetchEndPlusOne:    true,
	RangeFilters:       true,
	LocationFilter:     FilterTyped,
	UnknownStreamCount: 1<<62 - 1, // 19 §10.11
	messages:           messages19,
	params:             params19,
	setupOptions:       profile21.setupOptions,
	// 19 §15.11.1–3: VERSION_NEGOTIATION_FAILED, INVALID_JOINING_REQUEST_ID
	// and SUBSCRIPTION_ENDED still exist.
	sessionErrors: with(sessionErrors21, []SessionErrorCode{VersionNegotiationFailed}),
	requestErrors: with(requestErrors21, []RequestErrorCode{ReqInvalidJoiningRequestID}),
	publishDone:   with(publishDone21, []PublishDoneCode{DoneSubscriptionEnded}),
}

var profile18 = Profile{
	Version:            Draft18,
	JoiningFetch:       true,
	FetchEndPlusOne:    true,
	GoawayRequestID:    true,
	LocationFilter:     FilterTyped,
	UnknownStreamCount: 1<<62 - 1, // 18 §10.11
	messages:           messages18,
	params:             params18,
	// 18 §15.4: no MAX_FILTER_RANGES or MAX_REQUEST_UPDATES.
	setupOptions: setOf(SetupPath, SetupAuthorizationToken, SetupMaxAuthTokenCacheSize, SetupAuthority, SetupMoqtImplementation),
	// 18 §15.10: no TOO_MANY_REQUEST_UPDATES, CONFLICTING_FILTERS or
	// INVALID_FILTER; DUPLICATE_SUBSCRIPTION exists.
	sessionErrors: with(sessionErrors21, []SessionErrorCode{VersionNegotiationFailed}, TooManyRequestUpdates),
	requestErrors: with(requestErrors21, []RequestErrorCode{ReqInvalidJoiningRequestID, ReqDuplicateSubscription},
		ReqConflictingFilters, ReqInvalidFilter),
	publishDone: with(publishDone21, []PublishDoneCode{DoneSubscriptionEnded}),
}

// The code sets of draft 21 (§16.11).
var (
	sessionErrors21 = setOf(NoError, InternalError, Unauthorized, ProtocolViolation, InvalidRequestID,
		DuplicateTrackAlias, KeyValueFormattingError, InvalidPath, MalformedPath, GoawayTimeout,
		ControlMessageTimeout, DataStreamTimeout, AuthTokenCacheOverflow, DuplicateAuthTokenAlias,
		MalformedAuthToken, UnknownAuthTokenAlias, ExpiredAuthToken, InvalidAuthority, MalformedAuthority,
		TooManyRequestUpdates)
	requestErrors21 = setOf(ReqInternalError, ReqUnauthorized, ReqTimeout, ReqNotSupported, ReqMalformedAuthToken,
		ReqExpiredAuthToken, ReqGoingAway, ReqExcessiveLoad, ReqDoesNotExist, ReqInvalidRange, ReqMalformedTrack,
		ReqUninterested, ReqPrefixOverlap, ReqNamespaceTooLarge, ReqUnsupportedExtension, ReqRedirect,
		ReqConflictingFilters, ReqInvalidFilter)
	publishDone21 = setOf(DoneInternalError, DoneUnauthorized, DoneTrackEnded, DoneGoingAway, DoneTooFarBehind,
		DoneExpired, DoneUpdateFailed, DoneExcessiveLoad, DoneMalformedTrack)
)

// messages19 is draft 21's table without PUBLISH_STATE_NOTIFY (new in 20).
var messages19 = func() map[MessageType]string {
	m := make(map[MessageType]string, len(messageNames))
	for t, n := range messageNames {
		if t != MsgPublishStateNotify {
			m[t] = n
		}
	}
	return m
}()

// messages18 is 19's table with 0x0F under its draft-18 name. 18's Table
// also lists 0x1E as PUBLISH_OK, but its §10.5 and change log make
// PUBLISH_OK a REQUEST_OK (#1611): 0x1E is not a message there either.
var messages18 = func() map[MessageType]string {
	m := make(map[MessageType]string, len(messages19))
	for t, n := range messages19 {
		m[t] = n
	}
	m[MsgPublishSkipped] = "PUBLISH_BLOCKED"
	return m
}()

// params21 lists, per parameter, the contexts whose "MAY appear in"
// sentence in §9.20.3–§9.20.22 and §3.3.2 names it, plus SUBSCRIBE_TRACKS
// wherever SUBSCRIBE is named: "Any Parameter that can be specified on a
// Subscription (ie: in SUBSCRIBE) is valid in SUBSCRIBE_TRACKS" (§9.18.1).
var params21 = map[ParamType]ParamContext{
	ParamObjectDeliveryTimeout:   InSubscribe | InSubscribeTracks | InPublish | InAnyUpdate,
	ParamAuthorizationToken:      authTokenContexts,
	ParamRendezvousTimeout:       InSubscribe | InSubscribeTracks,
	ParamSubgroupDeliveryTimeout: InSubscribe | InSubscribeTracks | InPublish | InAnyUpdate,
	ParamExpires:                 InSubscribeOK | InPublish | InPublishOK | InSubscribeNamespaceOK | InSubscribeTracksOK | InPublishNamespaceOK | InUpdateOK,
	ParamLargestObject:           InSubscribeOK | InPublish | InUpdateOK | InTrackStatusOK | InPublishStateNotify,
	ParamFillTimeout:             InFetch | InFillParameters,
	ParamForward:                 InSubscribe | InUpdateSubscription | InUpdateSubscribeTracks | InPublish | InSubscribeTracks | InPublishStateNotify,
	ParamSubscriberPriority:      InSubscribe | InSubscribeTracks | InPublish | InFetch | InUpdateSubscription | InUpdateFetch | InFillParameters,
	ParamLocationFilter:          InFetch | InSubscribe | InSubscribeTracks | InPublish | InUpdateSubscription | InPublishStateNotify | InFillParameters,
	ParamGroupOrder:              InSubscribe | InPublish | InSubscribeTracks | InFetch | InFillParameters,
	ParamFillParameters:          InSubscribe | InSubscribeTracks | InUpdateSubscription,
	ParamSubgroupFilter:          rangeFilterContexts,
	ParamObjectIDFilter:          rangeFilterContexts,
	ParamPriorityFilter:          rangeFilterContexts,
	ParamObjectPropertyFilter:    rangeFilterContexts,
	ParamTrackPropertyFilter:     InSubscribeTracks | InUpdateSubscribeTracks,
	ParamNewGroupRequest:         InSubscribe | InSubscribeTracks | InUpdateSubscription,
	ParamTrackNamespacePrefix:    InUpdateSubscribeNamespace | InUpdateSubscribeTracks,
	ParamIncludeProperties:       InSubscribe | InTrackStatus | InFetch | InSubscribeTracks,
}

// rangeFilterContexts are the places the object range filters may appear
// in 21 (§3.3.2, §9.20.16).
const rangeFilterContexts = InFetch | InSubscribe | InSubscribeTracks | InUpdateSubscription | InFillParameters

// authTokenContexts is the same in every draft (18/19 §10.2.2, 21 §9.20.3).
const authTokenContexts = InPublish | InSubscribe | InAnyUpdate | InSubscribeNamespace | InSubscribeTracks |
	InPublishNamespace | InTrackStatus | InFetch

// params18 follows the "MAY appear in" sentences of 18 §10.2.2–§10.2.14.
// PUBLISH_OK (InPublishOK) carries the subscriber's subscription
// parameters there; FETCH has no LOCATION_FILTER (its range is in the
// message); SUBSCRIBE_TRACKS takes only what is named for it.
var params18 = map[ParamType]ParamContext{
	ParamObjectDeliveryTimeout:   InPublishOK | InSubscribe | InAnyUpdate,
	ParamAuthorizationToken:      authTokenContexts,
	ParamRendezvousTimeout:       InSubscribe,
	ParamSubgroupDeliveryTimeout: InPublishOK | InSubscribe | InAnyUpdate,
	ParamExpires:                 InSubscribeOK | InPublish | InPublishOK | InUpdateOK,
	ParamLargestObject:           InSubscribeOK | InPublish | InUpdateOK | InTrackStatusOK,
	ParamFillTimeout:             InFetch,
	ParamForward:                 InSubscribe | InUpdateSubscription | InPublish | InPublishOK | InSubscribeTracks,
	ParamSubscriberPriority:      InSubscribe | InFetch | InUpdateSubscription | InUpdateFetch | InPublishOK,
	ParamLocationFilter:          InSubscribe | InPublishOK | InUpdateSubscription,
	ParamGroupOrder:              InSubscribe | InPublishOK | InFetch,
	ParamNewGroupRequest:         InPublishOK | InSubscribe | InUpdateSubscription,
	ParamTrackNamespacePrefix:    InUpdateSubscribeNamespace | InUpdateSubscribeTracks,
}

// params19 is 18's table changed as 19 §10.2 and §5.1.3 say: range filters
// are added (FETCH, SUBSCRIBE, SUBSCRIBE_TRACKS, PUBLISH_OK, REQUEST_UPDATE
// of a subscription), GROUP_ORDER moves from PUBLISH_OK to
// SUBSCRIBE_TRACKS, EXPIRES gains the namespace OKs, and every SUBSCRIBE
// parameter is valid in SUBSCRIBE_TRACKS (§10.19.1).
var params19 = func() map[ParamType]ParamContext {
	m := make(map[ParamType]ParamContext, len(params18)+5)
	for t, c := range params18 {
		if c&InSubscribe != 0 {
			c |= InSubscribeTracks
		}
		m[t] = c
	}
	m[ParamGroupOrder] = InSubscribe | InSubscribeTracks | InFetch
	m[ParamExpires] |= InSubscribeNamespaceOK | InSubscribeTracksOK | InPublishNamespaceOK
	for t := ParamSubgroupFilter; t <= ParamObjectPropertyFilter; t++ {
		m[t] = InFetch | InSubscribe | InSubscribeTracks | InPublishOK | InUpdateSubscription
	}
	m[ParamTrackPropertyFilter] = InSubscribeTracks | InUpdateSubscribeTracks
	return m
}()
