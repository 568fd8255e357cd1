package interop

import (
	"github.com/moqt-go/moqt/wire"
)

// draft is a MoQT draft the browser is held to. @moq/net 0.3.4 offers
// moqt-15 to moqt-20 and has code paths of its own for 17, 18 (which 19
// shares) and 20 (connection/connect.js, ietf/filter.js isDraft20).
type draft struct {
	version wire.Version
	// moqNet is what @moq/net's Connection.version reports for it
	// (ietf/version.js versionName).
	moqNet string
}

var (
	draft18 = draft{version: wire.Draft18, moqNet: "moq-transport-18"}
	draft20 = draft{version: wire.Draft20, moqNet: "moq-transport-20"}
)

// drafts are the drafts every case runs on, as subtests draft18, draft20.
var drafts = []draft{draft18, draft20}

// name is the subtest's name.
func (d draft) name() string { return "draft" + d.version.String()[len("moqt-"):] }

// versions is what our side offers to be held to d alone.
func (d draft) versions() []wire.Version { return []wire.Version{d.version} }

// is18 reports whether d takes @moq/net's draft-18 code path, where it
// differs from its draft-20 one (ietf/filter.js isDraft20).
func (d draft) is18() bool { return d.version != wire.Draft20 }
