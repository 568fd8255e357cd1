package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/moqt-go/moqt/wire"
)

// draftFlag is -draft: the MoQT drafts a command offers (dialing) or
// accepts (serving), preferred first. Empty means every draft the library
// speaks.
type draftFlag struct{ versions []wire.Version }

func (d *draftFlag) register(fs *flag.FlagSet) {
	fs.Var(d, "draft", "the MoQT `drafts` to speak, preferred first, such as 18 or 21,18; default every one the library speaks ("+draftList(wire.Versions)+")")
}

// String is flag.Value's.
func (d *draftFlag) String() string {
	if d == nil || len(d.versions) == 0 {
		return ""
	}
	return draftList(d.versions)
}

// Set is flag.Value's: a comma-separated list of draft numbers.
func (d *draftFlag) Set(s string) error {
	vs, err := parseDrafts(s)
	if err != nil {
		return err
	}
	d.versions = vs
	return nil
}

// parseDrafts reads "21,18" or "moqt-18" into versions, refusing drafts the
// library does not speak and repeats.
func parseDrafts(s string) ([]wire.Version, error) {
	var out []wire.Version
	seen := map[wire.Version]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimPrefix(strings.TrimSpace(f), "moqt-")
		n, err := strconv.ParseUint(f, 10, 8)
		v := wire.Version(n)
		if err != nil || !v.Supported() {
			return nil, fmt.Errorf("draft %q: this moqt speaks %s", f, draftList(wire.Versions))
		}
		if seen[v] {
			return nil, fmt.Errorf("draft %d given twice", n)
		}
		seen[v] = true
		out = append(out, v)
	}
	return out, nil
}

// draftList writes versions as draft numbers: "21,20,19,18".
func draftList(vs []wire.Version) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ",")
}
