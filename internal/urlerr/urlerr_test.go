package urlerr

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestReasonQuotesNothing: for URLs whose userinfo net/url mistakes for a
// host or a port, or that fail elsewhere, Reason keeps the kind of fault
// and none of the URL's text.
func TestReasonQuotesNothing(t *testing.T) {
	const secret = "s3cretPW"
	for raw, want := range map[string]string{
		"redis://:" + secret + "/x@127.0.0.1:6393/0":  "invalid port after host",
		"http://127.0.0.1:18092:" + secret + "/x":     "invalid port after host",
		"http://u:" + secret + "#x@127.0.0.1/":        "invalid port after host",
		"http://u:" + secret + "?x@127.0.0.1/":        "invalid port after host",
		"http://" + secret + "{x/y@127.0.0.1/":        "invalid character in host name",
		"http://h/%" + secret:                         "invalid URL escape",
		"http://[" + secret + "/":                     "missing ']' in host",
		"http://h/" + secret + "\x00":                 "net/url: invalid control character in URL",
		":" + secret:                                  "missing protocol scheme",
		"http://u:" + secret + "%zz@127.0.0.1:6379/0": "invalid URL escape",
	} {
		_, err := url.Parse(raw)
		if err == nil {
			t.Fatalf("%q parsed", raw)
		}
		got := Reason(err)
		if got != want || strings.Contains(got, secret) {
			t.Errorf("Reason(url.Parse(%q)) = %q, want %q (from %v)", raw, got, want, err)
		}
		// Through http.NewRequest, which wraps url.Parse's error.
		if _, err := http.NewRequest("GET", raw, nil); err == nil || Reason(err) != want {
			t.Errorf("Reason(http.NewRequest(%q)) = %q, want %q", raw, Reason(err), want)
		}
	}
	if got := Reason(errors.New(`bad "` + secret + `\" still" thing`)); got != "bad thing" {
		t.Errorf("Reason with an escaped quote: %q", got)
	}
	if Reason(nil) != "" {
		t.Error("Reason(nil) is not empty")
	}
}
