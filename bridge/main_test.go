package bridge

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine is left running after them: every Stop,
// including one that ends a Start, must leave nothing behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
