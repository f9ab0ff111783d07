package names

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		s     string
		max   int
		extra string
		want  bool
	}{
		{"shopify", MaxLen, "", true},
		{"A-z_0.9", MaxLen, "", true},
		{"", MaxLen, "", false},
		{strings.Repeat("a", MaxLen), MaxLen, "", true},
		{strings.Repeat("a", MaxLen+1), MaxLen, "", false},
		{"a b", MaxLen, "", false},
		{"a{b}", MaxLen, "", false},
		{"a:b", MaxLen, "", false},
		{"a:b", MaxLen, ":", true},
		{"email/send:v2", 256, ":/", true},
		{"email/send", 256, ":", false},
		{"é", MaxLen, "", false},
		{"a\x00", MaxLen, "", false},
	} {
		if got := Valid(tc.s, tc.max, tc.extra); got != tc.want {
			t.Errorf("Valid(%q, %d, %q) = %v, want %v", tc.s, tc.max, tc.extra, got, tc.want)
		}
	}
}
