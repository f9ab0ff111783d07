package worker

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/queue"
)

// TestDeadLettersSurviveAJunkFlood: with queue.types in the policy, a
// flood of 10,050 jobs of a type no worker handles, each from a fresh
// tenant, is refused at POST /enqueue (400, naming the known types), so
// the 5 real dead letters stay in asynq's archive. Without the list the
// flood was accepted and archived, and asynq's archive, which keeps the
// newest 10,000, dropped the real ones.
func TestDeadLettersSurviveAJunkFlood(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer api.Close()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("queue:\n  name: dead\n  bound: 20000\n  types: [email.send]\n"+
		"downstreams:\n  api:\n    base_url: "+api.URL+"/\n    rate: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _ := runWorker(t, file, "-redis", "redis://"+srv.Addr()+"/0")
	post := func(body string) (int, queue.EnqueueResponse) { return postJob(t, addr, body) }
	for i := range 5 {
		body := fmt.Sprintf(`{"tenant":"real","type":"sluice.http","downstream":"api","id":"real-%d","max_retry":-1,"payload":{"url":"%s/x"}}`, i, api.URL)
		if code, r := post(body); code != http.StatusAccepted {
			t.Fatalf("real job %d: %d %+v", i, code, r)
		}
	}
	ins := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr()})
	defer ins.Close()
	archived := func() int {
		info, err := ins.GetQueueInfo("dead")
		if err != nil {
			return -1
		}
		return info.Archived
	}
	waitUntil(t, 20*time.Second, "archive of the 5 real dead letters", func() bool { return archived() == 5 })

	const flood = 10_050
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused, first := 0, ""
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < flood; i += 4 {
				code, r := post(fmt.Sprintf(`{"tenant":"junk-%d","type":"junk.type"}`, i))
				mu.Lock()
				if code == http.StatusBadRequest && r.Reason == "invalid" && strings.Contains(r.Error, `unknown job type "junk.type"`) {
					refused++
					first = r.Error
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if refused != flood {
		t.Fatalf("%d of %d junk jobs refused", refused, flood)
	}
	if !strings.Contains(first, "known types: email.send, sluice.http") {
		t.Errorf("the refusal does not list the known types: %s", first)
	}
	t.Logf("refusal: %s", first)
	info, err := ins.GetQueueInfo("dead")
	if err != nil {
		t.Fatal(err)
	}
	if info.Archived != 5 || info.Size != 5 {
		t.Fatalf("after the flood: %d archived, %d tasks in all; want the 5 real dead letters and nothing else", info.Archived, info.Size)
	}
	tasks, err := ins.ListArchivedTasks("dead")
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range tasks {
		if !strings.Contains(ti.ID, "real-") {
			t.Errorf("archived task %s is not one of the real dead letters", ti.ID)
		}
	}
}
