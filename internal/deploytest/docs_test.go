package deploytest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlock is a fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// TestDocsGoIsFromExamples: every line of Go in the README and docs/ is a
// line of some Example (or other test) in the module, so that the docs'
// code is code that compiles and runs. A block may leave lines out
// ("// ..."), not change them.
func TestDocsGoIsFromExamples(t *testing.T) {
	tested := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for l := range strings.SplitSeq(string(b), "\n") {
				tested[strings.TrimSpace(l)] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := filepath.Glob("../../docs/*.md")
	blocks := 0
	for _, doc := range append(docs, "../../README.md") {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlock.FindAllStringSubmatch(string(b), -1) {
			blocks++
			for l := range strings.SplitSeq(m[1], "\n") {
				l = strings.TrimSpace(l)
				if l == "" || l == "// ..." || tested[l] {
					continue
				}
				t.Errorf("%s: Go line in no test: %q", filepath.Base(doc), l)
			}
		}
	}
	if blocks == 0 {
		t.Fatal("no Go block found: the paths are wrong")
	}
}
