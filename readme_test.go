package moqt_test

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goBlock is a fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// readmePrelude declares, in a scope around each block, the names the
// README's snippets take as given.
const readmePrelude = `
	var (
		ctx       context.Context
		pin       string
		hash      [32]byte
		name      wire.FullTrackName
		track     wire.FullTrackName
		params    wire.Params
		stream    io.Reader
		buf       []byte
		myMetrics relay.Metrics
		sub       *moqt.Subscription
		sess      *moqt.Session
		err       error
	)
	_, _, _, _, _, _, _, _, _, _, _, _ = ctx, pin, hash, name, track, params, stream, buf, myMetrics, sub, sess, err
`

// TestReadmeCompiles type-checks every Go block of the README against the
// packages as they are, so that a renamed or changed API cannot leave the
// README's code behind. Unused names are allowed: the blocks are excerpts.
func TestReadmeCompiles(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := goBlock.FindAllStringSubmatch(string(readme), -1)
	require.GreaterOrEqual(t, len(blocks), 5, "the README's Go blocks")

	var src strings.Builder
	src.WriteString(`package readme

import (
	"context"
	"crypto/tls"
	"io"

	"github.com/moqt-go/moqt"
	"github.com/moqt-go/moqt/relay"
	"github.com/moqt-go/moqt/wire"
)

func use(...any)                     {}
func framesOf(group uint64) [][]byte { return nil }

var _ = tls.Config{}
`)
	for i, b := range blocks {
		fmt.Fprintf(&src, "\nfunc block%d() error {\n%s\n\t{\n%s\n\t}\n\treturn nil\n}\n", i, readmePrelude, b[1])
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "README.go", src.String(), 0)
	require.NoError(t, err, "%s", src.String())
	var problems []string
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "source", nil),
		Error: func(err error) {
			msg := err.Error()
			if strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used") {
				return
			}
			problems = append(problems, msg)
		},
	}
	_, _ = conf.Check("readme", fset, []*ast.File{f}, nil)
	require.Empty(t, problems, "the README's Go blocks do not compile against the packages")
}
