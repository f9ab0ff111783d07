package downstream

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a transport, fake server or pause left a
// goroutine running after the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// httptestServer serves h on loopback for the test and returns its URL.
func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
