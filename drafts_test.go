package moqt

import (
	"strings"
	"testing"

	"github.com/moqt-go/moqt/internal/transport"
	"github.com/moqt-go/moqt/wire"
)

// Conformance tests run once per draft the rule they check exists in. A
// test lists its drafts with forDrafts, which runs it as one subtest per
// draft, named for the draft's ALPN ("moqt-18"). Sessions and fake peers
// made inside over Pipes (serverSession, clientSession, newPipePair,
// forServerSessions, startLibServer) speak the draft their test's name
// carries (draftOf), so the shared helpers take no parameter for it; a
// test outside forDrafts speaks draft 21.
//
// Which tests run on which drafts (docs/design-notes.md, "Drafts 18 to
// 21"): every checklist test (TestCxxx) runs on each draft its rule
// exists in, with the draft's expectations where codes or encodings
// differ (fetchOKEnd, timedOutGap); the per-draft behaviours run on each
// draft they concern; a smoke set runs on every draft; everything else
// runs on 21 only, since the session code under it is shared. Draft 20
// has 21's wire format and rules and is covered by the smoke set only.

var (
	// everyDraft is the smoke set's list: the drafts with their own
	// wire format or rules, and 20.
	everyDraft = []wire.Version{wire.Draft21, wire.Draft20, wire.Draft19, wire.Draft18}
	// sharedDrafts are the drafts of a rule all of them have: 20 is
	// left out, being 21 on the wire and in behaviour.
	sharedDrafts = []wire.Version{wire.Draft21, wire.Draft19, wire.Draft18}
	// olderDrafts are 18 and 19, where PUBLISH_OK carries subscription
	// parameters, SUBSCRIPTION_ENDED exists and PUBLISH_STATE_NOTIFY does
	// not.
	olderDrafts = []wire.Version{wire.Draft19, wire.Draft18}
	// newerDrafts are those without 18's one subscription per track and
	// GOAWAY Request ID.
	newerDrafts = []wire.Version{wire.Draft21, wire.Draft19}
	// only18 is for the rules of draft 18 alone (GOAWAY Request ID, one
	// subscription per track, no REQUEST_UPDATE limit).
	only18 = []wire.Version{wire.Draft18}
	// only21 is for the cases of a rule 20 brought (a form or parameter
	// 18 and 19 lack) inside a test whose other cases run on more drafts;
	// a test that is 21's alone runs in inBubble.
	only21 = []wire.Version{wire.Draft21}
)

// forDrafts runs f once per draft in drafts, each in a synctest bubble of
// its own, as subtests named for the draft.
func forDrafts(t *testing.T, drafts []wire.Version, f func(t *testing.T)) {
	t.Helper()
	eachDraft(t, drafts, func(t *testing.T) { inBubble(t, f) })
}

// eachDraft runs f once per draft in drafts, as subtests named for the
// draft, outside any bubble: for bodies that make their own, such as the
// runners over both transports (forTransports, forServerSessions,
// forClientSessions), whose Pipes then speak the draft (draftOf).
func eachDraft(t *testing.T, drafts []wire.Version, f func(t *testing.T)) {
	t.Helper()
	for _, v := range drafts {
		t.Run(v.ALPN(), f)
	}
}

// draftOf is the draft a test's sessions speak: the one its name (or an
// enclosing test's) carries as a path segment, else 21.
func draftOf(t testing.TB) wire.Version {
	for seg := range strings.SplitSeq(t.Name(), "/") {
		if v, ok := wire.ParseALPN(seg); ok {
			return v
		}
	}
	return wire.Draft21
}

// draftPipe sets pc's protocol to the test's draft unless it names one.
func draftPipe(t testing.TB, pc transport.PipeConfig) transport.PipeConfig {
	if pc.Protocol == "" {
		pc.Protocol = draftOf(t).ALPN()
	}
	return pc
}

// currentGroupFilter is a LOCATION_FILTER starting at {g, 0}, the current
// group's first Object when g is the Largest Group: the relative filter
// with StartGroup 1 (21 §9.20.10) where the draft has it, else
// AbsoluteStart {g, 0}, the nearest form 18 and 19 have (§5.1.2).
func currentGroupFilter(t testing.TB, g uint64) wire.LocationFilter {
	if draftOf(t).Profile().LocationFilter == wire.FilterFieldCount {
		return wire.RelativeFilter(1)
	}
	return wire.StartFilter(wire.Location{Group: g})
}

// fetchOKEnd is the End Location FETCH_OK carries, in the test's draft,
// for a range whose last Object is end (Object wire.MaxVarint: the whole
// group): end itself on 21 (§9.12); on 18 and 19 the last Object plus
// one, Object 0 meaning the whole group (18 §10.13).
func fetchOKEnd(t testing.TB, end wire.Location) wire.Location {
	if !draftOf(t).Profile().FetchEndPlusOne {
		return end
	}
	if end.Object == wire.MaxVarint {
		return wire.Location{Group: end.Group}
	}
	return wire.Location{Group: end.Group, Object: end.Object + 1}
}

// timedOutGap is the End of Range a fetch stream reports a timed-out gap
// with in the test's draft: End of Timed-Out Range on 21 (§11.4.1.2); 18
// and 19 have none and report "Unknown gaps" (18 and 19 `{#fill-timeout}`).
func timedOutGap(t testing.TB) wire.EndOfRange {
	if draftOf(t).Profile().TimedOutRange {
		return wire.EndOfTimedOutRange
	}
	return wire.EndOfUnknownRange
}
