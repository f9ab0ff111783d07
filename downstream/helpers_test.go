package downstream

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// httptestServer serves h on loopback for the test and returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
