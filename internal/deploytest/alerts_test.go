package deploytest

import (
	"os/exec"
	"testing"
)

// TestRedisAlertRules: deploy/alerts.yaml passes promtool's check, and
// its Redis rules fire as testdata/redis_alerts_test.yaml says: a data
// loss reported by one worker, memory near and at the refusal share.
// Skipped without promtool (Debian's prometheus package).
func TestRedisAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	for _, args := range [][]string{
		{"check", "rules", deployDir + "/alerts.yaml"},
		{"test", "rules", "testdata/redis_alerts_test.yaml"},
	} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
