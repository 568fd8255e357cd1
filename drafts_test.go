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
// 21"): the rules whose behaviour or encoding differs run on each draft
// they exist in, with draft-specific expectations; a smoke set runs on
// every draft; everything else runs on 21 only, since the session code
// under it is shared. Draft 20 has 21's wire format and rules and is
// covered by the smoke set only.

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
)

// forDrafts runs f once per draft in drafts, each in a synctest bubble of
// its own, as subtests named for the draft.
func forDrafts(t *testing.T, drafts []wire.Version, f func(t *testing.T)) {
	t.Helper()
	for _, v := range drafts {
		t.Run(v.ALPN(), func(t *testing.T) { inBubble(t, f) })
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
