package policy

import (
	"strings"
	"testing"
)

// TestHeadroom: a downstream's headroom, the share of the quota the API
// reports that its bucket leaves to the quota's other clients, as a
// percentage or a fraction; refused beyond 90% or when no share.
func TestHeadroom(t *testing.T) {
	cfg := mustParse(t, doc(
		"queue: {bound: 10}",
		"downstreams:",
		"  shop: {rate: 2, burst: 40, headroom: 25%}",
		"  crm: {rate: 10, headroom: 0.1}",
		"  plain: {rate: 10}",
	))
	for name, want := range map[string]float64{"shop": 0.25, "crm": 0.1, "plain": 0} {
		if got := cfg.Downstreams[name].Headroom; got != want {
			t.Errorf("%s: Headroom %v, want %v", name, got, want)
		}
	}
	const head = "queue: {bound: 10}\ndownstreams:\n  s:\n    rate: 10\n"
	for _, v := range []string{"95%", "1.5", "-10%", "lots", "NaN"} {
		_, err := Parse([]byte(head + "    headroom: " + v + "\n"))
		if err == nil || !strings.Contains(err.Error(), "downstreams.s.headroom: must be a share of the quota from 0% to 90%") {
			t.Errorf("headroom %s: %v", v, err)
		}
	}
}
