package policy

import (
	"math"
	"strconv"
	"strings"
)

// parseShare reads a downstream's headroom, a share written as a
// percentage ("25%") or a fraction ("0.25"), from 0 to 1.
func parseShare(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	scale := 1.0
	if v, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = strings.TrimSpace(v), 100
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f/scale > 1 {
		return 0, false
	}
	return f / scale, true
}
