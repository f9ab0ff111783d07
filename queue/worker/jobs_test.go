package worker

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/queue"
)

// TestJobEndpoints: a job for later enqueued over HTTP is found by
// GET /jobs/{id}, listed by GET /tenants/{tenant}/jobs?delayed=1, and
// cancelled by DELETE; a foreign Origin is refused as on every endpoint.
func TestJobEndpoints(t *testing.T) {
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	os.WriteFile(policy, []byte("queue:\n  bound: 10\n"), 0o644)
	addr, out := runWorker(t, policy, "-redis", "embedded")
	do := func(method, path, origin string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", method, path, err, out.String())
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	body := `{"tenant":"a b","type":"x","id":"j1","run_at":"` + due.Format(time.RFC3339) + `"}`
	resp, err := http.Post("http://"+addr+"/enqueue", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST /enqueue: %v %v", resp, err)
	}
	resp.Body.Close()
	code, b := do("GET", "/jobs/j1?tenant=a+b", "")
	var info queue.JobInfo
	if err := json.Unmarshal([]byte(b), &info); code != 200 || err != nil || info.State != queue.StateLater || !info.Due.Equal(due) {
		t.Fatalf("GET /jobs/j1: %d %s", code, b)
	}
	if code, b2 := do("GET", "/jobs?id=j1&tenant=a+b", ""); code != 200 || !strings.Contains(b2, `"state":"later"`) || !strings.Contains(b2, info.TaskID) {
		t.Fatalf("GET /jobs?id=j1 (the page's form): %d %s; want what /jobs/j1 says", code, b2)
	}
	code, b = do("GET", "/tenants/a%20b/jobs?delayed=1", "")
	var pg queue.Page
	if err := json.Unmarshal([]byte(b), &pg); code != 200 || err != nil || len(pg.Jobs) != 1 || pg.Jobs[0].ID != "j1" || pg.Total != 1 {
		t.Fatalf("GET /tenants/a b/jobs?delayed=1: %d %s", code, b)
	}
	if code, b = do("DELETE", "/jobs/j1?tenant=a+b&later=1", "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("DELETE from a foreign origin: %d %s", code, b)
	}
	if code, b = do("DELETE", "/jobs/j1?tenant=a+b&later=1", ""); code != 200 || !strings.Contains(b, `"deleted":"j1"`) {
		t.Fatalf("DELETE /jobs/j1: %d %s", code, b)
	}
	if code, b = do("GET", "/jobs/j1?tenant=a+b", ""); code != http.StatusNotFound || !strings.Contains(b, "no such job") {
		t.Fatalf("GET of a cancelled job: %d %s", code, b)
	}
	if code, b = do("GET", "/jobs/j1", ""); code != http.StatusBadRequest {
		t.Fatalf("GET without a tenant: %d %s", code, b)
	}
	if code, b = do("GET", "/tenants/a/jobs?cursor=x", ""); code != http.StatusBadRequest {
		t.Fatalf("a bad cursor: %d %s", code, b)
	}
}
