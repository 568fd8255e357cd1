package wire

import (
	"bufio"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// vector is one golden encoding from ../testdata/wire/*.txt. The files are
// written by hand from the draft's figures, never produced by our encoder.
//
// File format: a vector starts with "name: ..."; "section: ..." names the
// draft section it follows; one or more "hex: ..." lines hold the bytes
// (spaces ignored); lines starting with '#' are comments.
type vector struct {
	Name    string
	Section string
	Bytes   []byte
}

// loadVectors reads ../testdata/wire/<file> and returns its vectors by name.
func loadVectors(t testing.TB, file string) map[string]vector {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "wire", file))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]vector{}
	var cur *vector
	flush := func() {
		if cur != nil {
			require.NotEmpty(t, cur.Section, "vector %s has no section", cur.Name)
			_, dup := out[cur.Name]
			require.False(t, dup, "duplicate vector %s", cur.Name)
			out[cur.Name] = *cur
		}
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		key, val, ok := strings.Cut(line, ":")
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case ok && key == "name":
			flush()
			cur = &vector{Name: strings.TrimSpace(val)}
		case ok && key == "section" && cur != nil:
			cur.Section = strings.TrimSpace(val)
		case ok && key == "hex" && cur != nil:
			b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(val), " ", ""))
			require.NoError(t, err, "vector %s", cur.Name)
			cur.Bytes = append(cur.Bytes, b...)
		default:
			t.Fatalf("%s: bad line %q", file, line)
		}
	}
	require.NoError(t, sc.Err())
	flush()
	return out
}
