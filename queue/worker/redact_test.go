package worker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/queue"
	"github.com/sluicehq/sluice/queue/httpjob"
)

// TestMonitoringRedactsSecrets: asynqmon shows a built-in HTTP job's
// envelope with its Authorization (and like) header values hidden; other
// jobs' payloads as asynqmon's default formatter shows them.
func TestMonitoringRedactsSecrets(t *testing.T) {
	job := queue.Job{ID: "j", Tenant: "t", Type: httpjob.Type, Payload: []byte(`{"url":"https://a.com/x","header":{"Authorization":"Bearer s3cret","X-Other":"1"}}`)}
	env, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	// The envelope also carries the queue's fields, which stay shown.
	env = append(env[:len(env)-1], `,"nonce":"n0","enqueued_at":"2026-11-25T00:00:00Z"}`...)
	shown := redactedPayload(httpjob.Type, env)
	if !strings.Contains(shown, `"nonce":"n0"`) || !strings.Contains(shown, `"enqueued_at":"2026-11-25T00:00:00Z"`) {
		t.Errorf("the queue's fields are not shown: %s", shown)
	}
	var got queue.Job
	if err := json.Unmarshal([]byte(shown), &got); err != nil {
		t.Fatalf("shown %q: %v", shown, err)
	}
	if strings.Contains(shown, "s3cret") || strings.Contains(string(got.Payload), "s3cret") || !strings.Contains(string(got.Payload), httpjob.Redacted) || got.ID != "j" {
		t.Fatalf("asynqmon would show %s (payload %s)", shown, got.Payload)
	}
	other := []byte(`{"id":"k","tenant":"t","type":"x","payload":"QXV0aG9yaXphdGlvbg=="}`)
	if got := redactedPayload("x", other); got != string(other) {
		t.Fatalf("another type's payload shown as %q", got)
	}
}
