package downstream

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoQueueDependency keeps the arrows one way: package downstream (the
// throttled http.RoundTripper) must not import the queue or asynq, so that
// its users do not link them. It walks the non-test imports of downstream
// and of every package of this module it reaches, from the sources.
func TestNoQueueDependency(t *testing.T) {
	const module = "github.com/sluicehq/sluice"
	forbidden := []string{module + "/queue", "github.com/hibiken/asynq"}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(pkg string, via []string)
	walk = func(pkg string, via []string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(pkg, module)))
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", pkg, err)
		}
		via = append(via, pkg)
		for _, imp := range p.Imports {
			for _, f := range forbidden {
				if imp == f || strings.HasPrefix(imp, f+"/") {
					t.Errorf("%s imports %s", strings.Join(via, " -> "), imp)
				}
			}
			if imp == module || strings.HasPrefix(imp, module+"/") {
				walk(imp, via)
			}
		}
	}
	walk(module+"/downstream", nil)
	if len(seen) < 2 {
		t.Fatalf("walked only %v: the walk does not follow imports", seen)
	}
}
