package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BuildSluice builds cmd/worker and cmd/enqueue of the sluice module this
// benchmark uses (the replace in bench/go.mod) into dir, and returns the
// two binaries' paths.
func BuildSluice(ctx context.Context, dir string) (worker, enqueue string, err error) {
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/sluicehq/sluice").Output()
	if err != nil {
		return "", "", fmt.Errorf("finding the sluice module (run this from the bench directory): %w", err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/worker", "./cmd/enqueue")
	build.Dir = strings.TrimSpace(string(root))
	if msg, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build ./cmd/worker ./cmd/enqueue: %w\n%s", err, msg)
	}
	return filepath.Join(dir, "worker"), filepath.Join(dir, "enqueue"), nil
}

// WriteJobs writes jobs JSON lines into parts files of dir of about the
// same size (line n into file n mod parts), line(n) giving line n without
// its newline, and returns the files' paths.
func WriteJobs(dir string, jobs, parts int, line func(n int) string) ([]string, error) {
	var paths []string
	for i := range parts {
		p := filepath.Join(dir, fmt.Sprintf("jobs-%d.jsonl", i))
		f, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		w := bufio.NewWriter(f)
		for n := i; n < jobs; n += parts {
			if _, err := w.WriteString(line(n) + "\n"); err != nil {
				f.Close()
				return nil, err
			}
		}
		if err := errors.Join(w.Flush(), f.Close()); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// Enqueue runs the enqueue binary once per file at once, each as
// `enqueue args... -q -f file`, and fails unless every one exits 0.
func Enqueue(ctx context.Context, enqueue string, args, files []string) error {
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, enqueue, append(args[:len(args):len(args)], "-q", "-f", f)...)
			var stderr strings.Builder
			cmd.Stdout, cmd.Stderr = io.Discard, &stderr // stdout: "accepted <line> <id>" per job
			if err := redistest.StartProcess(cmd); err != nil {
				errs[i] = err
				return
			}
			if err := cmd.Wait(); err != nil {
				s := stderr.String()
				if len(s) > 2000 {
					s = "…" + s[len(s)-2000:]
				}
				errs[i] = fmt.Errorf("enqueue -f %s: %w\n%s", filepath.Base(f), err, s)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// LastLines is the last three lines of the process's output, on one line,
// for a note in a report.
func (c *Child) LastLines() string {
	lines := strings.Split(strings.TrimSpace(c.Tail()), "\n")
	return strings.Join(lines[max(0, len(lines)-3):], " ⏎ ")
}
