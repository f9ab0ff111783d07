package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/throttle"
)

// TestCircuitFields: circuit_failures and circuit_cooldown reach the
// Downstream's Circuit; 0 failures is no circuit; absent, the defaults.
func TestCircuitFields(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  hooks: {rate: 3, circuit_failures: 3, circuit_cooldown: 2s}",
		"  off: {rate: 3, circuit_failures: 0}",
		"  plain: {rate: 3}",
	))
	if c := cfg.Downstreams["hooks"].Circuit; c != (throttle.Circuit{Failures: 3, Cooldown: 2 * time.Second}) {
		t.Errorf("hooks: %+v", c)
	}
	if c := cfg.Downstreams["off"].Circuit; !c.Off() {
		t.Errorf("off: %+v, want no circuit", c)
	}
	if c := cfg.Downstreams["plain"].Circuit; c != (throttle.Circuit{}) {
		t.Errorf("plain: %+v, want the defaults", c)
	}
	_, err := Parse(doc("downstreams:", "  x: {rate: 3, circuit_cooldown: 1ms}"))
	if err == nil || !strings.Contains(err.Error(), "circuit_cooldown") {
		t.Errorf("a 1ms cool-down: %v", err)
	}
}
