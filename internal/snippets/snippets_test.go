package snippets

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the module's root, from this package's directory.
const root = "../.."

// fence matches a ```go block of Markdown.
var fence = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// normalise drops blank lines and each line's indentation, and folds runs
// of spaces, so that a snippet matches its copy inside a function body
// as gofmt aligns it.
func normalise(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, strings.Join(f, " "))
		}
	}
	return strings.Join(out, "\n")
}

// TestSnippets checks that every Go snippet of README.md and docs/*.md
// stands, line for line, in a _test.go file of the module, where the
// compiler checks it.
func TestSnippets(t *testing.T) {
	t.Parallel()
	var tests []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tests = append(tests, normalise(string(b)))
		}
		return nil
	})
	require.NoError(t, err)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	docs = append(docs, filepath.Join(root, "README.md"))
	found := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		for i, m := range fence.FindAllStringSubmatch(string(b), -1) {
			found++
			snippet := normalise(m[1])
			compiled := false
			for _, src := range tests {
				if strings.Contains(src, snippet) {
					compiled = true
					break
				}
			}
			if !compiled {
				t.Errorf("%s: Go snippet %d is not in any _test.go file, so nothing compiles it; copy it into internal/snippets/snippets_test.go:\n%s", doc, i+1, m[1])
			}
		}
	}
	require.Positive(t, found, "no Go snippet found: is the root right?")
}
