package downstream

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a transport or pause left a goroutine
// running after the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
