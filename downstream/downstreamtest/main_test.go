package downstreamtest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a server or a call left a goroutine running
// after the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
